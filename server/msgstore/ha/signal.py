"""Wake the tasks streaming the commit log to followers when it grows (on the event loop)."""

from __future__ import annotations

import asyncio


class AppendSignal:
    """``seq`` counts notifications: a waiter passes the count it saw before it last looked at
    the log, so an append made after that look (while it was writing a chunk, or before its
    wait began) ends the wait at once instead of being missed until the next append or the
    timeout. Before, such a miss held a SYNC put up to the keepalive interval (1 s), in most
    rounds of the replication bench."""

    def __init__(self) -> None:
        self._waiting: list[asyncio.Future[None]] = []
        self.seq = 0

    def notify(self) -> None:
        self.seq += 1
        waiting, self._waiting = self._waiting, []
        for fut in waiting:
            if not fut.done():
                fut.set_result(None)

    async def wait(self, timeout_s: float, seen: int | None = None) -> None:
        """Until a notification after ``seen`` (a value of ``seq``; None: after now), at most
        ``timeout_s``."""
        if seen is not None and seen != self.seq:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            pass
