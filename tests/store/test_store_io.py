"""The store's write and read paths (docs/store-format.md §4–§7, §10, §12.6)."""

import json
import os
import threading
import time

import pytest

from msgstore.record import codec
from msgstore.store import GetStatus, Message, MessageStore, PutStatus, StoreLockedError, dispatch
from msgstore.store.segment import msync


def _msg(topic="T", body=b"x", q=0, **props):
    return Message(topic, body, queue_id=q, properties={k: str(v) for k, v in props.items()})


def test_ten_158_byte_messages_end_at_1580(make_store):
    s = make_store()
    for i in range(10):
        r = s.put_message(_msg("FooBar", b"Once, there was a chance for me!", TAGS="TAG1", KEYS=str(1700000000000 + i)))
        assert r.status is PutStatus.PUT_OK and r.queue_offset == i
    assert s.commitlog.max_offset == 1580
    assert s.wait_dispatched()
    assert s.max_offset("FooBar", 0) == 10


def test_get_message_statuses_and_next_offsets(make_store):
    s = make_store()
    r = s.get_message("g", "T", 0, 0)
    assert r.status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    for i in range(5):
        s.put_message(_msg(body=b"%d" % i))
    s.wait_dispatched()
    cases = {
        0: (GetStatus.FOUND, 5),
        3: (GetStatus.FOUND, 5),
        5: (GetStatus.OFFSET_OVERFLOW_ONE, 5),
        9: (GetStatus.OFFSET_OVERFLOW_BADLY, 0),  # min is 0: back to the start, as the reference (issue 15 #7)
    }
    for offset, (status, nxt) in cases.items():
        with s.get_message("g", "T", 0, offset) as r:
            assert (r.status, r.next_offset) == (status, nxt), offset
    with s.get_message("g", "T", 0, 1, max_msgs=2) as r:
        assert [m.body for m in r.messages()] == [b"1", b"2"] and r.next_offset == 3
        assert r.queue_offsets == [1, 2]


def test_empty_queue_and_too_small(make_store):
    s = make_store()
    s.consume_queue("E", 0, create=True)
    with s.get_message("g", "E", 0, 0) as r:
        assert (r.status, r.next_offset) == (GetStatus.NO_MESSAGE_IN_QUEUE, 0)
    cq = s.consume_queue("E", 0)
    for _ in range(3):
        s.put_message(_msg("E"))
    s.wait_dispatched()
    cq.min_logic_offset = 2 * 20  # as after cleanup
    with s.get_message("g", "E", 0, 0) as r:
        assert (r.status, r.next_offset) == (GetStatus.OFFSET_TOO_SMALL, 2)
    with s.get_message("g", "E", 0, 7) as r:  # once messages were deleted, a runaway offset goes to the end
        assert (r.status, r.next_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 3)


def test_max_bytes_returns_at_least_one(make_store):
    s = make_store()
    for _ in range(4):
        s.put_message(_msg(body=b"y" * 1000))
    s.wait_dispatched()
    with s.get_message("g", "T", 0, 0, max_bytes=10) as r:
        assert len(r) == 1 and r.next_offset == 1
    with s.get_message("g", "T", 0, 0, max_bytes=2500) as r:
        assert len(r) == 2


def test_tag_filter_is_exact_even_with_hash_collisions(make_store):
    assert codec.jhash("Aa") == codec.jhash("BB")  # Java's classic collision
    s = make_store()
    for i, tag in enumerate(["Aa", "BB", "Aa", "C", "BB"]):
        s.put_message(_msg(body=b"%d" % i, TAGS=tag))
    s.put_message(_msg(body=b"untagged"))
    s.wait_dispatched()
    with s.get_message("g", "T", 0, 0, tag_filter="BB") as r:
        assert [m.body for m in r.messages()] == [b"1", b"4"]
        assert r.next_offset == 6  # filtered units still advance the offset
    with s.get_message("g", "T", 0, 0, tag_filter="Aa || C") as r:
        assert [m.body for m in r.messages()] == [b"0", b"2", b"3"]
    with s.get_message("g", "T", 0, 0, tag_filter="Zz") as r:
        assert r.status is GetStatus.NO_MATCHED_MESSAGE and r.next_offset == 6
    with s.get_message("g", "T", 0, 0, tag_filter="*") as r:
        assert len(r) == 6


