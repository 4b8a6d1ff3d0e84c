"""Waking long polls (api/longpoll.py): from the dispatcher's thread through the loop, and at
once when the loop itself dispatched (a small send's batch, Dispatcher.dispatch_here)."""

import asyncio
import threading

from msgstore.api.longpoll import Alarm, ArrivalWaiters


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


def test_a_call_waiting_on_many_queues_is_woken_through_its_alarm_in_the_same_step():
    """PullQueues awaits one future for all its queues: the arrival that sets a queue's own
    future sets the alarm too, at once (asyncio.wait over the queues' futures took a pass of
    the loop more); a re-armed alarm rings again, and no link outlives its waiter."""

    async def main() -> None:
        waiters = ArrivalWaiters(asyncio.get_running_loop())
        alarm = Alarm(asyncio.get_running_loop())
        futures = {q: waiters.register("T", q, alarm) for q in range(8)}
        assert waiters.alarms == 8 and not alarm.fut.done()
        waiters.on_arrival("T", 5, 1)
        assert futures[5].done() and alarm.fut.done()  # in the same step, no pass of the loop
        assert [q for q, f in futures.items() if f.done()] == [5]
        first = alarm.fut
        alarm.rearm()
        assert alarm.fut is not first and not alarm.fut.done()
        t = threading.Thread(target=waiters.on_arrival, args=("T", 2, 7))
        t.start()
        t.join()
        await asyncio.wait_for(alarm.fut, 5)  # from the dispatcher's thread, through the loop
        assert futures[2].done() and not futures[3].done()
        for q, f in futures.items():
            waiters.unregister("T", q, f)
        assert waiters.alarms == 0 and waiters.waiting == 0

    asyncio.run(main())
