"""Waking long-polling pulls when their queue gets new units.

The dispatcher thread reports arrivals; waiters live on the event loop. A waiter registers
*before* it looks at the queue, so an arrival between the look and the wait is never missed.
"""

from __future__ import annotations

import asyncio
import threading


class Alarm:
    """One future for a call that long-polls many queues: an arrival on any of them sets it,
    in the same step that sets that queue's own future. Awaited as it is, the call runs on the
    loop's next pass (``asyncio.wait`` over the queues' futures cost it one more, behind every
    other ready task). ``rearm`` after each wait: its future is done then."""

    __slots__ = ("fut",)

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.fut: asyncio.Future[None] = loop.create_future()

    def ring(self) -> None:
        if not self.fut.done():
            self.fut.set_result(None)

    def rearm(self) -> None:
        if self.fut.done():
            self.fut = self.fut.get_loop().create_future()


class ArrivalWaiters:
    def __init__(self, loop: asyncio.AbstractEventLoop):
        """Made on the loop's own thread."""
        self.loop = loop
        self._loop_thread = threading.get_ident()
        self._waiters: dict[tuple[str, int], set[asyncio.Future]] = {}
        self._alarms: dict[asyncio.Future, Alarm] = {}  # a waiter's call's alarm, when it has one

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The dispatcher's callback, on its thread or on the loop's (a small dispatch after a
        send: the waiters are woken at once, with no trip through the loop's self-pipe); cheap
        when nobody waits on the queue."""
        key = (topic, queue_id)
        if key in self._waiters:
            if threading.get_ident() == self._loop_thread:
                self._wake(key)
            else:
                self.loop.call_soon_threadsafe(self._wake, key)

    def _wake(self, key: tuple[str, int]) -> None:
        for fut in self._waiters.pop(key, ()):
            if not fut.done():
                fut.set_result(None)
            alarm = self._alarms.pop(fut, None)
            if alarm is not None:
                alarm.ring()

    def register(self, topic: str, queue_id: int, alarm: Alarm | None = None) -> asyncio.Future:
        fut = self.loop.create_future()
        self._waiters.setdefault((topic, queue_id), set()).add(fut)
        if alarm is not None:
            self._alarms[fut] = alarm
        return fut

    def unregister(self, topic: str, queue_id: int, fut: asyncio.Future) -> None:
        self._alarms.pop(fut, None)
        waiters = self._waiters.get((topic, queue_id))
        if waiters is not None:
            waiters.discard(fut)
            if not waiters:
                self._waiters.pop((topic, queue_id), None)

    def wake_all(self) -> None:
        """Shutdown: release every waiter so pulls answer at once."""
        for key in list(self._waiters):
            self._wake(key)

    @property
    def waiting(self) -> int:
        return sum(len(v) for v in self._waiters.values())

    @property
    def alarms(self) -> int:
        """Waiters linked to a call's alarm (each is taken out with its waiter)."""
        return len(self._alarms)