def test_query_by_key_is_exact_and_covers_uniq_key(make_store):
    s = make_store()
    s.put_message(_msg(body=b"1", KEYS="Aa other"))
    s.put_message(_msg(body=b"2", KEYS="BB"))
    s.put_message(_msg(body=b"3", UNIQ_KEY="U-1"))
    s.put_message(_msg("Other", body=b"4", KEYS="Aa"))
    s.wait_dispatched()
    assert [m.body for m in s.query_message("T", "Aa")] == [b"1"]
    assert [m.body for m in s.query_message("T", "BB")] == [b"2"]
    assert [m.body for m in s.query_message("T", "other")] == [b"1"]
    assert [m.body for m in s.query_message("T", "U-1")] == [b"3"]
    assert [m.body for m in s.query_message("Other", "Aa")] == [b"4"]
    assert s.query_message("T", "nothing") == []


def test_query_returns_at_most_max_num_newest_first(make_store):
    s = make_store()
    for i in range(100):
        s.put_message(_msg(body=b"%d" % i, KEYS="same"))
    s.wait_dispatched()
    got = s.query_message("T", "same", max_num=500)
    assert len(got) == 64  # maxMsgsNumBatch caps a query
    assert [m.body for m in got[:3]] == [b"99", b"98", b"97"]


def test_lookup_by_id_and_offset(make_store):
    s = make_store()
    r = s.put_message(_msg(body=b"hello", KEYS="k"))
    mid, qoff, phy = r.entries()[0]
    assert s.message_by_id(mid).body == b"hello"
    assert s.look_message_by_offset(phy).body == b"hello"
    assert s.look_message_by_offset(phy + 1) is None
    assert s.look_message_by_offset(10**12) is None


def test_limits(make_store):
    s = make_store(mappedFileSizeCommitLog=16 * 1024 * 1024)
    r = s.put_message(_msg(body=b"x" * (4 * 1024 * 1024 + 1)))
    assert r.status is PutStatus.MESSAGE_ILLEGAL and "maxMessageSize" in r.reason
    assert s.put_message(_msg(body=b"x" * (4 * 1024 * 1024))).ok
    r = s.put_message(Message("T", b"x", properties={"P": "v" * 32768}))
    assert r.status is PutStatus.PROPERTIES_SIZE_EXCEEDED
    assert s.put_message(_msg()).queue_offset == 1  # the refused message took no offset
    for bad in ("", "a/b", "..", "x" * 128):
        assert s.put_message(_msg(bad)).status is PutStatus.MESSAGE_ILLEGAL
    assert s.put_message(_msg(q=99)).status is PutStatus.MESSAGE_ILLEGAL
    assert not os.path.exists(os.path.join(s.consumequeue_dir, ".." + "/a"))


def test_batch_larger_than_a_segment_is_refused(make_store):
    s = make_store()
    msgs = [_msg(body=b"z" * 1000) for _ in range(80)]
    r = s.put_messages("T", 0, msgs)
    assert r.status is PutStatus.MESSAGE_ILLEGAL and "segment" in r.reason


def test_batch_gets_consecutive_offsets_and_one_store_time(make_store):
    s = make_store()
    s.put_message(_msg())
    r = s.put_messages("T", 0, [_msg(body=b"%d" % i) for i in range(50)])
    assert r.ok and r.queue_offset == 1 and r.count == 50
    s.wait_dispatched()
    with s.get_message("g", "T", 0, 1, max_msgs=50) as got:
        msgs = got.messages()
    assert [m.queue_offset for m in msgs] == list(range(1, 51))
    assert len({m.store_timestamp for m in msgs}) == 1
    assert [m.commitlog_offset for m in msgs] == [e[2] for e in r.entries()]


def test_records_never_span_segments(make_store):
    s = make_store(mappedFileSizeCommitLog=1024)
    sizes = []
    for _i in range(30):
        r = s.put_message(_msg(body=b"b" * 200))
        assert r.ok
        sizes.append(r.sizes[0])
        assert r.phy_offset // 1024 == (r.phy_offset + r.sizes[0] - 1) // 1024
    s.wait_dispatched()
    first = s.commitlog.segments.segments[0]
    per_seg = 1024 // sizes[0] if (1024 // sizes[0]) * sizes[0] + 8 <= 1024 else 1024 // sizes[0] - 1
    blank_at = per_seg * sizes[0]
    assert codec.check(first.mm, blank_at, 1024, True) == (0, True)
    with s.get_message("g", "T", 0, 0, max_msgs=32) as got:
        assert len(got) == 30


