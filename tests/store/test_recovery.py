"""Recovery (docs/store-format.md §8) and the §12.1 / §12.2 / §12.7 features."""

import os
import random
import shutil
import struct
import zlib

import pytest

from msgstore.store import GetStatus, Message


def _msg(i, topic="RecoveryTopicName", q=0):
    return Message(topic, b"body-%06d" % i, queue_id=q, properties={"KEYS": "key-%d" % i, "TAGS": "t%d" % (i % 3)})


def _bodies(store, topic="RecoveryTopicName", q=0):
    out = []
    off = store.min_offset(topic, q)
    while True:
        with store.get_message("g", topic, q, off, max_msgs=64) as r:
            if r.status is not GetStatus.FOUND:
                return out
            for m in r.messages():
                out.append(m.body)
            off = r.next_offset


def _abort(store_root):
    open(os.path.join(store_root, "abort"), "w").close()


@pytest.mark.parametrize("crash", [False, True], ids=["clean", "abort-file"])
def test_conformance_truncation_scenario(make_store, tmp_path, crash):
    root = str(tmp_path / "store")
    s = make_store(root)
    for i in range(100):
        assert s.put_message(_msg(i)).ok
    s.shutdown()
    s = make_store(root)
    assert s.max_offset("RecoveryTopicName", 0) == 100
    assert s.recovery_report.mode == "normal"
    for i in range(100, 200):
        assert s.put_message(_msg(i)).ok
    noted_cl = s.commitlog.max_offset
    assert s.wait_dispatched()
    noted_cq = s.max_offset("RecoveryTopicName", 0)
    last = s.put_message(_msg(200))
    s.shutdown()
    # zero 16 bytes of the last record's topic area, from its TOPICLENGTH byte on (as the
    # reference's damageCommitLog does: offset + 84 + bodyLen + 4)
    topic_pos = last.phy_offset + 88 + len(b"body-000200")
    seg_size = s.config.mappedFileSizeCommitLog
    seg_path = os.path.join(root, "commitlog", f"{(last.phy_offset // seg_size) * seg_size:020d}")
    with open(seg_path, "r+b") as f:
        f.seek(topic_pos - (last.phy_offset // seg_size) * seg_size)
        f.write(bytes(16))
    if crash:
        _abort(root)
    s = make_store(root)
    assert s.recovery_report.mode == ("abnormal" if crash else "normal")
    assert s.commitlog.max_offset == noted_cl
    assert s.max_offset("RecoveryTopicName", 0) == noted_cq == 200
    assert s.recovery_report.bytes_truncated > 0
    for i in range(201, 301):
        assert s.put_message(_msg(i)).ok
    assert s.wait_dispatched()
    bodies = _bodies(s)
    assert len(bodies) == 300
    assert bodies[199] == b"body-000199" and bodies[200] == b"body-000201"


def test_truncation_zeroes_stale_bytes(make_store, tmp_path):
    root = str(tmp_path / "store")
    s = make_store(root)
    results = [s.put_message(_msg(i)) for i in range(20)]
    s.shutdown()
    victim = results[10]
    seg_size = s.config.mappedFileSizeCommitLog
    path = os.path.join(root, "commitlog", f"{0:020d}")
    with open(path, "r+b") as f:
        f.seek(victim.phy_offset + 8)  # corrupt the body CRC of record 10
        f.write(b"\x00\x00\x00\x01")
    s = make_store(root)
    assert s.commitlog.max_offset == victim.phy_offset
    with open(path, "rb") as f:
        f.seek(victim.phy_offset)
        tail = f.read(seg_size - victim.phy_offset)
    assert tail == bytes(len(tail))  # records 10..19 are gone for good, not just hidden
    assert s.recovery_report.bytes_truncated == results[-1].phy_offset + results[-1].sizes[0] - victim.phy_offset


def test_abnormal_recovery_rebuilds_the_whole_index(make_store, tmp_path):
    """§12.2: index files written after the last checkpoint are destroyed after a crash; every
    record they covered is indexed again, so queries by key still find it."""
    root = str(tmp_path / "store")
    small = dict(mappedFileSizeCommitLog=8192, maxHashSlotNum=64, maxIndexNum=100)
    s = make_store(root, **small)
    for i in range(450):
        assert s.put_message(_msg(i)).ok
    assert s.wait_dispatched()
    assert len(s.index.files) == 5
    kept_end = s.index.files[1].end_phy
    s.checkpoint.index_msg_timestamp = s.index.files[1].end_ts  # only two files known durable
    s.shutdown()
    s.checkpoint = None
    from msgstore.store.checkpoint import Checkpoint

    cp = Checkpoint(os.path.join(root, "checkpoint"))
    cp.index_msg_timestamp = s.index.files[1].end_ts if s.index.files else cp.index_msg_timestamp
    cp.close()
    _abort(root)
    s = make_store(root, **small)
    rep = s.recovery_report
    assert rep.mode == "abnormal" and rep.index_files_destroyed == 3
    assert rep.index_rebuilt_from == kept_end
    # the crash-time start segment is the last one; re-indexing went back much further
    assert rep.bytes_to_scan > 8192 * 5
    for i in (0, 150, 250, 449):
        assert [m.body for m in s.query_message("RecoveryTopicName", "key-%d" % i)] == [b"body-%06d" % i]


@pytest.mark.parametrize("lost", ["consumequeue", "index"])
def test_deleted_queue_or_index_directory_is_rebuilt(make_store, tmp_path, lost):
    root = str(tmp_path / "store")
    s = make_store(root)
    for i in range(300):
        assert s.put_message(_msg(i, q=i % 3)).ok
    s.shutdown()
    shutil.rmtree(os.path.join(root, lost))
    s = make_store(root)
    assert [s.max_offset("RecoveryTopicName", q) for q in range(3)] == [100, 100, 100]
    assert len(_bodies(s, q=1)) == 100
    assert [m.body for m in s.query_message("RecoveryTopicName", "key-7")] == [b"body-000007"]


def test_queue_rebuilt_after_old_segments_were_deleted_starts_mid_way(make_store, tmp_path):
    root = str(tmp_path / "store")
    s = make_store(root, mappedFileSizeCommitLog=4096)
    for i in range(200):
        assert s.put_message(_msg(i)).ok
    s.shutdown()
    cl_dir = os.path.join(root, "commitlog")
    first_files = sorted(os.listdir(cl_dir))[:3]
    for name in first_files:
        os.unlink(os.path.join(cl_dir, name))
    shutil.rmtree(os.path.join(root, "consumequeue"))
    s = make_store(root, mappedFileSizeCommitLog=4096)
    mn, mx = s.min_offset("RecoveryTopicName", 0), s.max_offset("RecoveryTopicName", 0)
    assert mx == 200 and mn > 0
    with s.get_message("g", "RecoveryTopicName", 0, mn) as r:
        assert r.messages()[0].queue_offset == mn
    with s.get_message("g", "RecoveryTopicName", 0, 0) as r:
        assert r.status is GetStatus.OFFSET_TOO_SMALL and r.next_offset == mn


def test_no_commitlog_destroys_queues(make_store, tmp_path):
    root = str(tmp_path / "store")
    s = make_store(root)
    for i in range(10):
        s.put_message(_msg(i))
    s.shutdown()
    shutil.rmtree(os.path.join(root, "commitlog"))
    s = make_store(root)
    assert s.max_offset("RecoveryTopicName", 0) == 0
    assert s.put_message(_msg(0)).phy_offset == 0


def test_recovery_report_is_observable(make_store, tmp_path):
    root = str(tmp_path / "store")
    s = make_store(root)
    for i in range(50):
        s.put_message(_msg(i))
    s.shutdown()
    _abort(root)
    s = make_store(root)
    d = s.status()["recovery"]
    assert d["mode"] == "abnormal" and d["state"] == "done" and d["progress"] == 1.0
    assert d["records_scanned"] == 50 and d["bytes_scanned"] > 0 and d["duration_ms"] >= 0
    assert d["commitlog_end"] == s.commitlog.max_offset


@pytest.mark.parametrize("seed", range(6))
def test_torn_tails(make_store, tmp_path, seed):
    """Random truncation or garbage in the last segment: everything before the damage is kept,
    nothing after it is served, and the store keeps working."""
    rnd = random.Random(seed)
    root = str(tmp_path / "store")
    s = make_store(root, mappedFileSizeCommitLog=16384)
    results = [s.put_message(_msg(i)) for i in range(300)]
    s.shutdown()
    seg_size = 16384
    cut = rnd.randrange(results[200].phy_offset, results[-1].phy_offset + results[-1].sizes[0])
    seg_start = (cut // seg_size) * seg_size
    path = os.path.join(root, "commitlog", f"{seg_start:020d}")
    with open(path, "r+b") as f:
        f.seek(cut - seg_start)
        if seed % 2:
            f.write(bytes(seg_size - (cut - seg_start)))
        else:
            f.write(rnd.randbytes(min(300, seg_size - (cut - seg_start))))
    for later in os.listdir(os.path.join(root, "commitlog")):
        if int(later) > seg_start:
            os.unlink(os.path.join(root, "commitlog", later))
    if seed % 3 == 0:
        _abort(root)
    s = make_store(root, mappedFileSizeCommitLog=16384)
    intact = [i for i, r in enumerate(results) if r.phy_offset + r.sizes[0] <= cut]
    bodies = _bodies(s)
    assert bodies[: len(intact)] == [b"body-%06d" % i for i in intact]
    # Only the record the damage starts in may survive, and only if the damage missed what is
    # checked (length, magic, body CRC; the format does not cover properties). Nothing later.
    assert len(bodies) - len(intact) <= 1
    if len(bodies) > len(intact):
        assert bodies[-1] == b"body-%06d" % len(intact)
    assert s.put_message(_msg(999)).ok
    assert s.wait_dispatched()
    assert _bodies(s)[-1] == b"body-000999"


# ------------------------------------------------------------------------------ independent encoder


def _spec_record(topic: bytes, qid: int, qoff: int, phy: int, body: bytes, props: bytes, ts: int) -> bytes:
    """A commit-log record packed field by field from docs/store-format.md §2 (not our codec)."""
    total = 91 + len(body) + len(topic) + len(props)
    out = struct.pack(">iIiiiqqiq", total, 0xDAA320A7, zlib.crc32(body) & 0x7FFFFFFF, qid, 0, qoff, phy, 0, ts - 5)
    out += bytes([192, 168, 1, 9]) + struct.pack(">i", 40000)
    out += struct.pack(">q", ts) + bytes([10, 1, 2, 3]) + struct.pack(">i", 10911)
    out += struct.pack(">iqi", 0, 0, len(body)) + body
    out += struct.pack(">b", len(topic)) + topic + struct.pack(">h", len(props)) + props
    assert len(out) == total
    return out


def _java_hash(s: str) -> int:
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


@pytest.mark.parametrize("with_queues", [False, True])
def test_directory_from_an_independent_encoder_is_read_recovered_and_served(make_store, tmp_path, with_queues):
    root = tmp_path / "foreign"
    seg_size = 8192
    (root / "commitlog").mkdir(parents=True)
    data = bytearray()
    units = {0: bytearray(), 1: bytearray()}
    phy = 0
    segments = []
    ts = 1_700_000_000_000
    for i in range(120):
        q = i % 2
        body = b"foreign-%d" % i
        props = ("TAGS\x01tag%d\x02KEYS\x01fk%d\x02" % (i % 4, i)).encode()
        qoff = len(units[q]) // 20
        rec = _spec_record(b"Foreign", q, qoff, phy, body, props, ts + i)
        if len(data) + len(rec) + 8 > seg_size:  # BLANK, then the next segment
            rest = seg_size - len(data)
            data += struct.pack(">iI", rest, 0xCBD43194) + bytes(rest - 8)
            segments.append(bytes(data))
            data = bytearray()
            phy = len(segments) * seg_size
            rec = _spec_record(b"Foreign", q, qoff, phy, body, props, ts + i)
        data += rec
        units[q] += struct.pack(">qiq", phy, len(rec), _java_hash("tag%d" % (i % 4)))
        phy += len(rec)
    segments.append(bytes(data) + bytes(seg_size - len(data)))
    for n, seg in enumerate(segments):
        (root / "commitlog" / f"{n * seg_size:020d}").write_bytes(seg)
    if with_queues:
        for q, raw in units.items():
            d = root / "consumequeue" / "Foreign" / str(q)
            d.mkdir(parents=True)
            (d / f"{0:020d}").write_bytes(bytes(raw) + bytes(20 * 100 - len(raw)))
        (root / "abort").write_bytes(b"")  # and recover it as after a crash
    s = make_store(str(root), mappedFileSizeCommitLog=seg_size, mappedFileSizeConsumeQueue=20 * 100)
    assert s.commitlog.max_offset == phy
    assert [s.max_offset("Foreign", q) for q in (0, 1)] == [60, 60]
    with s.get_message("g", "Foreign", 1, 0, max_msgs=64, tag_filter="tag3") as r:
        msgs = r.messages()
    assert [m.body for m in msgs] == [b"foreign-%d" % i for i in range(120) if i % 2 == 1 and i % 4 == 3]
    m = msgs[0]
    assert m.born_host == ("192.168.1.9", 40000) and m.store_host == ("10.1.2.3", 10911)
    assert m.msg_id == "0A01020300002A9F" + f"{m.commitlog_offset:016X}"
    assert [x.body for x in s.query_message("Foreign", "fk77")] == [b"foreign-77"]
    # and the queue files we wrote are byte-identical to what the store would write
    if not with_queues:
        s.wait_dispatched()
        s.shutdown()
        for q, raw in units.items():
            on_disk = (root / "consumequeue" / "Foreign" / str(q) / f"{0:020d}").read_bytes()
            assert on_disk[: len(raw)] == bytes(raw)
