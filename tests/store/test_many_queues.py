"""A node holding thousands of queues (issue 21): bounded descriptors, restarts that take the
queues' ends from their saved state, and cost that follows traffic rather than the number of
queues. In-process stores on real files here; real server processes in tests/api/test_scale.py."""

from __future__ import annotations

import os
import random
import shutil

import pytest

from msgstore.store import GetStatus, Message, MessageStore, abort_file
from msgstore.store.clock import ManualClock
from msgstore.store.consume_queue import ConsumeQueue
from msgstore.store.file_pool import FilePool
from msgstore.store.queue_state import path_in
from tests.support.servers import wait_until

SETTINGS = {
    "mappedFileSizeCommitLog": 1 << 20,
    "mappedFileSizeConsumeQueue": 20 * 64,  # 64 units a file: queues roll over several files
    "maxHashSlotNum": 4096,
    "maxIndexNum": 16384,
    "flushIntervalConsumeQueue": 20,
    "cleanResourceInitialDelay": 3_600_000,
    "maxOpenQueueFiles": 16,
}


def read_all(store: MessageStore, topic: str, qid: int) -> list[bytes]:
    out, offset = [], store.min_offset(topic, qid)
    while True:
        res = store.get_message(None, topic, qid, offset, max_msgs=32)
        try:
            if res.status is not GetStatus.FOUND:
                return out
            out += [m.body for m in res.messages()]
            offset = res.next_offset
        finally:
            res.release()


def fds_of_queue_files(root: str) -> int:
    cq = os.path.join(root, "consumequeue")
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(cq):
                n += 1
        except OSError:
            continue
    return n


def test_the_pool_of_open_queue_files_stays_within_its_bound_under_random_access(tmp_path):
    root = str(tmp_path / "store")
    store = MessageStore(root, SETTINGS).start()
    rng = random.Random(5)
    sent: dict[tuple[str, int], list[bytes]] = {}
    try:
        for i in range(3_000):  # 300 queues, up to ~20 messages each: several files per queue
            topic, qid = f"t{rng.randrange(75)}", rng.randrange(4)
            body = b"%d" % i
            assert store.put_message(Message(topic, body, queue_id=qid)).ok
            sent.setdefault((topic, qid), []).append(body)
            if i % 50 == 0:
                assert store.wait_dispatched()
                key = rng.choice(list(sent))
                assert read_all(store, *key) == sent[key]
                assert len(store.queues.pool) <= 16
                assert fds_of_queue_files(root) <= 16
        assert store.wait_dispatched()
        for key, bodies in sent.items():  # every queue read once more, in random order
            assert read_all(store, *key) == bodies
            assert len(store.queues.pool) <= 16 and fds_of_queue_files(root) <= 16
        assert store.queues.pool.opened > 16  # it did reopen files: the bound was what held
    finally:
        store.shutdown()


def test_a_clean_restart_takes_the_saved_ends_and_opens_no_queue_file(tmp_path):
    root = str(tmp_path / "store")
    store = MessageStore(root, SETTINGS).start()
    for t in range(250):
        for q in range(4):
            assert store.put_messages(f"topic-{t}", q, [Message(f"topic-{t}", b"m-%d-%d" % (t, q), queue_id=q)]).ok
    assert store.wait_dispatched()
    store.shutdown()
    assert os.path.exists(path_in(os.path.join(root, "consumequeue")))

    store = MessageStore(root, SETTINGS).start()
    try:
        assert store.recovery_report.mode == "normal"
        assert store.queues.pool.opened == 0 and len(store.queues) == 1_000  # no queue file was opened to start
        for t in (0, 137, 249):
            for q in range(4):
                assert read_all(store, f"topic-{t}", q) == [b"m-%d-%d" % (t, q)]
                assert store.max_offset(f"topic-{t}", q) == 1
        assert store.put_messages("topic-3", 2, [Message("topic-3", b"next", queue_id=2)]).ok
        assert store.wait_dispatched()
        assert read_all(store, "topic-3", 2) == [b"m-3-2", b"next"]
    finally:
        store.shutdown()


def crash(store: MessageStore) -> None:
    """What a SIGKILL leaves: files as written (page cache kept), no clean stop, the abort file."""
    for s in store._services:
        s.stop()
    store._close_files()
    store._release_lock()
    store.state = "shutdown"


def reboot(monkeypatch) -> None:
    """Play a machine that went down with the process: another boot id than the crashed run's."""
    other = "another-boot-" + str(random.random())
    monkeypatch.setattr(abort_file, "boot_id", lambda: other)


