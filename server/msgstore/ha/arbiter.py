"""The arbiter of a replica group: the one record, kept by a store with linearizable
compare-and-swap and leases, that says who the group's master is, at what epoch, and which
members hold everything it acknowledged (the in-sync set). On Kubernetes it is the group's
``coordination.k8s.io`` Lease (``lease.py``); elsewhere a key in etcd (``etcd.py``). Never a
quorum protocol of our own: Patroni, Kafka's ZooKeeper mode and RocketMQ's controller keep
this record the same way.

The rules are written once, here, whichever backend holds the record:

- The master acknowledges only while its hold on the record is fresh: until ``renew deadline``
  (two thirds of the lease's duration) after it *sent* its last successful renewal, so it has
  stopped before anyone can see the lease expire (client-go leader election's rule).
- It publishes every change of its in-sync set to the record before it acknowledges a put
  without a member that left (the tracker keeps waiting for that member until
  :meth:`ArbiterKeeper.publish` is confirmed by ``on_published``).
- A record naming another holder, or a newer epoch, deposes it at once; a record naming it at
  an older epoch than its own does not let it acknowledge (only an election makes a master).
- Elections (``election.py``; the operator on Kubernetes) read the in-sync set from the record,
  never from a candidate's own view, rank by (last epoch, end offset), take the record by
  compare-and-swap, and are idempotent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

log = logging.getLogger(__name__)

RENEW_FRACTION = 2 / 3  # renew deadline / lease duration (client-go: 10 s of 15)


@dataclass(frozen=True)
class Record:
    """One replica group's entry in the arbiter."""

    holder: str  # the master's member name ('' before the first master)
    epoch: int
    in_sync: tuple[str, ...] = ()  # the holder's in-sync set, itself included
    address: str = ""  # where the holder serves (host:port)
    end_offset: int = 0  # the holder's commit-log end at its last renewal
    mode: str = ""  # SYNC or ASYNC
    lease: int = 0  # etcd: the holder's lease (0: none yet; the Lease object's own on Kubernetes)
    elected_by: str = ""  # who wrote this term (said in status and logs)
    elected_at: int = 0  # when, in ms since the epoch (the elector's clock, read before it wrote)
    version: object = field(default=None, compare=False)  # the backend's compare-and-swap token

    def names(self, member: str) -> bool:
        return self.holder == member


class ArbiterError(RuntimeError):
    """The arbiter could not be asked (unreachable, refused); nothing was changed."""


class Conflict(ArbiterError):
    """The record changed since it was read: read it again and decide again."""


class Arbiter:
    """A backend: where the record lives. Every call may raise :class:`ArbiterError`."""

    where = "the arbiter"
    duration = 15.0  # the holder's lease, seconds
    can_elect = False  # members may elect through it (etcd); on Kubernetes the operator elects

    async def read(self) -> Record | None:
        raise NotImplementedError

    async def renew(self, seen: Record | None, mine: Record) -> Record:
        """The holder's renewal: keep its lease alive and write ``mine`` (its in-sync set,
        address, end), by compare-and-swap on ``seen``. Raises :class:`Conflict` when the
        record changed since; returns the record as written."""
        raise NotImplementedError

    async def holder_alive(self, record: Record) -> bool:
        """Whether the holder may still be acknowledging (its lease has not expired)."""
        raise NotImplementedError

    async def take(self, seen: Record | None, new: Record) -> Record:
        """An election: write ``new`` if the record is still ``seen`` (:class:`Conflict` otherwise)."""
        raise NotImplementedError

    async def resign(self, record: Record) -> None:
        """The holder stops (a clean shutdown, a demotion): its lease ends now, so an election
        need not wait for it to expire. The record itself stays."""

    async def close(self) -> None:
        pass


