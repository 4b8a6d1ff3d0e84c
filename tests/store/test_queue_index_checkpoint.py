"""Consume queues (§3.1), index files (§3.2) and the checkpoint (§3.3)."""

import os
import struct

import numpy as np

from msgstore.record import codec
from msgstore.store.checkpoint import Checkpoint
from msgstore.store.clock import ManualClock
from msgstore.store.consume_queue import FILLER_SIZE, UNIT, ConsumeQueue
from msgstore.store.index import ENTRY_SIZE, HEADER_SIZE, IndexFile, IndexService


def _cq(tmp_path, units_per_file=40):
    return ConsumeQueue("T", 0, str(tmp_path / "cq"), units_per_file * UNIT, clock=ManualClock())


def test_hundred_units_min_max_and_iteration(tmp_path):
    cq = _cq(tmp_path)
    for i in range(100):
        assert cq.put_unit(i * 1000, 1000, 0, i)
    assert (cq.min_offset, cq.max_offset) == (0, 100)
    assert len(cq.segments.segments) == 3  # 40 units per file
    for start in (0, 39, 40, 99):
        assert [o for o, *_ in cq.iter_units(start)] == list(range(start, 100))
    assert cq.unit(57) == (57000, 1000, 0)
    raw = open(os.path.join(cq.segments.directory, f"{40 * UNIT:020d}"), "rb").read(UNIT)
    assert struct.unpack(">qiq", raw) == (40000, 1000, 0)


def test_duplicates_are_skipped(tmp_path):
    cq = _cq(tmp_path)
    phys = np.arange(10, dtype=np.int64) * 100
    sizes = np.full(10, 100, dtype=np.int64)
    tags = np.zeros(10, dtype=np.int64)
    assert cq.put_units(phys, sizes, tags, 0) == 10
    assert cq.put_units(phys, sizes, tags, 0) == 0
    assert cq.put_units(phys[5:], sizes[5:], tags[5:], 5) == 0
    assert cq.max_offset == 10


def _files(cq: ConsumeQueue) -> dict[str, bytes]:
    d = cq.segments.directory
    return {name: open(os.path.join(d, name), "rb").read() for name in sorted(os.listdir(d))} if os.path.isdir(d) else {}


def test_put_few_writes_and_skips_as_put_units(tmp_path):
    """The dispatcher's numpy-free path for small hints (put_few) against put_units, step by
    step on twin queues: fresh units across file ends, a first unit mid-file, leading and
    interleaved duplicates, a gap in queue offsets, a put of nothing new."""
    few, many = _cq(tmp_path / "few", 8), _cq(tmp_path / "many", 8)
    steps = [
        ([(5_000, 100, 7)], 3),  # first unit at queue offset 3: the file is prefilled
        ([(5_100, 100, 1), (5_200, 50, -2), (5_250, 70, 0)], 4),  # crosses the first file's end
        ([(5_200, 50, -2), (5_250, 70, 0), (5_320, 10, 9)], 5),  # two leading duplicates
        ([(5_330, 5, 0), (5_320, 10, 9), (5_335, 5, 1)], 8),  # an interleaved duplicate
        ([(5_335, 5, 1)], 10),  # nothing new
        ([(9_000, 4_000_000, 2**40)], 14),  # a gap of queue offsets, a large tag
    ]
    for units, first in steps:
        phys, sizes, tags = (np.array(column, dtype=np.int64) for column in zip(*units))
        assert few.put_few(units, first) == many.put_units(phys, sizes, tags, first), (units, first)
        assert (few.max_phy_offset, few.first_phy, few.max_offset) == (many.max_phy_offset, many.first_phy, many.max_offset)
        assert _files(few) == _files(many)
    assert few.max_phy_offset == 4_009_000
    assert list(few.iter_units(3))[:2] == list(many.iter_units(3))[:2]