@pytest.mark.parametrize("saved_state", [True, False])
@pytest.mark.parametrize("rebooted", [False, True], ids=["process-crash", "machine-crash"])
def test_after_a_crash_every_message_is_read_whatever_the_saved_state_says(tmp_path, monkeypatch, saved_state, rebooted):
    root = str(tmp_path / "store")
    store = MessageStore(root, SETTINGS).start()
    sent: dict[tuple[str, int], list[bytes]] = {}

    def put(t: int, q: int, body: bytes) -> None:
        assert store.put_messages(f"topic-{t}", q, [Message(f"topic-{t}", body, queue_id=q)]).ok
        sent.setdefault((f"topic-{t}", q), []).append(body)

    for t in range(100):
        for q in range(4):
            put(t, q, b"before-%d-%d" % (t, q))
    assert store.wait_dispatched()
    store._flush_consume_queues(0)  # a state save happens here (the first pass after a start saves)
    if not saved_state:
        os.unlink(path_in(os.path.join(root, "consumequeue")))
    for t in range(50, 150):  # after the save: new queues, and queues rolling to new files
        for q in range(4):
            for k in range(70 if t % 10 == 0 else 1):
                put(t, q, b"after-%d-%d-%d" % (t, q, k))
    assert store.wait_dispatched()
    crash(store)
    if rebooted:
        reboot(monkeypatch)

    store = MessageStore(root, SETTINGS).start()
    try:
        assert store.recovery_report.mode == "abnormal"
        # the saved ends are checked against the files only when the page cache may have been lost
        assert (store.recovery_report.queues_checked > 0) == (saved_state and rebooted)
        assert len(store.queues) == len(sent)
        for (topic, q), bodies in sent.items():
            assert read_all(store, topic, q) == bodies, (topic, q)
            assert store.max_offset(topic, q) == len(bodies)
        assert store.put_messages("topic-149", 3, [Message("topic-149", b"last", queue_id=3)]).ok
    finally:
        store.shutdown()


@pytest.mark.parametrize("how", ["machine-crash", "copied-directory", "old-abort-file"])
def test_a_saved_end_not_on_disk_is_scanned_again(tmp_path, monkeypatch, how):
    """A state saved after its queue files were lost (a machine that went down, or a copy of a
    live directory): the end it names is checked against the file, never trusted blindly."""
    root = str(tmp_path / "store")
    # every flush pass saves the ends: the pass below must save all ten, not find that the
    # flusher's own pass saved the table moments before (even before the queue existed: the
    # saved state then named no queue, and nothing was checked; seen in CI)
    store = MessageStore(root, {**SETTINGS, "queueStateInterval": 0}).start()
    for i in range(10):
        assert store.put_messages("t", 0, [Message("t", b"%d" % i, queue_id=0)]).ok
    assert store.wait_dispatched()
    store._flush_consume_queues(0)
    crash(store)
    if how == "machine-crash":
        reboot(monkeypatch)
    elif how == "copied-directory":
        shutil.copytree(root, str(tmp_path / "copy"))
        root = str(tmp_path / "copy")
    else:  # RocketMQ's (and our earlier versions') empty abort file says nothing about the run
        open(os.path.join(root, "abort"), "wb").close()
    qfile = os.path.join(root, "consumequeue", "t", "0", "00000000000000000000")
    with open(qfile, "r+b") as f:  # the last five units never reached the disk
        f.seek(5 * 20)
        f.write(bytes(5 * 20))
    store = MessageStore(root, SETTINGS).start()
    try:
        assert store.recovery_report.queues_checked == 1
        assert store.recovery_report.queues_scanned == 1
        assert read_all(store, "t", 0) == [b"%d" % i for i in range(10)]  # dispatched again from the commit log
    finally:
        store.shutdown()


def test_a_process_crash_start_opens_no_queue_file_it_does_not_write(tmp_path):
    """Only the process died (same boot, same directory): its writes are in the page cache, so
    the saved ends are taken without a look at 300 queues' files; re-dispatch writes the few
    that changed after the save."""
    root = str(tmp_path / "store")
    settings = {**SETTINGS, "queueStateInterval": 0}  # every flush pass saves the ends
    store = MessageStore(root, settings).start()
    for t in range(100):
        for q in range(3):
            assert store.put_messages(f"t{t}", q, [Message(f"t{t}", b"a", queue_id=q)]).ok
    assert store.wait_dispatched()
    store._flush_consume_queues(0)
    assert store.put_messages("t7", 1, [Message("t7", b"b", queue_id=1)]).ok
    assert store.wait_dispatched()
    crash(store)
    store = MessageStore(root, settings).start()
    try:
        assert store.recovery_report.queues_checked == 0
        assert store.queues.pool.opened <= 1  # t7/1, written again by re-dispatch
        assert read_all(store, "t7", 1) == [b"a", b"b"]
        assert read_all(store, "t99", 2) == [b"a"]
    finally:
        store.shutdown()


