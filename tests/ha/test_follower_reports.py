"""What a follower writes back on its stream (ha/follower.py latest_reports), in process."""

from __future__ import annotations

import asyncio

import pytest

from msgstore.ha.follower import latest_reports
from msgstore.v1 import ha_pb2 as hpb


async def until(what, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not what():
        assert asyncio.get_running_loop().time() < deadline, "not within the deadline"
        await asyncio.sleep(0)


@pytest.mark.asyncio
async def test_reports_queued_behind_a_write_go_as_the_newest_one_and_the_handshake_always_goes():
    outbox: asyncio.Queue[hpb.FollowerReport | None] = asyncio.Queue()
    sent: list[tuple[bool, int]] = []
    writing = asyncio.Event()

    async def stream() -> None:  # as grpc.aio's request iterator: one written at a time
        async for report in latest_reports(outbox):
            sent.append((report.handshake, report.end_offset))
            await writing.wait()
            writing.clear()

    hello = hpb.FollowerReport(handshake=True, member="m1", end_offset=0)
    task = asyncio.ensure_future(stream())
    for item in (hello, hpb.FollowerReport(end_offset=100), hpb.FollowerReport(end_offset=200, echo_master_end=200)):
        outbox.put_nowait(item)
    await asyncio.sleep(0)
    assert sent == [(True, 0)]  # the handshake, alone, though two reports wait behind it
    writing.set()
    await until(lambda: len(sent) == 2)
    assert sent == [(True, 0), (False, 200)]  # the newest of the two it superseded
    outbox.put_nowait(hpb.FollowerReport(end_offset=300))
    outbox.put_nowait(hpb.FollowerReport(end_offset=400))
    outbox.put_nowait(None)  # the stream ends: the newest report still goes first
    writing.set()
    await until(lambda: len(sent) == 3)
    writing.set()
    await asyncio.wait_for(task, 5)
    assert sent == [(True, 0), (False, 200), (False, 400)]