def test_transactions_prepared_get_no_queue_unit(make_store):
    s = make_store()
    s.put_message(_msg(body=b"a"))
    r = s.put_message(Message("T", b"half", sys_flag=codec.TRANSACTION_PREPARED))
    assert r.ok and r.entries()[0][1] == 0
    s.put_message(_msg(body=b"b"))
    s.wait_dispatched()
    with s.get_message("g", "T", 0, 0) as got:
        assert [m.body for m in got.messages()] == [b"a", b"b"]


def test_a_small_batch_with_half_messages_gets_the_units_the_numpy_path_gives(make_store, tmp_path, monkeypatch):
    """Hints of a few messages skip numpy (dispatch.SMALL_HINT); with prepared and rolled-back
    messages among them, the units left must be those the numpy path leaves: the same queue
    offsets, and commit-log positions counted over every message of the batch."""
    from msgstore.store import dispatch
    from msgstore.store.consume_queue import ConsumeQueue

    batches = [
        [0, codec.TRANSACTION_PREPARED, 0],
        [codec.TRANSACTION_PREPARED],
        [codec.TRANSACTION_COMMIT, codec.TRANSACTION_ROLLBACK, 0, codec.TRANSACTION_PREPARED, 0],
    ]
    put_few_calls = []
    real_put_few = ConsumeQueue.put_few
    monkeypatch.setattr(ConsumeQueue, "put_few", lambda cq, *a: put_few_calls.append(a) or real_put_few(cq, *a))

    def units(root, small_hint):
        monkeypatch.setattr(dispatch, "SMALL_HINT", small_hint)
        s = make_store(root)
        for k, flags in enumerate(batches):
            tags = [{codec.PROP_TAGS: f"t{i}"} for i in range(len(flags))]
            msgs = [Message("T", b"m%d-%d" % (k, i) * (i + 1), properties=tags[i], sys_flag=f) for i, f in enumerate(flags)]
            assert s.put_messages("T", 0, msgs).ok
        assert s.wait_dispatched()
        cq = s.consume_queue("T", 0)
        d = cq.segments.directory
        return list(cq.iter_units(0)), {n: open(os.path.join(d, n), "rb").read() for n in os.listdir(d)}

    fast = units(tmp_path / "fast", dispatch.SMALL_HINT)
    assert len(put_few_calls) == 2  # the all-prepared batch leaves no unit to put
    numpy = units(tmp_path / "numpy", 0)
    assert len(put_few_calls) == 2
    assert fast == numpy
    assert [u[0] for u in fast[0]] == [0, 1, 2, 3, 4]  # queue offsets: 2 + 0 + 3 messages took one


def test_offset_by_time(make_store):
    from msgstore.store.clock import ManualClock

    clock = ManualClock(now_ms=1_700_000_000_000)
    s = make_store(clock=clock)
    for i in range(20):
        clock.advance(1000)
        s.put_message(_msg(body=b"%d" % i))
    s.wait_dispatched()
    t5 = 1_700_000_000_000 + 6000
    assert s.offset_by_time("T", 0, t5) == 5
    assert s.offset_by_time("T", 0, t5 + 500) == 6
    assert s.offset_by_time("T", 0, t5 + 500, upper=True) == 5
    assert s.offset_by_time("T", 0, 0) == 0
    assert s.offset_by_time("T", 0, 10**14) == 20


def test_second_process_on_the_same_root_is_refused(make_store, tmp_path):
    make_store()
    with pytest.raises(StoreLockedError) as e:
        MessageStore(str(tmp_path / "store"), {"mappedFileSizeCommitLog": 65536}).start()
    assert "in use by another process" in str(e.value) and str(os.getpid()) in str(e.value)


def test_clean_shutdown_removes_abort_and_keeps_data(make_store, tmp_path):
    s = make_store()
    assert os.path.exists(s.abort_path)
    for i in range(7):
        s.put_message(_msg(body=b"%d" % i, KEYS="k%d" % i))
    s.commit_offset("g1", "T", 0, 4)
    s.shutdown()
    assert not os.path.exists(s.abort_path)
    s2 = make_store()
    assert s2.recovery_report.mode == "normal"
    assert s2.max_offset("T", 0) == 7
    assert s2.query_offset("g1", "T", 0) == 4
    assert s2.query_offset("g1", "T", 1) == -1
    assert [m.body for m in s2.query_message("T", "k6")] == [b"6"]
    assert s2.put_message(_msg()).queue_offset == 7


