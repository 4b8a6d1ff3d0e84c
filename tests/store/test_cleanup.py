"""Cleanup (docs/store-format.md §9, §12.4, §12.5) with an injected clock and disk probe."""

import os
import time

from msgstore.store import FixedDiskProbe, GetStatus, ManualClock, Message, PutStatus, Unavailable

HOUR = 3600


def _scenario_store(make_store, *, hour_matches=True, usage=0.1, **extra):
    """CL segments of 128 B holding one 120-byte message each (docs/store-format.md §13)."""
    clock = ManualClock()
    now_hour = clock.local_hour()
    probe = FixedDiskProbe(usage)
    settings = dict(
        mappedFileSizeCommitLog=128,
        fileReservedTime=1,
        deleteCommitLogFilesInterval=0,
        deleteWhen=f"{now_hour:02d}" if hour_matches else f"{(now_hour + 12) % 24:02d}",
        mappedFileSizeConsumeQueue=20 * 8,
        maxHashSlotNum=16,
        maxIndexNum=20,
    )
    settings.update(extra)
    s = make_store(clock=clock, disk_probe=probe, **settings)
    for _ in range(55):
        r = s.put_message(Message("test", b"0123456789abcd", properties={"KEYS": "hello"}))
        assert r.ok and r.sizes == [120]
    assert s.wait_dispatched()
    assert len(s.commitlog.segments.segments) == 55
    return s, clock, probe


def _backdate(store, count, hours=2):
    old = time.time() - hours * HOUR
    for seg in store.commitlog.segments.segments[:count]:
        os.utime(seg.path, (old, old))


def test_time_triggered_deletion_in_batches_of_ten(make_store):
    s, _, _ = _scenario_store(make_store)
    _backdate(s, 15)
    assert s.cleaner.run_once().deleted == 10
    assert s.cleaner.run_once().deleted == 5
    assert s.cleaner.run_once().deleted == 0
    assert len(s.commitlog.segments.segments) == 40
    assert s.commitlog.min_offset == 15 * 128


def test_nothing_is_deleted_outside_delete_when(make_store):
    s, _, _ = _scenario_store(make_store, hour_matches=False)
    _backdate(s, 15)
    run = s.cleaner.run_once()
    assert not run.time_up and run.deleted == 0


def test_forced_deletion_above_the_forcible_ratio(make_store):
    s, _, _ = _scenario_store(make_store, hour_matches=False, usage=0.86)
    runs = [s.cleaner.run_once().deleted for _ in range(7)]
    assert runs == [10, 10, 10, 10, 10, 4, 0]  # unexpired too; the last segment always stays
    assert len(s.commitlog.segments.segments) == 1


def test_over_max_used_ratio_deletes_only_expired(make_store):
    s, _, _ = _scenario_store(make_store, hour_matches=False, usage=0.80)
    _backdate(s, 3)
    run = s.cleaner.run_once()
    assert run.space_full and not run.forced and run.deleted == 3


def test_unreadable_usage_triggers_deletion_of_expired(make_store):
    s, _, probe = _scenario_store(make_store, hour_matches=False, usage=None)
    _backdate(s, 4)
    run = s.cleaner.run_once()
    assert run.space_full and run.deleted == 4


def test_forcible_deletion_can_be_disabled(make_store):
    s, _, _ = _scenario_store(make_store, hour_matches=False, usage=0.86, cleanFileForciblyEnable=False)
    assert s.cleaner.run_once().deleted == 0


def test_manual_delete_arms_twenty_runs(make_store):
    s, _, _ = _scenario_store(make_store, hour_matches=False)
    _backdate(s, 15)
    assert s.manual_delete() == 10
    assert s.cleaner.manual_runs_left == 19
    assert s.cleaner.run_once().deleted == 5
    for _ in range(18):
        s.cleaner.run_once()
    assert s.cleaner.manual_runs_left == 0
    _backdate(s, 3)
    assert s.cleaner.run_once().deleted == 0  # disarmed


def test_disk_full_refuses_writes_and_clears_when_usage_drops(make_store):
    s, _, probe = _scenario_store(make_store, hour_matches=False)
    probe.ratio = 0.91
    s.disk_monitor.check()
    r = s.put_message(Message("test", b"x"))
    assert r.status is PutStatus.SERVICE_NOT_AVAILABLE and r.unavailable is Unavailable.DISK_FULL
    assert s.status()["disk_full"] is True
    with s.get_message("g", "test", 0, 0) as got:  # reads continue
        assert got.status is GetStatus.FOUND
    probe.ratio = 0.5
    s.disk_monitor.check()
    assert s.put_message(Message("test", b"x")).ok


def test_disk_monitor_thread_sets_the_flag_within_a_second(make_store):
    s, _, probe = _scenario_store(make_store, hour_matches=False, diskMonitorInterval=50)
    probe.ratio = 0.95
    deadline = time.monotonic() + 5
    while not s.disk_full and time.monotonic() < deadline:
        time.sleep(0.01)
    assert s.disk_full
    probe.ratio = 0.2
    deadline = time.monotonic() + 5
    while s.disk_full and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not s.disk_full


def test_cleaner_also_marks_disk_full(make_store):
    s, _, probe = _scenario_store(make_store, hour_matches=False)
    probe.ratio = 0.92
    run = s.cleaner.run_once()
    assert run.forced and run.deleted == 10 and s.disk_full