def test_first_segment_at_nonzero_offset_is_prefilled_and_never_raises_max_phy(tmp_path):
    cq = _cq(tmp_path)
    cq.put_unit(5_000_000, 200, 7, 45)  # queue offset 45 lives in the second file
    seg = cq.segments.segments[0]
    assert seg.start == 40 * UNIT
    for i in range(5):
        assert cq.unit(40 + i) == (0, FILLER_SIZE, 0)
    assert cq.min_offset == 45 and cq.max_offset == 46
    assert cq.max_phy_offset == 5_000_200
    cq.close()
    again = _cq(tmp_path)
    again.load()
    again.recover()
    assert again.max_phy_offset == 5_000_200  # fillers do not count
    assert again.max_offset == 46
    again.correct_min_offset(0)
    assert again.min_offset == 45


def test_recover_stops_at_first_invalid_unit_and_truncates(tmp_path):
    cq = _cq(tmp_path)
    for i in range(50):
        cq.put_unit(i * 10, 10, 0, i)
    cq.close()
    path = os.path.join(cq.segments.directory, f"{40 * UNIT:020d}")
    with open(path, "r+b") as f:  # unit 45 zeroed: 45..49 are gone
        f.seek(5 * UNIT)
        f.write(bytes(UNIT))
    again = _cq(tmp_path)
    again.load()
    again.recover()
    assert again.max_offset == 45
    assert again.max_phy_offset == 450
    with open(path, "rb") as f:
        f.seek(5 * UNIT)
        assert f.read(5 * UNIT) == bytes(5 * UNIT)


def test_truncate_dirty_drops_units_past_the_commitlog_end(tmp_path):
    cq = _cq(tmp_path)
    for i in range(90):
        cq.put_unit(i * 10, 10, 0, i)
    cq.truncate_dirty(415)  # units at phy 420.. point past the end
    assert cq.max_offset == 42 and cq.max_phy_offset == 420
    assert len(cq.segments.segments) == 2


def test_correct_min_offset_and_delete_expired(tmp_path):
    cq = _cq(tmp_path)
    for i in range(100):
        cq.put_unit(i * 10, 10, 0, i)
    cq.correct_min_offset(455)
    assert cq.min_offset == 46
    assert cq.delete_expired(455) == 1  # file 0 (units 0..39, last phy 390) goes; file 1 ends at 790
    assert len(cq.segments.segments) == 2


def test_offset_by_time(tmp_path):
    cq = _cq(tmp_path)
    times = {i * 10: 1000 + i * 10 for i in range(50)}  # phy → store time
    for i in range(50):
        cq.put_unit(i * 10, 10, 0, i)
    at = lambda phy, size: times.get(phy)  # noqa: E731
    assert cq.offset_by_time(1000, False, at) == 0
    assert cq.offset_by_time(1055, False, at) == 6  # earliest with time >= t
    assert cq.offset_by_time(1055, True, at) == 5  # latest with time <= t
    assert cq.offset_by_time(99999, False, at) == 50  # clamp to max
    assert cq.offset_by_time(0, True, at) == 0  # clamp to min


# ------------------------------------------------------------------------------ index


def test_index_with_100_slots_and_400_entries_takes_399_keys(tmp_path):
    f = IndexFile(str(tmp_path / "idx"), 100, 400, create=True)
    for i in range(399):
        assert f.put_key(str(i), i, 1_000_000 + i), i
    assert not f.put_key("399", 399, 2_000_000)
    assert f.index_count == 400
    assert f.select(codec.index_hash("60"), 64, 0, 10**13) == [60]
    f.close()
    again = IndexFile(str(tmp_path / "idx"), 100, 400, create=False)
    assert again.index_count == 400 and again.select(codec.index_hash("60"), 64, 0, 10**13) == [60]
    again.close()