def test_metadata_files_fall_back_to_bak(make_store):
    s = make_store()
    s.commit_offset("g", "T", 0, 1)
    s.offsets.persist()
    s.commit_offset("g", "T", 0, 2)
    s.offsets.persist()
    path = s.offsets.path
    s.shutdown()
    assert json.load(open(path + ".bak"))["offsetTable"]["T@g"]["0"] in (1, 2)
    with open(path, "w") as f:
        f.write("{not json")
    s2 = make_store()
    assert s2.query_offset("g", "T", 0) in (1, 2)
    s2.shutdown()  # persisting again must not rotate the corrupt file over the good backup
    assert json.load(open(path + ".bak"))["offsetTable"]["T@g"]["0"] in (1, 2)
    os.unlink(path)
    s3 = make_store()
    assert s3.query_offset("g", "T", 0) in (1, 2)


def test_topics_are_created_and_listed(make_store):
    s = make_store()
    s.create_topic("Orders", 4)
    assert s.put_message(_msg("Orders", q=3)).ok
    assert s.put_message(_msg("Orders", q=4)).status is PutStatus.MESSAGE_ILLEGAL
    s.put_message(_msg("Auto"))
    assert [(t.name, t.write_queue_nums) for t in s.topic_list()] == [("Auto", 8), ("Orders", 4)]
    with pytest.raises(ValueError):
        s.create_topic("bad/name")


def test_auto_create_can_be_disabled(make_store):
    s = make_store(autoCreateTopicEnable=False)
    r = s.put_message(_msg("Nope"))
    assert r.status is PutStatus.MESSAGE_ILLEGAL and "does not exist" in r.reason


# ------------------------------------------------------------------------------ flush modes


class Gate:
    """A syncer that blocks until opened: a disk that never completes a flush."""

    def __init__(self):
        self.open = threading.Event()
        self.calls = 0

    def __call__(self, mm, offset, length):
        self.calls += 1
        self.open.wait()
        msync(mm, offset, length)


def test_sync_flush_hides_unflushed_messages_from_consumers(make_store):
    gate = Gate()
    s = make_store(syncer=gate, flushDiskType="SYNC_FLUSH", syncFlushTimeout=100)
    try:
        results = [s.put_message(_msg(body=b"%d" % i)) for i in range(10)]
        assert all(r.status is PutStatus.FLUSH_DISK_TIMEOUT for r in results)
        assert s.commitlog.max_offset == sum(r.sizes[0] for r in results)
        assert s.dispatcher.bound() == 0
        s.dispatcher.dispatch_available()
        assert s.max_offset("T", 0) == 0  # consumers see none
        assert s.dispatcher.behind_bytes == 0  # bound − dispatched, and the bound is the flushed offset
        assert s.commitlog.max_offset - s.commitlog.flushed_offset == 930
    finally:
        gate.open.set()
    deadline = time.monotonic() + 10
    while s.max_offset("T", 0) < 10 and time.monotonic() < deadline:
        s.dispatcher.wakeup()
        time.sleep(0.01)
    assert s.max_offset("T", 0) == 10  # stored, never rolled back


def test_async_flush_shows_messages_before_flush(make_store):
    gate = Gate()
    s = make_store(syncer=gate)
    try:
        for i in range(10):
            assert s.put_message(_msg(body=b"%d" % i)).ok
        assert s.wait_dispatched()
        assert s.max_offset("T", 0) == 10
        assert s.commitlog.flushed_offset == 0
    finally:
        gate.open.set()


def test_sync_flush_acknowledges_only_flushed_data(make_store):
    s = make_store(flushDiskType="SYNC_FLUSH")
    r = s.put_message(_msg())
    assert r.ok
    assert s.commitlog.flushed_offset >= r.phy_offset + r.sizes[0]


def test_sync_flush_group_commit_serves_concurrent_producers(make_store):
    s = make_store(flushDiskType="SYNC_FLUSH", mappedFileSizeCommitLog=1 << 20)
    errors = []

    def producer(n):
        for i in range(40):
            r = s.put_message(_msg(body=b"%d-%d" % (n, i), q=n))
            if not r.ok:
                errors.append(r)

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert s.wait_dispatched()
    assert sum(s.max_offset("T", q) for q in range(8)) == 320


