"""Engine defects a trial of msgstore as a new user found (issue 15), each pinned by a test."""

from __future__ import annotations

import os
import threading
import time

import pytest

from msgstore.record.codec import Message
from msgstore.store import ConfigError, MessageStore, metadata
from msgstore.store.clock import ManualClock
from msgstore.store.metadata import ConsumerOffsets
from tests.support.servers import wait_until


def _fill(store: MessageStore, n: int, body: bytes = b"x" * 100) -> None:
    for i in range(n):
        assert store.put_message(Message("T", body, properties={"KEYS": f"k{i}"})).ok
    assert store.wait_dispatched()


# ---------------------------------------------------------------------------------- 4


def test_a_restart_only_change_the_files_cannot_take_is_refused(make_store):
    """#4: accepted, mappedFileSizeCommitLog of another size made the next start fail."""
    s = make_store()
    _fill(s, 5)
    for key, value in (("mappedFileSizeCommitLog", 128 * 1024), ("mappedFileSizeConsumeQueue", 40_000), ("maxIndexNum", 8192)):
        with pytest.raises(ConfigError) as e:
            s.update_config({key: value})
        assert e.value.key == key and "cannot open" in e.value.reason
    assert s.pending_restart == {} and s.update_config({"flushDiskType": "SYNC_FLUSH"}).restart_required  # others still go
    assert s.update_config({"mappedFileSizeCommitLog": s.commitlog.segment_size}).restart_required == {}  # the same size is no change


def test_a_failed_start_leaves_no_abort_file(make_store, tmp_path):
    """#4: the abort file of a start that never opened the store made the next good start
    report a false abnormal recovery."""
    root = tmp_path / "store"
    s = make_store(root)
    _fill(s, 3)
    s.shutdown()
    assert not os.path.exists(root / "abort")
    bad = MessageStore(str(root), {"mappedFileSizeCommitLog": 128 * 1024})
    with pytest.raises(ValueError):
        bad.start()
    assert not os.path.exists(root / "abort")
    good = make_store(root)
    assert good.recovery_report.mode == "normal" and good.recovery_report.index_files_destroyed == 0
    # ... while a crash's abort file survives a failed start, so the next start still recovers abnormally
    good._release_lock()  # a SIGKILL: no shutdown, the abort file stays
    good.state = "shutdown"
    with pytest.raises(ValueError):
        MessageStore(str(root), {"mappedFileSizeCommitLog": 128 * 1024}).start()
    assert os.path.exists(root / "abort")


# ---------------------------------------------------------------------------------- 10


def test_a_commit_is_on_disk_when_it_returns(make_store, tmp_path):
    """#10: commits were persisted every 5 s; a SIGKILL lost the last ones."""
    root = tmp_path / "store"
    s = make_store(root, flushConsumerOffsetInterval=3_600_000)  # the periodic persister never runs here
    _fill(s, 3)
    s.commit_offset("billing", "T", 0, 2)
    on_disk = ConsumerOffsets(str(root / "config"))
    on_disk.load()  # what a restart after a crash would read
    assert on_disk.query("billing", "T", 0) == 2


