"""The replication RPCs: the Replication service (Follow, GetMetadata) and the admin calls that
change a member's role (GetRole, Promote, SetRole). The logic lives in ha/."""

from __future__ import annotations

import logging
import time

import grpc

from ..ha.arbiter import ArbiterError
from ..ha.election import ElectionRefused
from ..ha.master import Refused, epochs_pb, serve_follower
from ..ha.replica import Replica, RoleError
from ..v1 import admin_pb2 as apb
from ..v1 import ha_pb2 as hpb
from . import validation as v

log = logging.getLogger(__name__)


def role_status(server) -> apb.RoleStatus:
    r: Replica | None = server.replica
    store = server.store
    out = apb.RoleStatus(node=server.node_name, end_offset=store.commitlog.max_offset if store.state == "running" else 0)
    if r is None:
        out.group, out.role = server.node_name, "MASTER"
        return out
    out.group, out.role, out.mode, out.epoch = r.group, r.role, r.mode, r.epoch
    out.epochs.extend(epochs_pb(r.epochs.snapshot()))
    out.group_epoch = max(r.group_epoch, r.epoch)
    out.address = r.address
    out.members.extend(hpb.ReplicaMember(name=n, address=a) for n, a in sorted(r.members.snapshot().items()))
    if r.keeper is not None:
        k = r.keeper
        rec = k.record
        out.arbiter.CopyFrom(
            apb.ArbiterView(
                where=k.where,
                holder=rec.holder if rec else "",
                epoch=rec.epoch if rec else 0,
                in_sync=list(rec.in_sync) if rec else [],
                address=rec.address if rec else "",
                age_s=time.monotonic() - k.read_at if k.read_at else -1.0,
                valid_for_s=max(0.0, k.valid_until - time.monotonic()),
                error=k.last_error,
                elects=k.arbiter.can_elect,
            )
        )
    if r.is_master:
        end = out.end_offset
        out.fenced = r.ack_refusal()
        out.sync_state_set.extend([r.node, *r.tracker.sync_state_set()])
        out.confirm_offset = r.confirmed if r.mode == "SYNC" else end
        out.group_mode = r.mode
        for f in sorted(r.tracker.live().values(), key=lambda f: -f.acked):
            out.followers.add(
                member=f.member,
                acked_offset=f.acked,
                lag_bytes=max(0, end - f.acked),
                in_sync=f.member in r.tracker.in_sync,
                last_report_age_s=time.monotonic() - f.last_report,
                address=f.address,
            )
    else:
        out.master_address = r.master_address
        lag, lag_s = r.lag()
        out.lag_bytes, out.lag_seconds = lag, lag_s
        f = r.follower
        out.connected = bool(f and f.connected)
        out.master_end = f.master_end if f else 0
        out.in_sync = bool(f and f.connected and f.in_sync)
        out.sync_state_set.extend(f.sync_state_set if f else [])
        out.master_contact_age_s = f.contact_age() if f else -1.0
        out.group_mode = r.group_mode
    return out


class ReplicationPlane:
    """The Replication service: what a master serves its followers."""

    def __init__(self, server):
        self.server = server

    async def Follow(self, requests, context) -> None:
        replica = self.server.replica
        if replica is None or not self.server.ready.is_set():
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the store is not serving yet")

        async def reports():
            async for r in requests:
                if isinstance(r, v.BadRequest):
                    raise Refused(r.reason)
                yield r

        try:
            await serve_follower(replica, reports(), context.write)
        except Refused as e:
            log.warning("refused a follower: %s", e)
            try:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
            except grpc.aio.AbortError:
                raise
            except Exception:  # the follower is gone already (its stream was cut): nobody to tell
                return
        except StopAsyncIteration:
            return

    async def GetMetadata(self, request, context) -> hpb.Metadata:
        if not self.server.ready.is_set():
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the store is not serving yet")
        # in this order: the broker's progress, the offsets (receives move them after their
        # checkpoints), then the log end; a follower takes the offsets once its copy holds that end
        broker_state = self.server.broker.followed_state() if self.server.broker is not None else {}
        snap = self.server.store.metadata_snapshot()
        return hpb.Metadata(
            topics_json=snap["topics"],
            consumer_offsets_json=snap["offsets"],
            subscription_groups_json=snap["groups"],
            users_json=snap["users"],
            master_end=self.server.store.commitlog.max_offset,
            broker_state=broker_state,
            deleted_topics=dict(self.server.store.deleted_topics),
        )