def test_wait_false_does_not_wait_for_flush(make_store):
    gate = Gate()
    s = make_store(syncer=gate, flushDiskType="SYNC_FLUSH", syncFlushTimeout=60_000)
    try:
        t0 = time.monotonic()
        r = s.put_message(_msg(WAIT="false"))
        assert r.ok and time.monotonic() - t0 < 30
    finally:
        gate.open.set()


def test_write_buffer_mode_commits_then_serves(make_store):
    s = make_store(transientStorePoolEnable=True, commitIntervalCommitLog=10, transientStorePoolSize=2)
    for _i in range(200):
        assert s.put_message(_msg(body=b"w" * 500)).ok  # spans several segments
    deadline = time.monotonic() + 10
    while s.max_offset("T", 0) < 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert s.max_offset("T", 0) == 200
    with s.get_message("g", "T", 0, 150) as r:
        assert r.messages()[0].body == b"w" * 500
    s.shutdown()
    s2 = make_store(transientStorePoolEnable=True)
    assert s2.max_offset("T", 0) == 200


def test_a_write_buffer_is_committed_on_request_and_each_commit_announced(make_store):
    """Readers of the log's bytes (a master's follower streams) see buffered appends only once
    committed: the store tells its append listeners after the commit too, not only after the
    append, and commit_soon commits at once whatever the pacing (here a minute). A SYNC
    master's acknowledgements waited up to a second for both."""
    import threading

    s = make_store(transientStorePoolEnable=True, commitIntervalCommitLog=60_000, commitCommitLogThoroughInterval=60_000)
    told = threading.Semaphore(0)
    s.append_listeners.append(told.release)
    before = s.commitlog.max_offset
    r = s.put_message(_msg(body=b"buffered"))
    assert r.ok
    assert told.acquire(timeout=10)  # the append
    with s.commitlog.raw(before, 1 << 20) as view:
        assert view is not None and len(view) == 0  # not readable yet: in the buffer
    s.commit_soon(r.phy_offset + r.wrote_bytes)
    assert told.acquire(timeout=10)  # the commit
    with s.commitlog.raw(before, 1 << 20) as view:
        assert view is not None and b"buffered" in bytes(view)


def test_write_buffer_requires_async_flush(make_store):
    from msgstore.store import ConfigError

    with pytest.raises(ConfigError) as e:
        make_store(transientStorePoolEnable=True, flushDiskType="SYNC_FLUSH")
    assert e.value.key == "transientStorePoolEnable"


def test_busy_append_lock_reports_os_page_cache_busy(make_store):
    s = make_store(osPageCacheBusyTimeOutMills=50)
    s.commitlog.lock.acquire()
    try:
        r = s.put_message(_msg())
        assert r.status is PutStatus.OS_PAGE_CACHE_BUSY
    finally:
        s.commitlog.lock.release()
    assert s.put_message(_msg()).queue_offset == 0


def test_long_poll_listener_sees_new_units(make_store):
    s = make_store()
    seen = []
    ev = threading.Event()

    def listener(topic, qid, max_offset):
        seen.append((topic, qid, max_offset))
        ev.set()

    s.add_arrival_listener(listener)
    s.put_message(_msg(q=2))
    assert ev.wait(5)
    assert seen[-1] == ("T", 2, 1)


def test_shutdown_refuses_new_puts(make_store):
    s = make_store()
    s.shutdown()
    r = s.put_message(_msg())
    assert r.status is PutStatus.SERVICE_NOT_AVAILABLE and "shut down" in r.reason


def test_a_poll_leaves_a_fresh_append_to_its_own_path_and_takes_what_nobody_took(make_store, monkeypatch):
    """Dispatcher.cycle: woken, it dispatches at once; on a poll, only what was there at the
    previous poll too. A send's batch is dispatched by its own path (dispatch_here on the
    event loop, or the wakeup it then makes): a poll that got there first left the arrival's
    long polls to a hand-off from the thread. What nobody took within an interval (a put that
    wakes nobody), the next poll takes."""
    s = make_store()
    s.dispatcher.limit = lambda: 0  # the store's own thread dispatches nothing here
    d = dispatch.Dispatcher(s.commitlog, s.queues, s.index, s.flags, s.settings)
    d.reput_from = s.dispatcher.reput_from
    # each cycle() below waits no time: a poll whose time ran out, unless woken
    monkeypatch.setattr(d, "wait", lambda seconds: dispatch.Dispatcher.wait(d, 0.0))
    assert s.put_message(_msg()).ok
    d.cycle()
    assert s.max_offset("T", 0) == 0  # just appended: left to its own path
    assert d.dispatch_here(16 * 1024)
    assert s.max_offset("T", 0) == 1
    assert s.put_message(_msg()).ok
    d.cycle()  # the first poll to see it
    assert s.max_offset("T", 0) == 1
    d.cycle()  # still there a poll later: nobody took it
    assert s.max_offset("T", 0) == 2
    assert s.put_message(_msg()).ok
    d.wakeup()
    d.cycle()  # woken: at once
    assert s.max_offset("T", 0) == 3


