"""An election through the arbiter (etcd): a member makes itself its group's master, by its
own decision once its master's lease has run out (``--failover-after``), or asked by
``msgstore admin promote`` (``Admin.Elect``). On Kubernetes the operator elects instead, by
the same rules, over the group's Lease (msgstore_operator/replication.py).

The rules (RocketMQ's controller, Kafka's ISR, Patroni):

1. The candidate must be in the in-sync set *the arbiter holds* — what the master published
   before it acknowledged anything without the others — never in its own, possibly stale,
   view of it. ``unclean`` overrides, and says how much may be lost.
2. The old master must be unable to acknowledge: fenced (it answers a Fence: a switchover),
   or its lease gone. One that holds its lease and cannot be reached (a partition between the
   candidate and it, while it still reaches the arbiter) is never replaced.
3. Among the reachable members of the set, the one holding the most of the newest history
   (last epoch, end offset) is chosen; a switchover first lets the candidate catch up to the
   fenced master's end, or gives mastership back to it and says why.
4. The record is taken by compare-and-swap (two candidates: one wins, the other follows), at
   an epoch one past any the group knows, then the candidate takes office. Asked again, it
   finishes what an interrupted election left (the record names it: it takes that epoch).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field, replace

import grpc

from ..v1 import admin_pb2 as apb
from ..v1 import admin_pb2_grpc as apbg
from .arbiter import Arbiter, ArbiterError, Conflict, Record

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 1.0
CATCH_UP_S = 10.0


def _named(record: Record | None) -> str:
    """Who a record names, in words."""
    return f"{record.holder} at epoch {record.epoch}" if record is not None else "nothing"


class ElectionRefused(Exception):
    """Electing this member could lose acknowledged messages, or cannot be proved safe; the
    message says why and what to do. Nothing was changed (or what was, was undone)."""


@dataclass
class Result:
    epoch: int
    old_master: str = ""
    fenced: bool = False
    notes: list[str] = field(default_factory=list)
    already: bool = False
    repointed: list[str] = field(default_factory=list)


def rank(role: apb.RoleStatus) -> tuple[int, int]:
    """Who holds the most of the newest history: (last epoch, end offset)."""
    return (role.epochs[-1].epoch if role.epochs else role.epoch, role.end_offset)


class Election:
    """One election for ``replica`` (the candidate itself) through ``arbiter``."""

    def __init__(self, replica, arbiter: Arbiter, *, unclean: bool = False, reason: str = "", catch_up_s: float = CATCH_UP_S):
        self.replica = replica
        self.arbiter = arbiter
        self.unclean = unclean
        self.reason = reason or "msgstore admin promote"
        self.catch_up_s = catch_up_s

    # ------------------------------------------------------------------ calls to other members

    def _stub(self, address: str) -> apbg.AdminStub:
        return apbg.AdminStub(self.replica.channel(address))

    async def _role(self, address: str) -> apb.RoleStatus | None:
        try:
            return await self._stub(address).GetRole(
                apb.GetRoleRequest(), timeout=CALL_TIMEOUT_S, metadata=self.replica.call_metadata() or None
            )
        except grpc.aio.AioRpcError:
            return None

    async def _roles(self, names: list[str]) -> dict[str, apb.RoleStatus | None]:
        members = self.replica.members.snapshot()
        known = [n for n in names if members.get(n)]
        answers = await asyncio.gather(*(self._role(members[n]) for n in known))
        return dict(zip(known, answers))

    async def _fence(self, address: str, epoch: int) -> apb.RoleStatus | None:
        try:
            return await self._stub(address).Fence(
                apb.FenceRequest(epoch=epoch, reason=f"{self.replica.node} is being elected ({self.reason})"),
                timeout=CALL_TIMEOUT_S * 2,
                metadata=self.replica.call_metadata() or None,
            )
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.FAILED_PRECONDITION:  # it already knows a newer epoch: fenced as well
                log.info("fencing %s: %s", address, e.details())
            return None

    async def _promote_other(self, address: str, epoch: int) -> bool:
        try:
            await self._stub(address).Promote(apb.PromoteRequest(epoch=epoch), timeout=30, metadata=self.replica.call_metadata() or None)
            return True
        except grpc.aio.AioRpcError as e:
            log.warning("giving mastership back to %s failed: %s", address, e.details())
            return False

    # ------------------------------------------------------------------ the election

    async def run(self, *, auto: bool = False) -> Result:
        r = self.replica
        me = r.node
        record = await self.arbiter.read()
        if record is not None and record.holder == me:
            if r.is_master and r.epoch == record.epoch and not r.gate.deposed:
                return Result(record.epoch, notes=[f"{me} already is the master of {r.group} at epoch {record.epoch}"], already=True)
            if record.epoch > r.epoch:  # an election that named us and was interrupted before we took office
                await r.promote(record.epoch, record.mode)
                return Result(record.epoch, notes=[f"finished the election of epoch {record.epoch} recorded in {self.arbiter.where}"])
        if record is None:
            if not self.unclean:
                raise ElectionRefused(
                    f"{self.arbiter.where} holds no record of {r.group}: its master has never held it, so nobody can say which "
                    "members hold what it acknowledged. Start the group's master with the same --arbiter, or pass --unclean"
                )
            record_epoch, in_sync, holder = 0, (), ""
        else:
            record_epoch, in_sync, holder = record.epoch, record.in_sync, record.holder
        if me not in in_sync and not self.unclean:
            raise ElectionRefused(
                f"{me} is not in the in-sync set {self.arbiter.where} holds for {r.group} ({', '.join(in_sync) or 'empty'}): it may "
                "lack acknowledged messages. Promote one of those, or pass --unclean"
            )
        epoch = max(record_epoch, r.epoch, r.group_epoch) + 1
        result = Result(epoch, old_master=holder)
        fenced_end: int | None = None
        if holder and holder != me and record is not None:
            if await self.arbiter.holder_alive(record):
                fenced = await self._fence(record.address, epoch) if record.address else None
                if fenced is not None:
                    fenced_end, result.fenced = fenced.end_offset, True
                    result.notes.append(
                        f"fenced {holder} at {record.address}: it acknowledges nothing from now on (its log ends at {fenced_end})"
                    )
                else:
                    await self._await_expiry(record)
                    result.notes.append(f"{holder}'s lease in {self.arbiter.where} ran out: it acknowledges nothing")
            else:
                result.notes.append(f"{holder}'s lease in {self.arbiter.where} has run out: it acknowledges nothing")
        mode = (record.mode if record is not None else "") or r.group_mode or r.mode
        try:
            if fenced_end is not None:
                await self._catch_up(fenced_end, result)
            else:
                await self._check_rank(record, in_sync, mode, auto, result)
            mine = r.store.commitlog.max_offset
            new = Record(
                holder=me,
                epoch=epoch,
                in_sync=(me,),
                address=r.address,
                end_offset=mine,
                mode=mode,
                elected_by=f"{me}: {self.reason}",
                elected_at=int(time.time() * 1000),
            )
            await self._take(record, new, fenced=result.fenced)
        except BaseException as e:  # (a cancelled Elect call too): a fenced master must not stay fenced for nothing
            if result.fenced and record is not None:
                restored = await asyncio.shield(self._give_back(record, epoch))
                if isinstance(e, ElectionRefused):
                    raise ElectionRefused(f"{e}. The switchover was aborted: {restored}") from None
            raise
        if self.unclean and record is not None and me not in in_sync:
            result.notes.append(
                f"unclean: {me} was not in the in-sync set ({', '.join(in_sync) or 'empty'}); {record.holder}'s log reached "
                f"{record.end_offset} at its last renewal, this member's ends at {mine}: up to {max(0, record.end_offset - mine)} bytes "
                "acknowledged there may be lost"
            )
        await r.promote(epoch, mode)
        log.warning("%s elected master of %s at epoch %d through %s (%s)", me, r.group, epoch, self.arbiter.where, self.reason)
        await self._repoint(epoch, result)
        return result

    async def _await_expiry(self, record: Record) -> None:
        """The holder does not answer: wait for its lease to run out (it then acknowledges
        nothing), at most one lease; refuse when it is still held."""
        deadline = time.monotonic() + self.arbiter.duration + 1.0
        while time.monotonic() < deadline:
            await asyncio.sleep(0.25)
            now = await self.arbiter.read()
            if now is None or now.version != record.version:
                raise ElectionRefused(f"{self.arbiter.where} changed while waiting for {record.holder}'s lease (another election?)")
            if not await self.arbiter.holder_alive(record):
                return
        raise ElectionRefused(
            f"{record.holder} cannot be reached from {self.replica.node} but still renews its lease in {self.arbiter.where}: it may "
            "be acknowledging writes (a partition between the two?). Nothing was changed; promote a member that reaches it, or "
            "stop it"
        )

    async def _check_rank(self, record: Record | None, in_sync: tuple[str, ...], mode: str, auto: bool, result: Result) -> None:
        """No fenced end to catch up to: among the reachable members of the set, this one must
        hold the most of the newest history (in SYNC mode every member of the set holds every
        acknowledged put; more is still better, and an automatic election leaves it to that one)."""
        r = self.replica
        others = [n for n in in_sync if n not in (r.node, record.holder if record else "")]
        roles = await self._roles(others)
        mine = rank_of_self(r)
        better = [(n, x) for n, x in roles.items() if x is not None and rank(x) > mine]
        if auto:  # one that cannot reach the arbiter cannot stand: not waited for
            better = [(n, x) for n, x in better if x.HasField("arbiter") and 0 <= x.arbiter.age_s < 3]
        if not better:
            return
        n, x = max(better, key=lambda nx: rank(nx[1]))
        if auto:
            raise ElectionRefused(f"{n} holds more of {r.group}'s history (epoch {rank(x)[0]} to {x.end_offset}): it stands instead")
        if mode == "SYNC":
            result.notes.append(f"{n} holds more ({x.end_offset} against {mine[1]}), none of it acknowledged (SYNC mode)")
            return
        if not self.unclean:
            raise ElectionRefused(
                f"{n} holds more of {r.group}'s history than {r.node} (epoch {rank(x)[0]} to {x.end_offset} against epoch {mine[0]} "
                f"to {mine[1]}): promote {n}, or pass --unclean"
            )
        result.notes.append(f"unclean: {n} holds {x.end_offset - mine[1]} bytes more, which are lost")

    async def _catch_up(self, end: int, result: Result) -> None:
        """Until this member holds all the fenced master has; otherwise refuse, saying why (the
        caller gives the master its office back)."""
        r = self.replica
        deadline = time.monotonic() + self.catch_up_s
        while r.store.commitlog.max_offset < end and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        held = r.store.commitlog.max_offset
        if held >= end:
            result.notes.append(f"{r.node} holds everything the fenced master has (to {end})")
            return
        if self.unclean:
            result.notes.append(f"unclean: {end - held} bytes the fenced master held are not on {r.node}")
            return
        raise ElectionRefused(
            f"{r.node} holds {end - held} bytes less than the fenced master after {self.catch_up_s:.0f} s (it ends at {held}, the "
            f"master at {end}); bring it in touch with the master and retry, or pass --unclean"
        )

    async def _take(self, seen: Record | None, new: Record, fenced: bool) -> None:
        """The record by compare-and-swap; read again on a conflict: written already (a retried
        request that had committed), or moved only by the old holder's own write while it could
        not acknowledge (fenced, or its lease still gone), then once more; otherwise refused."""
        where = self.arbiter.where
        for _ in range(3):
            try:
                await self.arbiter.take(seen, new)
                return
            except Conflict:
                now = await self.arbiter.read()
            if now is not None and now.holder == new.holder and now.epoch == new.epoch:
                return
            if now is None or seen is None or (now.holder, now.epoch) != (seen.holder, seen.epoch):
                raise ElectionRefused(
                    f"{where} changed while {new.holder} was being elected (it names {_named(now)} now): another election?"
                )
            if not fenced and await self.arbiter.holder_alive(now):
                raise ElectionRefused(f"{now.holder} renewed its lease in {where} meanwhile: it may be acknowledging; nothing was done")
            seen = now
        raise ElectionRefused(f"{where} kept changing while {new.holder} was being elected")

    async def _give_back(self, record: Record, epoch: int) -> str:
        """The fenced master's office back, at the epoch being elected (named in the record
        first, then promoted); what happened, in words."""
        r = self.replica
        try:
            now = await self.arbiter.read()
            if now is None or (now.holder, now.epoch) != (record.holder, record.epoch):
                return f"{self.arbiter.where} names {_named(now)} now, so {record.holder} stays fenced"
            back = replace(
                now,
                epoch=epoch,
                lease=0,
                elected_by=f"{r.node}: switchover aborted, {record.holder} keeps its office",
                elected_at=int(time.time() * 1000),
            )
            await self.arbiter.take(now, back)
        except (Conflict, ArbiterError) as e:
            return f"giving {record.holder} its office back failed ({e}): elect a member again"
        restored = await self._promote_other(record.address, epoch)
        log.warning("%s: switchover aborted; %s is the master again at epoch %d", r.node, record.holder, epoch)
        return (
            f"{record.holder} "
            + ("is the master again" if restored else "is named master again and takes office when it hears it")
            + (f" at epoch {epoch}")
        )

    async def _repoint(self, epoch: int, result: Result) -> None:
        """Tell the others now (they would learn it from the arbiter within a second or so)."""
        r = self.replica
        others = r.members.others()

        async def tell(name: str, address: str) -> None:
            try:
                await self._stub(address).SetRole(
                    apb.SetRoleRequest(master_address=r.address, epoch=epoch),
                    timeout=CALL_TIMEOUT_S * 2,
                    metadata=r.call_metadata() or None,
                )
                result.repointed.append(name)
            except grpc.aio.AioRpcError as e:
                result.notes.append(f"{name} ({address}) was not told ({e.code().name}): it learns of epoch {epoch} from the arbiter")

        await asyncio.gather(*(tell(n, a) for n, a in others.items()))


def rank_of_self(replica) -> tuple[int, int]:
    snap = replica.epochs.snapshot()
    return (snap[-1].epoch if snap else replica.epoch, replica.store.commitlog.max_offset)