class ArbiterKeeper:
    """The master's side: its hold on the record, renewed on the server's event loop."""

    def __init__(self, arbiter: Arbiter, identity: str, address: str, group: str = ""):
        self.arbiter = arbiter
        self.identity = identity
        self.address = address
        self.group = group
        self.valid_until = 0.0  # monotonic: acknowledge only before this
        self.wanted: list[str] = [identity]  # the in-sync set to publish
        self.published: list[str] = []
        self.last_error = ""
        self.record: Record | None = None  # as last read or written
        self.read_at = 0.0  # monotonic time of that
        self.renewals = 0  # successful renewals (figures)
        self.epoch: Callable[[], int] = lambda: 0
        self.mode: Callable[[], str] = lambda: ""
        self.is_master: Callable[[], bool] = lambda: False
        self.end_offset: Callable[[], int] = lambda: 0
        self.on_deposed: Callable[[str, int], None] = lambda reason, epoch: None
        self.on_published: Callable[[list[str]], None] = lambda members: None
        self.on_record: Callable[[Record | None], None] = lambda record: None  # every record read (members follow it)
        self._wake = asyncio.Event()
        self._stopped = False
        self._task: asyncio.Task | None = None

    @property
    def where(self) -> str:
        return self.arbiter.where

    # ------------------------------------------------------------------ the member's side

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Stop renewing, and acknowledging (first thing at shutdown: a master that renews while
        its followers disconnect would publish an in-sync set of itself alone)."""
        self._stopped = True
        self.valid_until = 0.0
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass

    async def resign(self) -> None:
        """At the end of a clean shutdown: end the lease now, so that an election need not wait
        for it to run out (the record itself stays: the next election reads its in-sync set)."""
        if self.record is not None and self.record.holder == self.identity:
            try:
                await asyncio.wait_for(self.arbiter.resign(self.record), 2.0)
            except Exception as e:
                log.info("%s: resigning failed (%s); the lease runs out by itself", self.where, e)
        await self.arbiter.close()

    def publish(self, members: list[str]) -> None:
        """The in-sync set changed: the arbiter must hold it before a put is acknowledged
        without a member that left (the tracker waits for :attr:`on_published`)."""
        self.wanted = [self.identity, *members]
        self._wake.set()

    def taken_office(self, in_sync: list[str] | None = None) -> None:
        """A new term: nothing is acknowledged until the record is renewed at the new epoch.
        ``in_sync``: the followers in sync now (a master given its office back keeps them; the
        tracker publishes only changes, so they must be named here or the record would hold
        the master alone until one left)."""
        self.valid_until = 0.0
        self.wanted = [self.identity, *(in_sync or [])]
        self.published = []
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def refusal(self) -> str:
        if time.monotonic() < self.valid_until:
            return ""
        why = f": {self.last_error}" if self.last_error else ""
        return f"{self.identity} holds no fresh renewal of {self.where} (the arbiter of who is master){why}"

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        while not self._stopped:
            retry = min(2.0, self.arbiter.duration / 5)
            try:
                retry = await self.round()
            except asyncio.CancelledError:
                raise
            except Conflict:
                retry = 0.0  # changed meanwhile (an election?): read it again at once
            except Exception as e:  # the arbiter is away: the deadline runs out by itself
                self.last_error = f"renewing failed: {e.__class__.__name__}: {str(e)[:200]}"
                log.warning("%s: %s", self.where, self.last_error)
                retry = 0.5
            try:
                await asyncio.wait_for(self._wake.wait(), retry)
            except TimeoutError:
                pass
            self._wake.clear()

    async def round(self) -> float:
        """One look at the record, and a renewal when this member is its master; returns how
        long to wait before the next."""
        retry = min(2.0, self.arbiter.duration / 5)
        if not self.is_master() and not self.arbiter.can_elect:
            self.valid_until = 0.0  # (on Kubernetes the operator tells followers; they need not read)
            return retry
        sent = time.monotonic()
        record = await self.arbiter.read()
        self.record, self.read_at = record, time.monotonic()
        self.on_record(record)
        if not self.is_master():
            self.valid_until = 0.0
            return min(1.0, retry)
        mine = self.epoch()
        if record is not None and (record.holder != self.identity or record.epoch > mine):
            self.valid_until = 0.0
            self.last_error = f"it names {record.holder or 'nobody'} at epoch {record.epoch}"
            self.on_deposed(
                f"{self.where} names {record.holder or 'nobody'} at epoch {record.epoch}: this member was replaced", record.epoch
            )
            return retry
        if record is not None and record.epoch < mine:
            self.valid_until = 0.0
            self.last_error = (
                f"it names epoch {record.epoch}, this member is at epoch {mine}: only an election through the arbiter makes a master"
            )
            return retry
        if record is None and not self.arbiter.can_elect:
            self.valid_until = 0.0
            self.last_error = "it does not exist yet (the operator creates it)"
            return retry
        wanted = list(self.wanted)
        base = record or Record(
            holder=self.identity, epoch=mine, elected_by=f"{self.identity} (the group's first master)", elected_at=int(time.time() * 1000)
        )
        desired = replace(base, in_sync=tuple(wanted), address=self.address, end_offset=self.end_offset(), mode=self.mode() or base.mode)
        written = await self.arbiter.renew(record, desired)
        self.record, self.read_at = written, time.monotonic()
        self.valid_until = sent + self.arbiter.duration * RENEW_FRACTION
        self.last_error = ""
        self.renewals += 1
        if wanted != self.published:
            self.published = wanted
            self.on_published([m for m in wanted if m != self.identity])
        return retry

    def figures(self) -> dict[str, object]:
        r = self.record
        return {
            "where": self.where,
            "holder": r.holder if r else "",
            "epoch": r.epoch if r else 0,
            "in_sync": list(r.in_sync) if r else [],
            "age_s": time.monotonic() - self.read_at if self.read_at else -1.0,
            "valid_for_s": max(0.0, self.valid_until - time.monotonic()),
            "error": self.last_error,
        }