def _dispatched(s, topic: str, count: int, within: float = 10.0) -> bool:
    """Whether queue 0 of ``topic`` reaches ``count`` units within ``within`` seconds, without
    waking the dispatcher (wait_dispatched would)."""
    deadline = time.monotonic() + within
    while s.max_offset(topic, 0) < count and time.monotonic() < deadline:
        time.sleep(0.001)
    return s.max_offset(topic, 0) == count


def test_an_append_that_wakes_nobody_is_dispatched_by_the_polls(make_store):
    """put_prepared wakes no dispatcher (a send path dispatches, or wakes it, after its
    answer): the dispatcher's polls take what nobody took."""
    s = make_store()
    batch = codec.prepare_batch("T", 0, [_msg()], s.commitlog.store_host_bytes, s.clock.now_ms(), s.config.maxMessageSize)
    assert s.put_prepared(batch).status.stored
    assert _dispatched(s, "T", 1)


def test_a_store_put_wakes_the_dispatcher(make_store, monkeypatch):
    """put_messages (the broker's own puts, an embedding program's) wakes the dispatcher: its
    consumers do not wait for a poll."""
    s = make_store()
    d = s.dispatcher
    monkeypatch.setattr(dispatch, "POLL_INTERVAL", 3600.0)
    d.wakeup()  # one more cycle, after which the thread waits an hour unless woken
    deadline = time.monotonic() + 10
    while d._wake.is_set():
        assert time.monotonic() < deadline, "the dispatcher did not take its wakeup"
        time.sleep(0.001)
    assert s.put_message(_msg()).ok
    assert _dispatched(s, "T", 1)


def test_consumer_lag_and_messages_held(make_store):
    s = make_store()
    for i in range(10):
        s.put_message(_msg(q=i % 2))
    s.wait_dispatched()
    assert s.messages_held() == 10
    assert s.consumer_lag() == {}
    s.commit_offset("billing", "T", 0, 3)  # queue 1 never committed: it counts from its start
    assert s.consumer_lag() == {"billing": 2 + 5}
    s.commit_offset("billing", "T", 1, 5)
    s.commit_offset("audit", "T", 0, 5)
    assert s.consumer_lag() == {"billing": 2, "audit": 5}


def test_a_small_dispatch_runs_in_the_callers_thread_a_large_one_is_left_to_the_dispatcher(make_store, monkeypatch):
    """Dispatcher.dispatch_here: the event loop dispatches a trickle's batch itself, after its
    answer (no hand-off to the dispatcher's thread and back); more than ``most`` bytes, or a
    dispatch already under way, stays with the thread."""
    s = make_store()
    me = threading.current_thread()
    d = s.dispatcher
    d.limit = lambda: None if threading.current_thread() is me else 0  # (the thread dispatches nothing here)
    monkeypatch.setattr(d, "wakeup", lambda: None)  # (nor is it at work when the puts below would wake it)
    woken = []
    s.add_arrival_listener(lambda topic, qid, max_offset: woken.append((topic, qid, max_offset, threading.current_thread())))
    for i in range(3):
        assert s.put_message(_msg(body=b"%d" % i)).ok
    with d.paused():  # the thread at work: left to it
        assert not d.dispatch_here(16 * 1024)
    assert d.dispatch_here(16 * 1024)
    assert s.max_offset("T", 0) == 3  # at once, in this thread
    assert woken == [("T", 0, n, me) for n in (1, 2, 3)]  # (a put each)
    assert s.put_message(_msg(body=b"x" * 20_000)).ok
    assert not d.dispatch_here(16 * 1024)
    assert s.max_offset("T", 0) == 3
    d.limit = None
    assert s.wait_dispatched()
    assert s.max_offset("T", 0) == 4
    assert woken[-1][3] is not me