class RoleHandlers:
    """Mixed into the admin service: ``self.server``."""

    server: object

    async def GetRole(self, request, context) -> apb.RoleStatus:
        return role_status(self.server)

    async def Promote(self, request: apb.PromoteRequest, context) -> apb.RoleStatus:
        replica = await self._replica(context)
        if request.mode not in ("", "SYNC", "ASYNC"):
            raise v.InvalidArgument("mode", f"must be SYNC or ASYNC (or empty to keep the current one), got {request.mode!r}")
        keeper = replica.keeper
        if keeper is not None and keeper.arbiter.can_elect:  # only the arbiter's record makes a master here
            try:
                record = await keeper.arbiter.read()
            except ArbiterError as e:
                await context.abort(grpc.StatusCode.UNAVAILABLE, f"{keeper.where} cannot be read: {e}")
            if record is None or record.holder != replica.node or (request.epoch and request.epoch != record.epoch):
                named = f"{record.holder} at epoch {record.epoch}" if record is not None else "no master"
                await context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"{keeper.where} names {named}: with an arbiter a member becomes master by an election (Admin.Elect, "
                    "msgstore admin promote), not by Promote",
                )
            request.epoch = record.epoch
        try:
            await replica.promote(request.epoch, request.mode)
        except RoleError as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        return role_status(self.server)

    async def SetRole(self, request: apb.SetRoleRequest, context) -> apb.RoleStatus:
        replica = await self._replica(context)
        if request.forget_member:
            try:
                replica.forget_member(request.forget_member.strip())
            except RoleError as e:
                raise v.InvalidArgument("forget_member", str(e)) from None
            if not request.master_address:
                return role_status(self.server)
        address = request.master_address.strip()
        if not address or ":" not in address:
            raise v.InvalidArgument("master_address", f"give the master's host:port, got {request.master_address!r}")
        if address == self.server.advertise:  # type: ignore[attr-defined]
            raise v.InvalidArgument("master_address", "a member cannot follow itself")
        try:
            await replica.follow(address, request.epoch)
        except RoleError as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        return role_status(self.server)

    async def Elect(self, request: apb.ElectRequest, context) -> apb.ElectResponse:
        replica = await self._replica(context)
        if request.catch_up_s < 0 or request.catch_up_s > 600:
            raise v.InvalidArgument("catch_up_s", f"must be between 0 and 600 seconds, got {request.catch_up_s}")
        try:
            result = await replica.elect(unclean=request.unclean, reason=request.reason[:200], catch_up_s=request.catch_up_s or 10.0)
        except (ElectionRefused, RoleError) as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except ArbiterError as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"nothing is elected without the arbiter: {e}")
        return apb.ElectResponse(
            status=role_status(self.server),
            epoch=result.epoch,
            old_master=result.old_master,
            fenced=result.fenced,
            notes=result.notes,
            already=result.already,
            repointed=result.repointed,
        )

    async def Fence(self, request: apb.FenceRequest, context) -> apb.RoleStatus:
        replica = await self._replica(context)
        if not request.epoch:
            raise v.InvalidArgument("epoch", "name the epoch being elected (newer than the member's)")
        try:
            replica.fence(request.epoch, request.reason[:200])
        except RoleError as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        return role_status(self.server)

    async def _replica(self, context) -> Replica:
        replica = self.server.replica  # type: ignore[attr-defined]
        if replica is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the store is not serving yet")
        return replica  # type: ignore[no-any-return]