def test_consume_queue_and_index_follow_the_commitlog(make_store):
    s, _, _ = _scenario_store(make_store)
    cq = s.consume_queue("test", 0)
    assert len(cq.segments.segments) == 7  # 8 units per file
    assert len(s.index.files) == 3  # 19 keys per file
    _backdate(s, 30)
    s.cleaner.run_once()
    s.cleaner.run_once()
    s.cleaner.run_once()
    assert s.commitlog.min_offset == 30 * 128
    s.cq_cleaner.run_once()
    assert cq.min_offset == 30
    assert [seg.start // 20 for seg in cq.segments.segments] == [24, 32, 40, 48]
    assert len(s.index.files) == 2  # the first index file ends at record 18
    with s.get_message("g", "test", 0, 0) as r:
        assert r.status is GetStatus.OFFSET_TOO_SMALL and r.next_offset == 30


def test_pull_skips_units_whose_data_is_gone(make_store):
    s, _, _ = _scenario_store(make_store)
    _backdate(s, 10)
    s.cleaner.run_once()  # the consume-queue cleaner has not run yet: units 0..9 remain
    with s.get_message("g", "test", 0, 0, max_msgs=3) as r:
        assert r.status is GetStatus.FOUND  # as the reference: found once anything is collected
        assert r.queue_offsets == [10, 11, 12] and r.next_offset == 13


def test_message_was_removing_when_a_whole_pull_window_is_gone(make_store):
    clock = ManualClock()
    s = make_store(
        clock=clock,
        disk_probe=FixedDiskProbe(0.86),
        mappedFileSizeCommitLog=128,
        deleteCommitLogFilesInterval=0,
        deleteFileBatchMax=1000,
        mappedFileSizeConsumeQueue=20 * 1000,
        deleteWhen=f"{(clock.local_hour() + 12) % 24:02d}",
    )
    for _ in range(820):
        assert s.put_message(Message("test", b"0123456789abcd", properties={"KEYS": "hello"})).ok
    assert s.wait_dispatched()
    assert s.cleaner.run_once().deleted == 819
    with s.get_message("g", "test", 0, 0) as r:
        assert r.status is GetStatus.MESSAGE_WAS_REMOVING and len(r) == 0
        assert r.next_offset == 800  # one window of 800 units was looked at
    with s.get_message("g", "test", 0, 800) as r:
        assert r.status is GetStatus.FOUND and r.queue_offsets == [819]


def test_hanged_segment_is_retried_after_the_interval(make_store):
    s, clock, _ = _scenario_store(make_store, destroyMapedFileIntervalForcibly=1000, redeleteHangedFileInterval=5000)
    _backdate(s, 3)
    first = s.commitlog.segments.segments[0]
    assert first.hold()  # a slow reader
    assert s.cleaner.run_once().deleted == 0  # hanged: the walk stops there
    assert os.path.exists(first.path) and not first.available
    s.update_config({"deleteWhen": f"{(clock.local_hour() + 12) % 24:02d}"})  # only retries from now on
    clock.advance(2000)  # past the forcible interval, but the next retry is not due yet
    s.cleaner.run_once()
    assert os.path.exists(first.path)
    clock.advance(3000)
    s.cleaner.run_once()  # retry due: forced, the reader notwithstanding
    assert not os.path.exists(first.path)
    assert s.commitlog.min_offset == 128
    first.release()


def test_retention_guard_protects_unconsumed_segments(make_store):
    s, _, probe = _scenario_store(make_store, retentionGuardGroups="archiver")
    _backdate(s, 20)
    s.commit_offset("archiver", "test", 0, 7)  # consumed 0..6
    assert s.retention_guard_offset() == 7 * 128
    assert s.cleaner.run_once().deleted == 7
    assert s.cleaner.run_once().deleted == 0
    s.commit_offset("archiver", "test", 0, 12)
    assert s.cleaner.run_once().deleted == 5
    probe.ratio = 0.86  # above the forcible ratio the guard gives way
    assert s.cleaner.run_once().deleted == 10


def test_retention_guard_is_off_by_default(make_store):
    s, _, _ = _scenario_store(make_store)
    s.commit_offset("archiver", "test", 0, 1)
    assert s.retention_guard_offset() is None
    _backdate(s, 15)
    assert s.cleaner.run_once().deleted == 10


def test_clean_expired_consume_queues(make_store):
    s, _, _ = _scenario_store(make_store)
    s.put_message(Message("late", b"x"))
    # only 'test' has data in the first 30 segments; 'late' is in the newest
    _backdate(s, 55)
    for _ in range(6):
        s.cleaner.run_once()
    assert len(s.commitlog.segments.segments) == 1
    assert s.clean_expired_consume_queues() == ["test/0"]
    assert s.consume_queue("test", 0) is None
    assert not os.path.exists(os.path.join(s.consumequeue_dir, "test"))
    assert s.consume_queue("late", 0) is not None


def test_clean_unused_topics(make_store):
    s, _, _ = _scenario_store(make_store)
    s.put_message(Message("keep", b"x"))
    s.wait_dispatched()
    assert s.topics.delete("test")  # (out of topics.json only: what clean-unused-topics looks for)
    assert s.clean_unused_topics() == ["test"]
    assert not os.path.exists(os.path.join(s.consumequeue_dir, "test"))
    assert s.consume_queue("keep", 0) is not None


def test_cleaner_threads_run_on_their_own(make_store):
    s, _, _ = _scenario_store(make_store, cleanResourceInitialDelay=0, cleanResourceInterval=20)
    _backdate(s, 12)
    deadline = time.monotonic() + 10
    while s.commitlog.min_offset < 12 * 128 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert s.commitlog.min_offset == 12 * 128
    deadline = time.monotonic() + 10
    while s.consume_queue("test", 0).min_offset < 12 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert s.consume_queue("test", 0).min_offset == 12
