"""Wake the tasks streaming the commit log to followers when it grows. They wait on the event
loop; the store announces every append where it is made (MessageStore.append_listeners): on the
loop (client puts) and in other threads (the broker services' deliveries, pop checkpoints and
transactions written in worker threads)."""

from __future__ import annotations

import asyncio
import threading


class AppendSignal:
    """``seq`` counts notifications: a waiter passes the count it saw before it last looked at
    the log, so an append made after that look (while it was writing a chunk, or before its
    wait began) ends the wait at once instead of being missed until the next append or the
    timeout. Before, such a miss held a SYNC put up to the keepalive interval (1 s), in most
    rounds of the replication bench.

    A notification from another thread is passed to the loop (``call_soon_threadsafe``): done
    there, it did not wake a loop asleep in its selector, raced the waiters' own bookkeeping, and
    could fail setting a future the loop had just cancelled. Such hand-offs are coalesced: one
    pending is enough for any number of appends made before it runs (a broker round delivering
    many messages, each appended on its own, would otherwise write the loop's self-pipe for
    each)."""

    def __init__(self) -> None:
        self._waiting: list[asyncio.Future[None]] = []
        self.seq = 0
        self._loop: asyncio.AbstractEventLoop | None = None  # the waiters' (bind, or the first wait)
        self._loop_thread = 0
        self._handed_off: asyncio.AbstractEventLoop | None = None  # the loop a hand-off is on its way to

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the waiters run on, and its thread (before any thread may notify: a
        notification that found no loop yet ran where it was made)."""
        self._loop, self._loop_thread = loop, threading.get_ident()

    def notify(self) -> None:
        loop = self._loop
        if loop is not None and threading.get_ident() != self._loop_thread:
            # one pending is enough: it is cleared on the loop before that notifies, so it runs
            # after this append. Named by its loop: one sent to a former loop (stopped, its
            # callbacks never run) must not hold back hand-offs to the loop bound now.
            if self._handed_off is loop:
                return
            self._handed_off = loop
            try:
                loop.call_soon_threadsafe(self._handed)
            except RuntimeError:  # the loop is closed: nobody waits any more
                self._handed_off = None
            return
        self.seq += 1
        waiting, self._waiting = self._waiting, []
        for fut in waiting:
            if not fut.done():
                fut.set_result(None)

    def _handed(self) -> None:
        self._handed_off = None
        self.notify()

    async def wait(self, timeout_s: float, seen: int | None = None) -> None:
        """Until a notification after ``seen`` (a value of ``seq``; None: after now), at most
        ``timeout_s``."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # (a store served again in the same process: a new loop)
            self.bind(loop)
        if seen is not None and seen != self.seq:
            return
        fut: asyncio.Future[None] = loop.create_future()
        self._waiting.append(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            pass
