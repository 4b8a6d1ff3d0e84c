"""Wake the tasks streaming the commit log to followers when it grows (on the event loop)."""

from __future__ import annotations

import asyncio


class AppendSignal:
    def __init__(self) -> None:
        self._waiting: list[asyncio.Future[None]] = []

    def notify(self) -> None:
        waiting, self._waiting = self._waiting, []
        for fut in waiting:
            if not fut.done():
                fut.set_result(None)

    async def wait(self, timeout_s: float) -> None:
        """Until the next append, at most ``timeout_s``."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            pass
