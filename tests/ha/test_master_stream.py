"""The master's side of a follower's stream (ha/master.py serve_follower), in process on a real
store: what it sends, and when."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable

import pytest

from msgstore.ha import master
from msgstore.ha.replica import Replica
from msgstore.store import Message
from msgstore.v1 import ha_pb2 as hpb
from tests.support.loop_passes import passes_until_done


@contextlib.asynccontextmanager
async def a_follower_stream(
    replica: Replica,
    while_writing: Callable[[hpb.MasterChunk], None] | None = None,
    reports_from: asyncio.Queue[hpb.FollowerReport] | None = None,
) -> AsyncIterator[tuple[asyncio.Queue, asyncio.Future]]:
    """serve_follower for one follower (m1) that handshakes from offset 0 and then only
    listens, or reports what the test puts in ``reports_from``: the chunks the master writes
    (decoded), and the stream's task; the stream ends on leaving. ``while_writing``: run on
    each chunk as it is written (a write yields to the loop after it)."""
    gone = asyncio.Event()

    async def reports():
        yield hpb.FollowerReport(handshake=True, member="m1", group="g0", end_offset=0, address="127.0.0.1:1")
        if reports_from is None:
            await gone.wait()
            return
        while True:
            yield await reports_from.get()

    chunks: asyncio.Queue[hpb.MasterChunk] = asyncio.Queue()

    async def write(chunk: hpb.MasterChunk | bytes) -> None:
        if isinstance(chunk, bytes):
            chunk = hpb.MasterChunk.FromString(chunk)
        if while_writing is not None:
            while_writing(chunk)
        await asyncio.sleep(0)
        chunks.put_nowait(chunk)

    stream = asyncio.ensure_future(master.serve_follower(replica, reports(), write))
    try:
        yield chunks, stream
    finally:
        gone.set()
        stream.cancel()
        await asyncio.gather(stream, return_exceptions=True)


async def woken_from_a_thread(signal) -> None:
    """A wait on ``signal`` (binding the running loop) that another thread's notification ends."""
    import threading

    waiting = asyncio.ensure_future(signal.wait(30, signal.seq))
    await asyncio.sleep(0)
    notifier = threading.Timer(0.05, signal.notify)
    notifier.start()
    await asyncio.wait_for(waiting, 10)
    notifier.join()


@pytest.mark.asyncio
async def test_an_append_made_while_a_chunk_is_written_is_sent_without_waiting_for_the_keepalive(make_store, monkeypatch):
    """An append that lands while the stream writes a chunk without data (a state change here;
    a confirm offset or a keepalive alike) must be sent at once. The stream used to look at the
    log's end before that write and then wait for the next append or the keepalive: the append
    made meanwhile was missed, and a SYNC put waited up to a second (most rounds of the
    replication bench had such stalls). With a keepalive of a minute, the miss is a hang here."""
    monkeypatch.setattr(master, "KEEPALIVE_S", 60.0)
    store = make_store()
    replica = Replica(store, "m0", "g0", broker_role="SYNC_MASTER", master_address="", channel=lambda a: None, call_metadata=tuple)
    append_during: list[str] = []

    def while_writing(chunk: hpb.MasterChunk) -> None:
        if append_during and chunk.state and not chunk.data:
            body = append_during.pop()
            assert store.put_message(Message("t", body.encode())).ok  # (the store announces it)

    async with a_follower_stream(replica, while_writing) as (chunks, _stream):
        hello = await asyncio.wait_for(chunks.get(), 10)
        assert hello.state and not hello.data and hello.start_offset == 0
        append_during.append("appended while a state chunk was written")
        replica.note_member("m2", "127.0.0.1:2")  # a member joins: the followers are told at once
        state = await asyncio.wait_for(chunks.get(), 10)
        assert state.state and "m2" in [m.name for m in state.members]
        assert not append_during, "the write hook did not run"
        data = await asyncio.wait_for(chunks.get(), 10)  # before the fix: waited for the 60 s keepalive
        assert data.offset == 0 and data.data and b"appended while a state chunk was written" in data.data
        assert len(data.data) == store.commitlog.max_offset