def test_batch_put_writes_the_same_bytes_as_one_key_at_a_time(tmp_path):
    rng = np.random.default_rng(7)
    keys = [f"T#k{int(x)}" for x in rng.integers(0, 5000, size=700)]  # many slot collisions
    phys = list(range(0, 700 * 100, 100))
    tss = [1_700_000_000_000 + i * 37 for i in range(700)]
    one = IndexFile(str(tmp_path / "one"), 97, 2000, create=True)
    for k, p, t in zip(keys, phys, tss):
        one.put_key(k, p, t)
    many = IndexFile(str(tmp_path / "many"), 97, 2000, create=True)
    h = codec.jhash_many(keys).astype(np.int64)
    h = np.where(h == -0x80000000, 0, np.abs(h))
    # in three uneven batches, as the dispatcher would
    for a, b in ((0, 1), (1, 300), (300, 700)):
        many.put_hashes(h[a:b], np.array(phys[a:b]), np.array(tss[a:b]))
    one.close()
    many.close()
    size = HEADER_SIZE + 97 * 4 + 701 * ENTRY_SIZE
    assert open(tmp_path / "one", "rb").read(size) == open(tmp_path / "many", "rb").read(size)


def test_index_service_rolls_over_and_queries_across_files(tmp_path):
    clock = ManualClock(now_ms=1_700_000_000_000)
    full_ts = []
    svc = IndexService(str(tmp_path / "index"), 10, 20, clock=clock, on_file_full=full_ts.append)
    for i in range(50):
        clock.advance(1000)
        svc.build(["T"], [[f"k{i % 5}"]], [i * 100], [clock.now_ms()], [0])
    assert len(svc.files) == 3  # 19 keys per file
    assert svc.files[1].begin_phy == 19 * 100  # first key of the new file
    found = svc.query("T", "k3", 64, 0, clock.now_ms())
    assert sorted(found) == [i * 100 for i in range(50) if i % 5 == 3]
    assert found == sorted(found, reverse=True)  # newest first
    assert svc.query("T", "k3", 4, 0, clock.now_ms()) == found[:4]
    assert svc.query("Other", "k3", 64, 0, clock.now_ms()) == []
    svc.close()


def test_index_time_range_filters(tmp_path):
    clock = ManualClock(now_ms=1_700_000_000_000)
    svc = IndexService(str(tmp_path / "index"), 10, 100, clock=clock)
    for i in range(10):
        svc.build(["T"], [["k"]], [i], [1_700_000_000_000 + i * 10_000], [0])
    got = svc.query("T", "k", 64, 1_700_000_030_000, 1_700_000_060_000)
    assert sorted(got) == [3, 4, 5, 6]
    svc.close()


def test_index_skips_already_indexed_records_and_rollbacks(tmp_path):
    svc = IndexService(str(tmp_path / "index"), 10, 100, clock=ManualClock())
    assert svc.build(["T", "T"], [["a"], ["b"]], [0, 100], [1, 2], [0, 0]) == 2
    assert svc.build(["T", "T"], [["a"], ["b"]], [0, 100], [1, 2], [0, 0]) == 1  # 100 == end: the reference re-puts it
    assert svc.build(["T"], [["c"]], [50], [3], [0]) == 0
    assert svc.build(["T"], [["r"]], [200], [3], [codec.TRANSACTION_ROLLBACK]) == 0
    svc.close()


# ------------------------------------------------------------------------------ checkpoint


def test_checkpoint_min_timestamp_and_persistence(tmp_path):
    path = str(tmp_path / "checkpoint")
    cp = Checkpoint(path)
    cp.physic_msg_timestamp = 0xAABB
    cp.logics_msg_timestamp = 0xCCDD
    cp.index_msg_timestamp = 0x1234
    cp.flush()
    cp.close()
    assert os.path.getsize(path) == 4096
    again = Checkpoint(path)
    assert again.physic_msg_timestamp - again.min_timestamp() == 3000
    assert again.min_timestamp_index() == 0x1234
    raw = open(path, "rb").read(40)
    assert struct.unpack(">qqqqq", raw)[:3] == (0xAABB, 0xCCDD, 0x1234)
    again.physic_msg_timestamp = 100
    assert again.min_timestamp() == 0
    again.close()
