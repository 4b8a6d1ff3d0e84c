"""A SYNC put's wait for its followers (ha/tracker.py ReplicaTracker.wait), in process."""

from __future__ import annotations

import asyncio
import time

import pytest

from msgstore.ha.master import now_us
from msgstore.ha.tracker import ReplicaTracker
from tests.support.loop_passes import passes_until_done


def a_tracker_with_one_follower_in_sync() -> tuple[ReplicaTracker, int]:
    tracker = ReplicaTracker()
    link = tracker.connect("m1", "127.0.0.1:1", 0)
    tracker.report(link, 0, now_us(), 0)  # caught up with everything the master had
    assert tracker.sync_state_set() == ["m1"]
    return tracker, link


@pytest.mark.asyncio
async def test_a_put_is_acknowledged_by_the_report_that_covers_it_and_times_out_otherwise():
    tracker, link = a_tracker_with_one_follower_in_sync()
    waiting = asyncio.ensure_future(tracker.wait(100, 1, 60))
    await asyncio.sleep(0)
    tracker.report(link, 99)
    await asyncio.sleep(0)
    assert not waiting.done()  # one byte short
    tracker.report(link, 100)
    assert await asyncio.wait_for(waiting, 5) is True
    t = time.monotonic()
    assert await tracker.wait(200, 1, 0.05) is False  # slaveTimeout
    assert time.monotonic() - t < 5
    assert tracker._waiters == []  # neither left its entry behind


@pytest.mark.asyncio
async def test_a_cancelled_wait_leaves_nothing_to_wake():
    tracker, link = a_tracker_with_one_follower_in_sync()
    waiting = asyncio.ensure_future(tracker.wait(100, 1, 60))
    await asyncio.sleep(0)
    assert len(tracker._waiters) == 1
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert tracker._waiters == []
    tracker.report(link, 100)  # (nothing to set: no InvalidStateError on a cancelled future)


@pytest.mark.asyncio
async def test_a_put_s_wait_resumes_in_one_pass_of_the_loop_after_its_report():
    """The report sets the put's future, and the put runs on the loop's next pass. Through
    asyncio.wait_for it took two (wait_for's own future first): on a busy loop each pass waits
    behind every other ready task, and a SYNC put waited through them twice."""
    tracker, link = a_tracker_with_one_follower_in_sync()
    waiting = asyncio.ensure_future(tracker.wait(100, 1, 60))
    await asyncio.sleep(0)
    tracker.report(link, 100)
    assert await passes_until_done(waiting) == 1