def test_concurrent_commits_share_writes(tmp_path, monkeypatch):
    offsets = ConsumerOffsets(str(tmp_path))
    writes = []
    original = metadata.write_atomic

    def counting(path, *args, **kw):  # the file written: what a commit that waited costs
        writes.append(path)
        return original(path, *args, **kw)

    monkeypatch.setattr(metadata, "write_atomic", counting)
    # eight commits made while a write is under way wait for it, then one write covers them all
    offsets._write_lock.acquire()
    waiting = [threading.Thread(target=lambda i=i: offsets.commit("g", "T", i, 0, durable=True)) for i in range(8)]
    for t in waiting:
        t.start()
    wait_until(lambda: offsets._changes == 8, timeout=10, what="eight commits recorded, their writes waiting")
    offsets._write_lock.release()
    for t in waiting:
        t.join()
    assert len(writes) == 1, writes
    threads = [threading.Thread(target=lambda i=i: [offsets.commit("g", "T", i, n, durable=True) for n in range(20)]) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check = ConsumerOffsets(str(tmp_path))
    check.load()
    assert all(check.query("g", "T", i) == 19 for i in range(8))  # every last commit is there


# ---------------------------------------------------------------------------------- 12


def test_a_manual_delete_and_the_scheduled_cleaner_take_turns(make_store):
    """#12: both walked the same segments at once: deletions counted twice, batches exceeded."""
    clock = ManualClock(hour=12)
    s = make_store(
        clock=clock,
        deleteWhen="12",
        mappedFileSizeCommitLog=4096,
        fileReservedTime=1,
        deleteFileBatchMax=10,
        deleteCommitLogFilesInterval=30,
    )
    for _ in range(16 * 4):
        assert s.put_message(Message("T", b"z" * 900)).ok
    segs = list(s.commitlog.segments.segments)
    assert len(segs) >= 16
    old = (clock.now_ms() - 2 * 3600 * 1000) / 1000
    for seg in segs[:15]:
        os.utime(seg.path, (old, old))
    paused, resume = threading.Event(), threading.Event()

    def sleep(seconds: float) -> None:  # the scheduled run stops after its first deletion until the manual one has begun
        if threading.current_thread() is scheduled and not paused.is_set():
            paused.set()
            resume.wait(10)
        time.sleep(seconds)

    clock.sleep = sleep
    runs = []
    scheduled = threading.Thread(target=lambda: runs.append(("scheduled", s.cleaner.run_once())))  # deleteWhen says now
    scheduled.start()
    assert paused.wait(10), "the scheduled run deleted nothing"
    manual_run: list[int] = []
    manual_thread = threading.Thread(target=lambda: manual_run.append(s.manual_delete()))
    manual_thread.start()  # (while the scheduled run, mid-batch, has 14 more deletions 30 ms apart to go)
    resume.set()
    scheduled.join()
    manual_thread.join(30)
    (manual,) = manual_run
    deleted = [r.deleted for _, r in runs] + [manual]
    assert sum(deleted) == 15 and max(deleted) <= 10, deleted
    assert len(s.commitlog.segments.segments) == len(segs) - 15
    assert s.cleaner.manual_runs_left == 20 - 1  # armed for 20 runs, the manual one took one


def test_a_segment_file_gone_behind_the_stores_back_is_not_counted_as_deleted(make_store):
    clock = ManualClock(hour=12)
    s = make_store(clock=clock, deleteWhen="12", mappedFileSizeCommitLog=4096, fileReservedTime=1, deleteCommitLogFilesInterval=0)
    for _ in range(5 * 4):
        assert s.put_message(Message("T", b"z" * 900)).ok
    segs = list(s.commitlog.segments.segments)
    old = (clock.now_ms() - 2 * 3600 * 1000) / 1000
    for seg in segs[:3]:
        os.utime(seg.path, (old, old))
    os.unlink(segs[0].path)
    assert s.cleaner.run_once().deleted == 2
    assert [seg.start for seg in s.commitlog.segments.segments] == [seg.start for seg in segs[3:]]


# ---------------------------------------------------------------------------------- 13


def test_restarting_an_idle_store_does_not_read_its_preallocated_segment(make_store, tmp_path):
    """#13: finding the end of a preallocated segment read it to its end (1 GiB of zeros,
    seconds) on every restart; the scan now stops after a zero run no record can contain."""
    root = tmp_path / "store"
    size = 64 << 20
    s = make_store(root, mappedFileSizeCommitLog=size, maxMessageSize=64 * 1024)
    _fill(s, 6)
    s.shutdown()
    again = make_store(root, mappedFileSizeCommitLog=size, maxMessageSize=64 * 1024)
    report = again.recovery_report
    assert report.mode == "normal" and again.max_offset("T", 0) + sum(again.max_offset("T", q) for q in range(1, 8)) == 6
    assert report.tail_bytes_checked <= 6 << 20, report.tail_bytes_checked  # the old scan read all 64 MiB


def test_a_stale_tail_after_a_crash_is_still_zeroed(make_store, tmp_path):
    """The bounded scan still finds garbage after the recovered end, across zero runs inside it."""
    root = tmp_path / "store"
    s = make_store(root, mappedFileSizeCommitLog=1 << 20, maxMessageSize=8192)
    _fill(s, 4)
    end = s.commitlog.max_offset
    s.shutdown()
    seg_path = os.path.join(root, "commitlog", f"{0:020d}")
    with open(seg_path, "r+b") as f:  # a torn write: bytes, a zero gap shorter than a body, more bytes
        f.seek(end)
        f.write(b"\xab" * 300 + b"\0" * 5000 + b"\xcd" * 200)
    open(root / "abort", "w").close()
    again = make_store(root, mappedFileSizeCommitLog=1 << 20, maxMessageSize=8192)
    assert again.recovery_report.bytes_truncated == 300 + 5000 + 200
    with open(seg_path, "rb") as f:
        f.seek(end)
        assert f.read(8192) == bytes(8192)
