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

    def arm(self, seen: int | None = None) -> asyncio.Future[None]:
        """A future done at the first notification after ``seen`` (a value of ``seq``; None:
        after now), already done when one came. Awaited as it is, it wakes its task (a
        follower's stream) in one pass of the loop: a SYNC put waits behind each pass, and
        ``asyncio.wait_for`` and ``asyncio.wait`` each added one or two more (0.2 ms from an
        append to its chunk, of 2 ms that SYNC replication added to a 500-message batch)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # (a store served again in the same process: a new loop)
            self.bind(loop)
        fut: asyncio.Future[None] = loop.create_future()
        if seen is not None and seen != self.seq:
            fut.set_result(None)
        else:
            self._waiting.append(fut)
        return fut

    def disarm(self, fut: asyncio.Future[None]) -> None:
        """Settle ``fut`` and forget it (its wait ended otherwise: a timeout, the stream)."""
        if not fut.done():
            fut.set_result(None)
        try:
            self._waiting.remove(fut)
        except ValueError:
            pass

    async def wait(self, timeout_s: float, seen: int | None = None, until: asyncio.Future | None = None) -> None:
        """Until a notification after ``seen`` (a value of ``seq``; None: after now), at most
        ``timeout_s``; or until ``until`` is done (a follower's report reader that ended)."""
        fut = self.arm(seen)
        if fut.done():
            return

        def end(_: object = None) -> None:
            self.disarm(fut)

        timer = asyncio.get_running_loop().call_later(timeout_s, end)
        if until is not None:
            until.add_done_callback(end)
        try:
            await fut
        finally:
            timer.cancel()
            if until is not None:
                until.remove_done_callback(end)
            self.disarm(fut)