def test_one_queue_whose_file_cannot_be_written_is_named_in_the_refusal(tmp_path):
    root = str(tmp_path / "store")
    store = MessageStore(root, SETTINGS).start()
    try:
        assert store.put_messages("ok", 0, [Message("ok", b"a", queue_id=0)]).ok
        assert store.wait_dispatched()
        os.makedirs(os.path.join(root, "consumequeue", "broken", "0", "00000000000000000000"))  # a directory where its file goes
        store.put_messages("broken", 0, [Message("broken", b"x", queue_id=0)])

        def refused():
            store.dispatcher.wakeup()
            r = store.put_messages("ok", 0, [Message("ok", b"b", queue_id=0)])
            return None if r.ok else r

        refused = wait_until(refused, timeout=10, interval=0.01, what="the dispatch failure to refuse writes")
        assert "consume queue broken/0" in refused.reason and "Is a directory" in refused.reason, refused.reason
    finally:
        store.shutdown()


def test_file_pool_never_closes_a_descriptor_in_use(tmp_path):
    pool = FilePool(2)
    paths = [str(tmp_path / f"f{i}") for i in range(5)]
    for p in paths:
        with open(p, "wb") as f:
            f.write(p.encode())
    with pool.use(paths[0]) as held:
        for p in paths[1:]:
            with pool.use(p) as fd:
                assert os.pread(fd, 100, 0) == p.encode()
        assert os.pread(held, 100, 0) == paths[0].encode()  # still open and still its file
        assert len(pool) <= 3
    with pool.use(paths[4]):
        pass
    assert len(pool) == 2
    pool.close_all()
    assert len(pool) == 0


def bytes_read() -> int:
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


def test_inspect_fsck_and_the_spark_reader_never_read_a_queue_files_holes(tmp_path):
    """1,000 queues of RocketMQ's default 5.7 MB sparse files: reading every file whole was
    5.7 GB of zeros; only their allocated extents are read now."""
    from msgstore.pipeline.files import consume_queue_units
    from msgstore.store import offline

    root = str(tmp_path / "store")
    settings = {k: v for k, v in SETTINGS.items() if k != "mappedFileSizeConsumeQueue"}  # the default size
    store = MessageStore(root, settings).start()
    for t in range(250):
        for q in range(4):
            assert store.put_messages(f"t{t}", q, [Message(f"t{t}", b"m", queue_id=q)]).ok
    assert store.wait_dispatched()
    store.shutdown()

    before = bytes_read()
    report = offline.inspect_dir(root, settings)
    assert len(report["consume_queues"]) == 1_000 and all(q["max_offset"] == 1 for q in report["consume_queues"])
    assert offline.fsck(root, settings).ok
    units = sum(b.num_rows for b in consume_queue_units(root))
    assert units == 1_000
    assert bytes_read() - before < 200 * 2**20, "the files' holes were read"


def test_queues_dropped_after_the_state_was_saved_stay_dropped_after_a_crash(tmp_path):
    """A saved state naming a dropped queue made every write fail after a crash (its files
    were gone and the dispatcher could not write them); the drop now discards the state."""
    root = str(tmp_path / "store")
    clock = ManualClock(1_700_000_000_000)
    store = MessageStore(root, SETTINGS, clock=clock).start()
    for topic in ("keep", "gone"):
        store.create_topic(topic, 2)
        for q in range(2):
            assert store.put_messages(topic, q, [Message(topic, b"x", queue_id=q)]).ok
    assert store.wait_dispatched()
    store._flush_consume_queues(0)  # the state names both topics
    clock.advance(60_000)  # so that recovery does not dispatch "gone" again from the commit log
    assert store.put_messages("keep", 0, [Message("keep", b"later", queue_id=0)]).ok
    assert store.wait_dispatched()
    store._flush_consume_queues(0)
    assert store.topics.delete("gone")  # (out of topics.json only: what clean-unused-topics looks for)
    assert store.clean_unused_topics() == ["gone"]
    crash(store)
    store = MessageStore(root, SETTINGS, clock=clock).start()
    try:
        # (records of "gone" still in the segment recovery re-dispatches bring it back, as in
        # RocketMQ: that is the commit log's word, not a stale state's)
        assert store.put_messages("keep", 1, [Message("keep", b"y", queue_id=1)]).ok  # writes were never stopped
        assert store.put_messages("gone", 0, [Message("gone", b"again", queue_id=0)]).ok
        assert store.wait_dispatched()
        assert read_all(store, "keep", 1) == [b"x", b"y"] and read_all(store, "keep", 0) == [b"x", b"later"]
        assert read_all(store, "gone", 0)[-1] == b"again"
    finally:
        store.shutdown()


