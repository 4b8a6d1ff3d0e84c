"""A master's view of its followers: how far each has confirmed, and the puts waiting for that.

A SYNC master acknowledges a put once enough members hold it (``inSyncReplicas``, the master
included; at least one follower, as RocketMQ 4's SYNC_MASTER). A follower counts as in sync
while it is connected and less than ``haMaxGapNotInSync`` bytes behind. Everything here runs on
the server's event loop.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

IN_SYNC_GAP = 256 * 1024 * 1024  # haMaxGapNotInSync


@dataclass
class FollowerLink:
    member: str
    acked: int
    since: float = field(default_factory=time.monotonic)
    last_report: float = field(default_factory=time.monotonic)


class ReplicaTracker:
    def __init__(self) -> None:
        self.links: dict[int, FollowerLink] = {}  # one per open Follow stream
        self._ids = 0
        self._waiters: list[tuple[int, int, asyncio.Future[bool]]] = []  # (offset, needed, future)

    def connect(self, member: str, acked: int) -> int:
        self._ids += 1
        self.links[self._ids] = FollowerLink(member, acked)
        return self._ids

    def disconnect(self, link: int) -> None:
        self.links.pop(link, None)

    def report(self, link: int, acked: int) -> None:
        f = self.links.get(link)
        if f is None:
            return
        f.acked = max(f.acked, acked)
        f.last_report = time.monotonic()
        self._wake()

    def in_sync(self, master_end: int) -> list[FollowerLink]:
        best: dict[str, FollowerLink] = {}
        for f in self.links.values():  # a member that reconnected counts once
            if master_end - f.acked <= IN_SYNC_GAP and (f.member not in best or f.acked > best[f.member].acked):
                best[f.member] = f
        return list(best.values())

    def holding(self, offset: int) -> int:
        """Followers that confirmed every byte below ``offset``."""
        return len({f.member for f in self.links.values() if f.acked >= offset})

    async def wait(self, offset: int, followers: int, timeout_s: float) -> bool:
        """True once ``followers`` followers confirmed ``offset``; False after the timeout."""
        if self.holding(offset) >= followers:
            return True
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry = (offset, followers, fut)
        self._waiters.append(entry)
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            return False
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)

    def _wake(self) -> None:
        if not self._waiters:
            return
        still = []
        for offset, needed, fut in self._waiters:
            if fut.done():
                continue
            if self.holding(offset) >= needed:
                fut.set_result(True)
            else:
                still.append((offset, needed, fut))
        self._waiters = still
