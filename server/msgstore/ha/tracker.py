"""A master's view of its followers: how far each has confirmed, which of them are in sync, when
it last heard from each, and the puts waiting for them.

The in-sync set is RocketMQ 5's SyncStateSet: the followers that had everything the master had
at some moment within ``haMaxTimeSlaveNotCatchup``. A controller elects only from it, so it must
never name a member that lacks an acknowledged message:

- a SYNC put is acknowledged once *every* member of the set holds it (RocketMQ's
  ``allAckInSyncStateSet``, Kafka's ISR) and the set, master included, has at least
  ``inSyncReplicas`` members — so every member of the set holds every acknowledged put;
- a follower joins only once it holds everything acknowledged so far;
- a follower that falls behind or goes away leaves the set, but where a controller reads the
  set (the Lease on Kubernetes) it leaves only once that controller has been told: until then
  puts still wait for it (``leaving``).

The confirm offset (Kafka's high watermark) is what every member of the set holds: a SYNC
master's consumers see nothing past it. Everything here runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class FollowerLink:
    member: str
    address: str
    acked: int
    since: float = field(default_factory=time.monotonic)
    last_report: float = field(default_factory=time.monotonic)
    heard: float = 0.0  # the master's clock when it sent the chunk the last report answered
    caught_up_at: float = 0.0  # the master's clock when the follower last had all the master had


class ReplicaTracker:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.links: dict[int, FollowerLink] = {}  # one per open Follow stream
        self._ids = 0
        self._waiters: list[tuple[int, int, asyncio.Future[bool]]] = []  # (offset, followers needed, future)
        self.in_sync: set[str] = set()  # followers in the SyncStateSet (the master is implied)
        self.leaving: set[str] = set()  # out of the set here, not yet out where the controller reads it
        self.acked_of: dict[str, int] = {}  # last confirmed end of every member in the set (or leaving)
        self.acked_hw = 0  # the end of the highest put acknowledged after waiting for the set
        self.max_not_catchup_s = 15.0  # haMaxTimeSlaveNotCatchup
        self.keepalive_s = 3.0  # a follower silent this long is gone (its stream is ended)
        self.publish: Callable[[list[str]], None] | None = None  # set by a lease keeper: tell the controller
        self.changed: list[Callable[[], None]] = []  # the set changed (followers' streams tell them)
        self.progressed: Callable[[], None] | None = None  # a report or a change: the confirm offset may move
        self._last_refresh = 0.0

    # ------------------------------------------------------------------ links

    def connect(self, member: str, address: str, acked: int) -> int:
        self._ids += 1
        self.links[self._ids] = FollowerLink(member, address, acked)
        return self._ids

    def disconnect(self, link: int) -> None:
        f = self.links.pop(link, None)
        if f is not None:
            self.refresh()

    def report(self, link: int, acked: int, echo_sent_us: int = 0, echo_master_end: int = 0) -> None:
        f = self.links.get(link)
        if f is None:
            return
        f.acked = max(f.acked, acked)
        f.last_report = self.clock()
        if echo_sent_us:
            sent = echo_sent_us / 1e6
            f.heard = max(f.heard, sent)
            if f.acked >= echo_master_end:
                f.caught_up_at = max(f.caught_up_at, sent)
        if f.member in self.acked_of:
            self.acked_of[f.member] = max(self.acked_of[f.member], f.acked)
        self.refresh()

    def namesake(self, member: str, address: str) -> FollowerLink | None:
        """A link of another live process with this member's name: one from another address
        that reported within ``keepalive_s`` (a silent one is a member that moved or restarted
        elsewhere, whose old stream is not ended yet)."""
        now = self.clock()
        for f in self.links.values():
            if f.member == member and f.address != address and now - f.last_report <= self.keepalive_s:
                return f
        return None

    def live(self) -> dict[str, FollowerLink]:
        """Each connected member's most advanced link (a member that reconnected counts once)."""
        best: dict[str, FollowerLink] = {}
        for f in self.links.values():
            if f.member not in best or f.acked > best[f.member].acked:
                best[f.member] = f
        return best

    def silent(self, link: int) -> bool:
        """A follower that has not reported for ``keepalive_s``: its stream is dead or hung."""
        f = self.links.get(link)
        return f is not None and self.clock() - f.last_report > self.keepalive_s

    # ------------------------------------------------------------------ the in-sync set

    def refresh(self) -> None:
        """Let caught-up followers join and lagging or absent ones leave; wake the waiters."""
        now = self.clock()
        self._last_refresh = now
        live = self.live()
        changed = False
        for member, f in live.items():
            recently = now - f.caught_up_at <= self.max_not_catchup_s
            if member not in self.in_sync and recently and f.acked >= self.acked_hw and f.caught_up_at > 0:
                self.in_sync.add(member)
                self.leaving.discard(member)
                self.acked_of[member] = f.acked
                changed = True
        for member in list(self.in_sync):
            f = live.get(member)
            if f is None or now - f.last_report > self.keepalive_s or now - f.caught_up_at > self.max_not_catchup_s:
                self.in_sync.discard(member)
                if self.publish is not None:
                    self.leaving.add(member)  # puts go on waiting for it until the controller knows
                else:
                    self.acked_of.pop(member, None)
                changed = True
        if changed:
            if self.publish is not None:
                self.publish(self.sync_state_set())
            for cb in self.changed:
                cb()
        if self.progressed is not None:
            self.progressed()
        self._wake()

    def published(self, members: list[str]) -> None:
        """The controller now holds ``members`` as the set: who left it may be left behind."""
        gone = [m for m in self.leaving if m not in members]
        for m in gone:
            self.leaving.discard(m)
            if m not in self.in_sync:
                self.acked_of.pop(m, None)
        if gone:
            if self.progressed is not None:
                self.progressed()
            self._wake()

    def sync_state_set(self) -> list[str]:
        return sorted(self.in_sync)

    def waited_for(self) -> set[str]:
        return self.in_sync | self.leaving

    def confirm_offset(self, master_end: int) -> int:
        """What every member of the set holds (the master's end when the set is empty)."""
        acked = [self.acked_of.get(m, 0) for m in self.waited_for()]
        return min([master_end, *acked])

    def holding(self, offset: int) -> int:
        """Followers that confirmed every byte below ``offset``."""
        return len({f.member for f in self.links.values() if f.acked >= offset})

    def heard_from(self, within_s: float) -> int:
        """Members heard from (a report answering a chunk sent) within the last ``within_s``."""
        since = self.clock() - within_s
        return sum(1 for f in self.live().values() if f.heard >= since)

    # ------------------------------------------------------------------ puts waiting

    def _holds(self, offset: int, needed: int) -> bool:
        members = self.waited_for()
        return len(members) >= needed and all(self.acked_of.get(m, 0) >= offset for m in members)

    async def wait(self, offset: int, followers: int, timeout_s: float) -> bool:
        """True once every member of the in-sync set (at least ``followers`` of them) holds
        ``offset``; False after the timeout, or when the master is fenced meanwhile."""
        if self._holds(offset, followers):
            self.acked_hw = max(self.acked_hw, offset)
            return True
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        entry = (offset, followers, fut)
        self._waiters.append(entry)
        # awaited as it is (not through asyncio.wait_for, whose own future cost the put one
        # more pass of a busy loop after the follower's report)
        timer = loop.call_later(timeout_s, _expire, fut)
        try:
            return await fut
        finally:
            timer.cancel()
            if entry in self._waiters:
                self._waiters.remove(entry)

    def fail_waiters(self) -> None:
        """Fenced: nothing waiting is acknowledged any more."""
        for _, _, fut in self._waiters:
            if not fut.done():
                fut.set_result(False)
        self._waiters = []

    def _wake(self) -> None:
        if not self._waiters:
            return
        still = []
        for offset, needed, fut in self._waiters:
            if fut.done():
                continue
            if self._holds(offset, needed):
                self.acked_hw = max(self.acked_hw, offset)  # decided here, on the loop: before any join
                fut.set_result(True)
            else:
                still.append((offset, needed, fut))
        self._waiters = still


def _expire(fut: asyncio.Future[bool]) -> None:
    """A put's wait for its followers timed out (slaveTimeout)."""
    if not fut.done():
        fut.set_result(False)