@pytest.mark.asyncio
async def test_a_wait_given_the_count_it_saw_returns_at_once_after_a_notification_it_missed():
    from msgstore.ha.signal import AppendSignal

    signal = AppendSignal()
    seen = signal.seq
    signal.notify()  # nobody waiting yet
    await asyncio.wait_for(signal.wait(60, seen), 1)  # returns at once: the notification came after `seen`
    waiting = asyncio.ensure_future(signal.wait(60, signal.seq))
    await asyncio.sleep(0)
    assert not waiting.done()  # nothing new: it waits
    signal.notify()
    await asyncio.wait_for(waiting, 1)


@pytest.mark.asyncio
async def test_a_waiter_resumes_in_one_pass_of_the_loop_and_a_wait_that_ended_otherwise_leaves_nothing_behind():
    """A notification sets the waiter's own future: its task runs on the loop's next pass
    (through asyncio.wait_for and asyncio.wait, an append reached its follower's stream three
    passes later, each behind every other ready task of a busy loop). A wait that ends by its
    timeout, or because ``until`` is done (the stream's report reader ended), takes its future
    out: an idle master's keepalive waits piled up until the next append."""
    from msgstore.ha.signal import AppendSignal

    signal = AppendSignal()
    waiting = asyncio.ensure_future(signal.wait(60))
    await asyncio.sleep(0)
    signal.notify()
    assert await passes_until_done(waiting) == 1
    for _ in range(3):
        await signal.wait(0.001)  # timed out
    assert signal._waiting == []
    reader = asyncio.get_running_loop().create_future()
    waiting = asyncio.ensure_future(signal.wait(60, until=reader))
    await asyncio.sleep(0)
    assert not waiting.done() and len(signal._waiting) == 1
    reader.set_result(None)
    await asyncio.wait_for(waiting, 5)
    assert signal._waiting == []


@pytest.mark.asyncio
async def test_a_sync_master_dispatches_what_its_follower_acknowledged_without_waiting_for_a_poll(make_store, monkeypatch):
    """A SYNC master's consumers see only what its in-sync followers hold: its dispatcher is
    bounded by their reports. A report that moves that bound wakes the dispatcher; before, it
    was seen at the dispatcher's next poll (here a minute: the message never became pullable)."""
    import grpc

    from msgstore.store import dispatch

    store = make_store()
    replica = Replica(
        store, "m0", "g0", broker_role="SYNC_MASTER", master_address="", channel=grpc.aio.insecure_channel, call_metadata=tuple
    )
    replica.start()
    await asyncio.sleep(0.01)  # the dispatcher's current poll ends; its next ones last a minute
    monkeypatch.setattr(dispatch, "POLL_INTERVAL", 60.0)
    reports: asyncio.Queue[hpb.FollowerReport] = asyncio.Queue()

    def echo(chunk: hpb.MasterChunk, end: int) -> hpb.FollowerReport:
        return hpb.FollowerReport(member="m1", group="g0", end_offset=end, echo_sent_us=chunk.sent_us, echo_master_end=chunk.master_end)

    try:
        async with a_follower_stream(replica, reports_from=reports) as (chunks, _stream):
            hello = await asyncio.wait_for(chunks.get(), 10)
            reports.put_nowait(echo(hello, 0))
            deadline = time.monotonic() + 10
            while replica.tracker.sync_state_set() != ["m1"]:
                assert time.monotonic() < deadline, "the follower never joined the in-sync set"
                await asyncio.sleep(0.005)
            await asyncio.sleep(0.05)  # (the dispatcher, woken by the join, has gone back to its minute's wait)
            assert store.put_message(Message("t", b"held until the follower has it")).ok
            data = await asyncio.wait_for(chunks.get(), 10)
            while not data.data:
                data = await asyncio.wait_for(chunks.get(), 10)
            end = data.offset + len(data.data)
            assert end == store.commitlog.max_offset and store.dispatcher.reput_from < end  # bounded: not pullable yet
            reports.put_nowait(echo(data, end))
            deadline = time.monotonic() + 5
            while store.dispatcher.reput_from < end:
                assert time.monotonic() < deadline, "the acknowledged message was not dispatched"
                await asyncio.sleep(0.005)
            res = store.get_message(None, "t", 0, 0, max_msgs=1)
            try:
                assert [m.body for m in res.messages()] == [b"held until the follower has it"]
            finally:
                res.release()
    finally:
        await replica.stop()


