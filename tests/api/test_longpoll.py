"""Waking long polls (api/longpoll.py): from the dispatcher's thread through the loop, and at
once when the loop itself dispatched (a small send's batch, Dispatcher.dispatch_here)."""

import asyncio
import threading

from msgstore.api.longpoll import ArrivalWaiters


def test_an_arrival_on_the_loops_thread_wakes_at_once_one_from_another_thread_through_the_loop():
    async def main() -> None:
        waiters = ArrivalWaiters(asyncio.get_running_loop())
        here = waiters.register("T", 1)
        waiters.on_arrival("T", 1, 5)
        assert here.done()  # no trip through the loop
        assert waiters.waiting == 0

        there = waiters.register("T", 2)
        other = waiters.register("T", 3)
        t = threading.Thread(target=waiters.on_arrival, args=("T", 2, 7))
        t.start()
        t.join()
        assert not there.done()  # set by the loop, not by the dispatcher's thread
        await asyncio.wait_for(there, 5)
        assert not other.done()
        assert waiters.waiting == 1

    asyncio.run(main())
