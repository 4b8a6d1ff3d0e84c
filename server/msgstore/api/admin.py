"""The control plane (``msgstore.v1.Admin``)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import grpc

from .. import __version__
from ..store.config import ConfigError
from ..v1 import admin_pb2 as apb
from ..wire import config_text
from . import validation as v
from .ha_service import RoleHandlers
from .user_service import UserHandlers

if TYPE_CHECKING:
    from .member import Member


def _strings(d: dict[str, Any]) -> dict[str, str]:
    return {k: config_text(val) for k, val in d.items()}


class ControlPlane(RoleHandlers, UserHandlers):
    def __init__(self, server: Member):
        self.server = server

    @property
    def store(self):
        return self.server.store

    async def _ready(self, context) -> None:
        reason = self.server.unavailable_reason()
        if reason:
            await context.abort(grpc.StatusCode.UNAVAILABLE, reason)

    async def GetStatus(self, request, context) -> apb.StoreStatus:
        """Answered while recovering too: that is when progress matters most."""
        st = self.store.status()
        rec = st["recovery"]
        out = apb.StoreStatus(
            node=self.server.node_name,
            state=st["state"],
            version=__version__,
            recovery=apb.Recovery(
                mode=rec["mode"],
                state=rec["state"],
                progress=rec["progress"],
                duration_ms=rec["duration_ms"],
                bytes_scanned=rec["bytes_scanned"],
                bytes_truncated=rec["bytes_truncated"],
                records_scanned=rec["records_scanned"],
                index_files_destroyed=rec["index_files_destroyed"],
                index_rebuilt_from=rec["index_rebuilt_from"],
                commitlog_end=rec["commitlog_end"],
                damage=rec["damage"],
                error=rec["error"],
                started_ms=rec["started_ms"],
            ),
            disk_usage=-1 if st["disk_usage"] is None else st["disk_usage"],
            disk_full=st["disk_full"],
            config_generation=st["config_generation"],
            config=_strings(self.store.config.to_dict()),
            pending_restart=_strings(st["pending_restart"]),
            writable=st["writable"],
            unavailable=st["unavailable"],
            flush_disk_type=self.store.config.flushDiskType,
        )
        if st["state"] in ("running", "shutting_down"):
            out.min_phy_offset = st["min_phy_offset"]
            out.max_phy_offset = st["max_phy_offset"]
            out.flushed_phy_offset = st["flushed_phy_offset"]
            out.dispatch_behind_bytes = st["dispatch_behind_bytes"]
            out.commitlog_segments = st["commitlog_segments"]
            out.consume_queues = st["consume_queues"]
            out.index_files = st["index_files"]
            out.topics = st["topics"]
            out.messages_held = st["messages_held"]
            out.consumer_lag.update(st["consumer_lag"])  # the same progress DescribeGroups shows
            out.group_members.update({g.name: len(g.members) for g in self.server.groups.all() if g.members})
        return out

    async def GetConfig(self, request, context) -> apb.ConfigResponse:
        return apb.ConfigResponse(
            config=_strings(self.store.config.to_dict()),
            generation=self.store.generation,
            pending_restart=_strings(self.store.pending_restart),
        )

    async def UpdateConfig(self, request: apb.UpdateConfigRequest, context) -> apb.UpdateConfigResponse:
        await self._ready(context)
        if not request.changes:
            raise v.InvalidArgument("changes", "name at least one key")
        refused = self.server.authorization_refused(dict(request.changes))
        if refused:
            raise v.InvalidArgument("changes['authorizationEnabled']", refused)
        try:
            res = self.store.update_config(dict(request.changes), dry_run=request.dry_run)
        except ConfigError as e:
            # (the key as text; a "]" in it would end the field's brackets early)
            raise v.InvalidArgument("changes[" + repr(e.key).replace("]", "\\x5d") + "]", e.reason) from None
        return apb.UpdateConfigResponse(
            applied=_strings(res.applied), restart_required=_strings(res.restart_required), generation=res.generation, dry_run=res.dry_run
        )

    async def ManualDelete(self, request, context) -> apb.ManualDeleteResponse:
        await self._ready(context)
        loop = asyncio.get_running_loop()
        deleted = await loop.run_in_executor(self.server.executor, self.store.manual_delete)
        return apb.ManualDeleteResponse(
            deleted_segments=deleted, min_phy_offset=self.store.commitlog.min_offset, runs_armed=self.store.cleaner.manual_runs_left
        )

    async def CleanExpiredConsumeQueues(self, request, context) -> apb.CleanResponse:
        await self._ready(context)
        return apb.CleanResponse(removed=self.store.clean_expired_consume_queues())

    async def CleanUnusedTopics(self, request, context) -> apb.CleanResponse:
        await self._ready(context)
        return apb.CleanResponse(removed=self.store.clean_unused_topics())