@pytest.mark.asyncio
async def test_a_send_that_waits_skips_the_dispatcher_wake_up_only_when_something_else_will_wake_it(make_store):
    """At the accept, a send that waits wakes the dispatcher only when nothing will later: a
    SYNC master with no follower in its set has no bound (its put fails SLAVE_NOT_AVAILABLE,
    and no report will come to wake the dispatcher: the message waited for its poll); with
    one, the report that moves the bound wakes it, as the group commit and a visibility
    wait do theirs (found by a cold review)."""
    import types

    from msgstore.api.servicer import Accepted, DataPlane

    store = make_store()
    replica = Replica(store, "m0", "g0", broker_role="SYNC_MASTER", master_address="", channel=lambda a: None, call_metadata=tuple)
    plane = DataPlane(types.SimpleNamespace(store=store, replica=replica))

    def accepted(**waits: bool) -> Accepted:
        return Accepted([], [], 0, 0, waits.get("sync", False), waits.get("visible", False), 0.0, waits.get("replicate", False))

    assert not replica.bounds_dispatch
    assert not plane._dispatch_woken_later(accepted(replicate=True))  # alone: woken at the accept
    assert plane._dispatch_woken_later(accepted(sync=True)) and plane._dispatch_woken_later(accepted(visible=True))
    link = replica.tracker.connect("m1", "127.0.0.1:1", 0)
    replica.tracker.report(link, 0, master.now_us(), 0)  # a follower joins the set: the dispatch waits for its reports
    assert replica.bounds_dispatch and plane._dispatch_woken_later(accepted(replicate=True))


def test_the_raw_view_a_chunk_is_encoded_from(make_store):
    """CommitLog.raw: the log's bytes within one segment, a view valid inside the ``with``; empty
    at the end, None below what retention kept; the segment is given back afterwards (it can
    then be deleted)."""
    s = make_store(mappedFileSizeCommitLog=1024, fileReservedTime=1, deleteCommitLogFilesInterval=0)
    for i in range(40):
        assert s.put_message(Message("t", b"%04d" % i + b"." * 100)).ok
    cl = s.commitlog
    first = cl.segments.segments[0]
    with open(first.path, "rb") as f:
        on_disk = f.read(first.read_position)
    with cl.raw(0, 1 << 20) as view:
        assert view is not None and bytes(view) == on_disk  # within the first segment only
    with cl.raw(10, 50) as view:
        assert bytes(view) == on_disk[10:60]
    with cl.raw(cl.max_offset, 1 << 20) as view:
        assert view is not None and len(view) == 0
    old = time.time() - 2 * 3600
    for seg in cl.segments.segments[:-1]:
        os.utime(seg.path, (old, old))
    assert s.manual_delete() > 0  # nothing held them: the views above were given back
    with cl.raw(0, 1 << 20) as view:
        assert view is None


@pytest.mark.asyncio
async def test_a_notification_from_another_thread_wakes_a_waiter_on_the_loop():
    """The broker services announce their deliveries from their own thread. Done there, setting
    the waiter's future did not wake a loop asleep in its selector: the stream slept on until
    its timeout (here 30 s)."""
    import threading

    from msgstore.ha.signal import AppendSignal

    signal = AppendSignal()
    waiting = asyncio.ensure_future(signal.wait(30, signal.seq))
    await asyncio.sleep(0)
    # a moment later, when the loop sleeps in its selector with no other reason to wake for 30 s
    thread = threading.Timer(0.1, signal.notify)
    started = time.monotonic()
    thread.start()
    await asyncio.wait_for(waiting, 30)
    assert time.monotonic() - started < 10
    thread.join()
    assert signal.seq == 1


@pytest.mark.asyncio
async def test_a_master_told_to_follow_ends_its_followers_streams_at_once(make_store, monkeypatch):
    """A demoted master's streams used to notice only at their next wake (the keepalive, here a
    minute): its followers went on following a member that no longer takes writes."""
    import grpc

    monkeypatch.setattr(master, "KEEPALIVE_S", 60.0)
    store = make_store()
    replica = Replica(
        store, "m0", "g0", broker_role="SYNC_MASTER", master_address="", channel=grpc.aio.insecure_channel, call_metadata=tuple
    )
    try:
        async with a_follower_stream(replica) as (chunks, stream):
            await asyncio.wait_for(chunks.get(), 10)  # the hello: the stream now waits
            await replica.follow("127.0.0.1:1")  # nobody there: the new follower retries meanwhile
            await asyncio.wait_for(stream, 10)  # ended: this member is no longer a master
    finally:
        await replica.stop()


