"""Segments and segment queues (docs/store-format.md §1, §4, §9 deletion walk, §13 scenarios)."""

import os

import pytest

from msgstore.store.clock import ManualClock
from msgstore.store.segment_queue import SegmentQueue, SegmentSizeError


def _queue(tmp_path, size=1024, clock=None):
    return SegmentQueue(str(tmp_path / "q"), size, clock=clock or ManualClock())


def _append(q, data: bytes):
    seg = q.last_writable(0)
    assert seg.remaining >= len(data)
    seg.append(data)
    return seg


def test_1024_four_byte_appends_make_four_segments_and_find_works(tmp_path):
    q = _queue(tmp_path)
    for _ in range(1024):
        _append(q, b"abcd")
    assert len(q.segments) == 4
    assert sorted(os.listdir(tmp_path / "q")) == [f"{i * 1024:020d}" for i in range(4)]
    assert q.find(0).start == 0
    assert q.find(1124).start == 1024
    assert q.find(4096) is None
    assert q.max_offset() == 4096


def test_six_flushes_advance_one_segment_each(tmp_path):
    q = _queue(tmp_path)
    for _ in range(1024):
        _append(q, b"0123456789abcdef")  # 16 KiB → 16 segments
    assert len(q.segments) == 16
    seen = []
    for _ in range(6):
        q.flush(0)
        seen.append(q.flushed_where)
    assert seen == [1024, 2048, 3072, 4096, 5120, 6144]


def test_reload_requires_configured_size_and_drops_empty_last(tmp_path):
    q = _queue(tmp_path)
    for _ in range(300):
        _append(q, b"abcd")
    q.close()
    empty = tmp_path / "q" / f"{2048:020d}"
    empty.write_bytes(b"")
    q2 = _queue(tmp_path)
    q2.load()
    assert [s.start for s in q2.segments] == [0, 1024]
    assert not empty.exists()
    q2.close()
    with pytest.raises(SegmentSizeError) as e:
        _queue(tmp_path, size=2048).load()
    assert f"{0:020d}" in str(e.value) and "1024" in str(e.value) and "2048" in str(e.value)


def test_non_adjacent_segments_are_reported_as_damage(tmp_path):
    q = _queue(tmp_path)
    for _ in range(768):
        _append(q, b"abcd")
    q.close()
    os.unlink(tmp_path / "q" / f"{1024:020d}")
    q2 = _queue(tmp_path)
    q2.load()
    assert len(q2.damage) == 1 and "not adjacent" in q2.damage[0]
    assert q2.find(2100).start == 2048  # lookup still works across the gap
    q2.close()


def _expired_queue(tmp_path, n, expired, clock):
    q = _queue(tmp_path, clock=clock)
    for _ in range(n * 256):
        _append(q, b"abcd")
    old = clock.now_ms() / 1000 - 7200
    for i, seg in enumerate(q.segments):
        if i in expired:
            os.utime(seg.path, (old, old))
    return q


def test_deletion_never_starts_in_the_middle(tmp_path):
    clock = ManualClock()
    expired = set(range(0, 5)) | set(range(21, 50))
    q = _expired_queue(tmp_path, 50, expired, clock)
    deleted = q.delete_expired_by_time(3600_000, 0, 120_000, False, 50)
    assert deleted == 5
    assert q.segments[0].start == 5 * 1024


def test_deletion_keeps_the_newest_even_when_forced(tmp_path):
    clock = ManualClock()
    q = _expired_queue(tmp_path, 3, set(), clock)
    assert q.delete_expired_by_time(3600_000, 0, 120_000, True, 10) == 2
    assert len(q.segments) == 1


def test_deletion_waits_between_files_on_the_injected_clock(tmp_path):
    clock = ManualClock()
    q = _expired_queue(tmp_path, 5, set(range(5)), clock)
    t0 = clock.now_ms()
    assert q.delete_expired_by_time(3600_000, 100, 120_000, False, 10) == 4
    assert clock.now_ms() - t0 == 300  # three pauses between four deletions


def test_referenced_segment_is_deleted_when_released_or_forcibly(tmp_path):
    clock = ManualClock()
    q = _expired_queue(tmp_path, 3, {0, 1}, clock)
    first = q.segments[0]
    assert first.hold()
    assert q.delete_expired_by_time(3600_000, 0, 120_000, False, 10) == 0  # hanged
    assert os.path.exists(first.path) and not first.available
    assert not first.hold()  # no new readers on a segment being destroyed
    assert not q.retry_delete_first(120_000)  # too early to force
    clock.advance(120_000)
    assert q.retry_delete_first(120_000)  # forcibly, reader or not
    assert not os.path.exists(first.path)
    first.release()
    # released normally: the next one goes at once
    second = q.segments[0]
    assert second.hold()
    q.delete_expired_by_time(3600_000, 0, 120_000, False, 10)
    assert os.path.exists(second.path)
    second.release()  # the last reader lets go: the file goes with it
    assert not os.path.exists(second.path)
    assert q.delete_expired_by_time(3600_000, 0, 120_000, False, 10) == 1  # and leaves the list
    assert q.segments[0].start == 2048


def test_truncate_zeroes_the_tail_and_destroys_later_segments(tmp_path):
    q = _queue(tmp_path)
    for _ in range(600):
        _append(q, b"\xff\xfe\xfd\xfc")
    dropped = q.truncate_dirty(1500)
    assert [s.start for s in q.segments] == [0, 1024]
    seg = q.segments[1]
    assert seg.wrote == 1500 - 1024
    assert seg.read(1500 - 1024, 1024 - (1500 - 1024)) == bytes(1024 - (1500 - 1024))
    assert seg.read(0, 4) == b"\xff\xfe\xfd\xfc"
    # 548 bytes cut in segment 1 plus 352 bytes of data in segment 2
    assert dropped == (2048 - 1500) + (2400 - 2048)
    assert not os.path.exists(tmp_path / "q" / f"{2048:020d}")


def test_write_buffer_is_invisible_until_committed(tmp_path):
    from msgstore.store.segment_queue import WriteBufferPool

    q = SegmentQueue(str(tmp_path / "q"), 8192, clock=ManualClock(), pool=WriteBufferPool(2, 8192))
    seg = q.last_writable(0)
    seg.append(b"x" * 5000)
    assert q.max_offset() == 0 and seg.read(0, 4) == b"\0\0\0\0"
    q.commit(4)  # one dirty page is fewer than four
    assert q.max_offset() == 0
    q.commit(0)
    assert q.max_offset() == 5000 and seg.read(0, 4) == b"xxxx"