def test_a_queue_cut_back_after_the_state_was_saved_keeps_what_was_written_after_the_cut(tmp_path):
    """A rejoining member cuts its log (truncate_to) below a saved end, then takes new records:
    the saved end and max phy would have skipped them after a crash."""
    root = str(tmp_path / "store")
    store = MessageStore(root, SETTINGS).start()
    results = [store.put_messages("t", 0, [Message("t", b"old-%d" % i, queue_id=0)]) for i in range(10)]
    assert all(r.ok for r in results) and store.wait_dispatched()
    store._flush_consume_queues(0)  # saved: end 10
    store.truncate_to(results[5].phy_offset)  # what the new master never had goes
    assert store.max_offset("t", 0) == 5
    for i in range(10):
        assert store.put_messages("t", 0, [Message("t", b"new-%d" % i, queue_id=0)]).ok
    assert store.wait_dispatched()
    crash(store)
    store = MessageStore(root, SETTINGS).start()
    try:
        assert store.max_offset("t", 0) == 15
        assert read_all(store, "t", 0) == [b"old-%d" % i for i in range(5)] + [b"new-%d" % i for i in range(10)]
    finally:
        store.shutdown()


def test_a_start_that_dies_before_saving_its_ends_leaves_nothing_to_trust(tmp_path, monkeypatch):
    """After a machine crash the first start checks every saved end; if that start dies before
    it saved the ends it recovered, the next one (same boot now) must check them again."""
    root = str(tmp_path / "store")
    settings = {**SETTINGS, "queueStateInterval": 0}
    store = MessageStore(root, settings).start()
    for q in range(4):
        assert store.put_messages("t", q, [Message("t", b"m%d" % q, queue_id=q)]).ok
    assert store.wait_dispatched()
    store._flush_consume_queues(0)
    crash(store)
    assert open(os.path.join(root, "abort")).read().startswith("boot=")  # stamped after its first save
    reboot(monkeypatch)
    slow = {**settings, "queueStateInterval": 10**12}  # no save of its own before it dies
    store = MessageStore(root, slow).start()
    assert store.recovery_report.queues_checked == 4
    assert open(os.path.join(root, "abort")).read() == ""
    crash(store)
    store = MessageStore(root, settings).start()
    try:
        assert store.recovery_report.queues_checked == 4
        assert [read_all(store, "t", q) for q in range(4)] == [[b"m%d" % q] for q in range(4)]
    finally:
        store.shutdown()


def test_a_state_save_that_raced_with_a_drop_is_not_written(tmp_path, monkeypatch):
    """The flusher may read the state epoch after a drop began and snapshot the queues before
    it ended: that snapshot still lists the dropped queue and must never reach the disk."""
    root = str(tmp_path / "store")
    store = MessageStore(root, SETTINGS).start()
    try:
        assert store.put_messages("gone", 0, [Message("gone", b"x")]).ok
        assert store.wait_dispatched()
        seen = {}
        destroy = ConsumeQueue.destroy

        def mid_drop(cq, *a, **kw):  # the flusher's epoch read and snapshot (still naming the queue), mid-drop
            seen["epoch"], seen["records"] = store.queues.state_epoch, store.queues.snapshot() + [("gone", 0, [0], 0, 20, 1, 0)]
            return destroy(cq, *a, **kw)

        monkeypatch.setattr(ConsumeQueue, "destroy", mid_drop)
        store.queues.drop("gone", 0)
        assert not store._save_queue_state(0, 0, seen["records"], clean=False, epoch=seen["epoch"])
        assert not os.path.exists(path_in(os.path.join(root, "consumequeue")))
    finally:
        store.shutdown()


def test_a_crash_right_after_a_clean_start_needs_no_check(tmp_path):
    """A start that took the saved ends as they were (a clean stop's) names its run at once:
    killed before its first save of its own, the next start still trusts them."""
    root = str(tmp_path / "store")
    store = MessageStore(root, SETTINGS).start()
    for q in range(4):
        assert store.put_messages("t", q, [Message("t", b"m%d" % q, queue_id=q)]).ok
    store.shutdown()
    store = MessageStore(root, {**SETTINGS, "queueStateInterval": 10**12}).start()
    assert open(os.path.join(root, "abort")).read().startswith("boot=")
    crash(store)
    store = MessageStore(root, SETTINGS).start()
    try:
        assert store.recovery_report.mode == "abnormal" and store.recovery_report.queues_checked == 0
        assert [read_all(store, "t", q) for q in range(4)] == [[b"m%d" % q] for q in range(4)]
    finally:
        store.shutdown()