def test_a_signal_waited_on_from_a_second_loop_follows_it():
    """A store served again in the same process runs a new loop: waits and notifications from
    other threads must go to that one, not to the closed first loop."""

    from msgstore.ha.signal import AppendSignal

    signal = AppendSignal()
    asyncio.run(woken_from_a_thread(signal))
    asyncio.run(woken_from_a_thread(signal))  # a new loop: before, the wait made its future on the closed one
    assert signal.seq == 2


@pytest.mark.asyncio
async def test_an_append_made_in_another_thread_is_sent_without_its_caller_announcing_it(make_store, monkeypatch):
    """The store announces every append where it is stored (MessageStore.append_listeners), so
    a writer that does not announce its own (the broker services' deliveries, pop checkpoints,
    transactions, in their threads) is still sent at once. Each such caller used to have to
    notify the stream itself; one that did not was sent only at the keepalive (here a minute)."""
    import threading

    monkeypatch.setattr(master, "KEEPALIVE_S", 60.0)
    store = make_store()
    replica = Replica(store, "m0", "g0", broker_role="SYNC_MASTER", master_address="", channel=lambda a: None, call_metadata=tuple)
    replica.signal.bind(asyncio.get_running_loop())  # (what Replica.start does)
    try:
        async with a_follower_stream(replica) as (chunks, _stream):
            hello = await asyncio.wait_for(chunks.get(), 10)
            assert hello.state and not hello.data
            # a moment later, with the stream asleep until its keepalive
            thread = threading.Timer(0.1, lambda: store.put_messages("t", 0, [Message("t", b"from a broker thread")]))
            thread.start()
            data = await asyncio.wait_for(chunks.get(), 10)
            thread.join()
            assert b"from a broker thread" in data.data and len(data.data) == store.commitlog.max_offset
    finally:
        await replica.stop()
    assert replica.signal.notify not in store.append_listeners  # a stopped replica is no longer told


@pytest.mark.asyncio
async def test_notifications_from_another_thread_share_one_hand_off_to_the_loop():
    """A broker round appends its deliveries one by one: each is announced, but while one
    hand-off to the loop is pending the rest ride on it (one self-pipe write, one wake-up),
    and none is lost: the pending one runs after them. The next notification hands off again."""
    import threading

    from msgstore.ha.signal import AppendSignal

    signal = AppendSignal()
    signal.bind(asyncio.get_running_loop())
    seen = signal.seq
    waiting = asyncio.ensure_future(signal.wait(30, seen))
    await asyncio.sleep(0)
    thread = threading.Thread(target=lambda: [signal.notify() for _ in range(100)])
    thread.start()
    thread.join()  # (the loop runs nothing meanwhile: all 100 were made before any hand-off ran)
    await asyncio.wait_for(waiting, 10)
    assert signal.seq == seen + 1  # one notification on the loop for the hundred
    again = asyncio.ensure_future(signal.wait(30, signal.seq))
    await asyncio.sleep(0)
    thread = threading.Thread(target=signal.notify)
    thread.start()
    thread.join()
    await asyncio.wait_for(again, 10)
    assert signal.seq == seen + 2


def test_a_hand_off_to_a_former_loop_does_not_hold_back_the_next_loops():
    """A notification handed to a loop that then stops (its callbacks never run) must not keep
    later notifications from other threads from reaching the loop bound since: the pending
    hand-off names its loop."""
    import threading

    from msgstore.ha.signal import AppendSignal

    signal = AppendSignal()
    former = asyncio.new_event_loop()
    try:
        signal.bind(former)  # (as if bound on a loop that has stopped for good)
        thread = threading.Thread(target=signal.notify)  # handed to the former loop: never runs
        thread.start()
        thread.join()

        asyncio.run(woken_from_a_thread(signal))  # (its wait binds the new loop)
    finally:
        former.close()
