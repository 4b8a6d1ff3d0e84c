"""Looking at a store directory without running it: ``msgstore inspect`` and ``msgstore fsck``.

Everything is opened read-only and no lock is taken, so a running store can be inspected.
Sizes come from the files themselves where they can (segment lengths), else from the
configuration given (``--set``/``--config``) or the persisted ``config/store.json``.
"""

from __future__ import annotations

import fcntl
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..record import codec
from .clock import Clock
from .config import StoreConfig
from .consume_queue import FILLER_SIZE, UNIT, UNIT_DTYPE
from .index import IndexFile
from .layout import StoreLayout, first_file_size, index_geometry, segment_files
from .metadata import UnreadableConfig, check_config_dir, read_json
from .queue_file import read_extent
from .segment_queue import SegmentQueue, SegmentSizeError

Progress = Callable[[str, int, int], None]


def store_layout(root: str, settings: dict[str, Any] | None = None) -> tuple[StoreConfig, StoreLayout]:
    """The configuration a store root was written with (its persisted settings, then
    ``settings`` on top) and where that puts its files (``storePath*`` included)."""
    persisted = read_json(StoreLayout.of(root, StoreConfig()).config_file("store.json")) or {}
    merged = dict(persisted.get("values", {}))
    merged.update(settings or {})
    cfg = StoreConfig(merged)
    return cfg, StoreLayout.of(root, cfg)


def _index_geometry(cfg: StoreConfig, size: int) -> tuple[int, int] | None:
    return index_geometry(size, cfg.maxHashSlotNum, cfg.maxIndexNum)


def open_by(root: str) -> str | None:
    """The pid of a store process that has ``root`` open (None when none has)."""
    return _lock_holder(StoreLayout.of(root, StoreConfig())) if os.path.isdir(root) else None


def _lock_holder(layout: StoreLayout) -> str | None:
    path = layout.lock_path
    if not os.path.exists(path):
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    except BlockingIOError:
        return os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
    finally:
        os.close(fd)


def _queue_units(directory: str, file_size: int) -> np.ndarray:
    parts = []
    for name in segment_files(directory):
        data, size = read_extent(os.path.join(directory, name), UNIT)  # never the file's holes
        units = np.frombuffer(data[: len(data) - len(data) % UNIT], dtype=UNIT_DTYPE)
        valid = (units["phy"] >= 0) & (units["size"] > 0)
        n = len(units) if valid.all() else int(np.argmin(valid))
        parts.append((int(name) // UNIT, units[:n]))
        if n < len(units) or n * UNIT < size:
            break
    if not parts:
        return np.empty(0, dtype=[("offset", "i8"), ("phy", "i8"), ("size", "i4"), ("tag", "i8")])
    out = []
    for start, units in parts:
        arr = np.empty(len(units), dtype=[("offset", "i8"), ("phy", "i8"), ("size", "i4"), ("tag", "i8")])
        arr["offset"] = start + np.arange(len(units))
        arr["phy"], arr["size"], arr["tag"] = units["phy"], units["size"], units["tag"]
        out.append(arr)
    return np.concatenate(out)


def check_store_dir(root: str, settings: dict[str, Any] | None = None) -> None:
    """FileNotFoundError unless ``root`` is a directory holding something of a store: a
    mistyped path was checked as an empty store, and fsck said "ok"."""
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{root} is not a directory")
    layout = StoreLayout.of(root, StoreConfig(settings or {}))
    marks = (layout.commitlog_dir, layout.consumequeue_dir, layout.index_dir, layout.config_dir, layout.checkpoint_path, layout.lock_path)
    if not any(os.path.exists(p) for p in marks):
        raise FileNotFoundError(f"{root} holds no store (no commitlog, consumequeue, index, config, checkpoint or lock)")


def inspect_dir(root: str, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    check_store_dir(root, settings)
    cfg, layout = store_layout(root, settings)
    out: dict[str, Any] = {"root": layout.root, "abort_file": os.path.exists(layout.abort_path), "locked_by_pid": _lock_holder(layout)}
    cl_dir = layout.commitlog_dir
    seg_size = first_file_size(cl_dir) or cfg.mappedFileSizeCommitLog
    segs = []
    if os.path.isdir(cl_dir):
        q = SegmentQueue(cl_dir, seg_size, clock=Clock())
        q.load(readonly=True)
        for i, s in enumerate(q.segments):
            end = s.start + s.size  # earlier segments end with a BLANK record
            if i == len(q.segments) - 1:
                pos, stop = 0, "limit"
                while stop == "limit" and pos < s.size:
                    _cols, pos, stop, _bad = codec.scan_records(s.mm, pos, s.size, False, s.start, 65536)
                end = s.start + (s.size if stop == "blank" else pos)
            segs.append({"name": os.path.basename(s.path), "start": s.start, "size": s.size, "records_end": end, "mtime_ms": s.mtime_ms()})
        out["commitlog_damage"] = list(q.damage)
        q.close()
    out["commitlog"] = segs
    cl_min = segs[0]["start"] if segs else 0
    cq_size = None
    queues = []
    for topic, qid, d in layout.queue_dirs():
        cq_size = cq_size or first_file_size(d) or cfg.cq_file_size
        units = _queue_units(d, cq_size)
        real = units[~((units["phy"] == 0) & (units["size"] == FILLER_SIZE))] if len(units) else units
        live = real[real["phy"] >= cl_min] if len(real) else real  # as the server counts: data still in the commit log
        queues.append(
            {
                "topic": topic,
                "queue_id": qid,
                "segments": len(segment_files(d)),
                "min_offset": int(live["offset"][0]) if len(live) else (int(units["offset"][-1]) + 1 if len(units) else 0),
                "max_offset": int(units["offset"][-1]) + 1 if len(units) else 0,
                "max_phy_offset": int(real["phy"][-1] + real["size"][-1]) if len(real) else -1,
            }
        )
    out["consume_queues"] = queues
    files: list[dict[str, Any]] = []
    for path in layout.index_files():
        name = os.path.basename(path)
        geo = _index_geometry(cfg, os.path.getsize(path))
        if geo is None:
            files.append({"name": name, "error": "size does not match maxHashSlotNum/maxIndexNum"})
            continue
        f = IndexFile(path, geo[0], geo[1], create=False, readonly=True)
        files.append(
            {
                "name": name,
                "slots": f.slots,
                "capacity": f.entries - 1,
                "keys": f.index_count - 1,
                "used_slots": f.slot_count,
                "begin_timestamp": f.begin_ts,
                "end_timestamp": f.end_ts,
                "begin_phy_offset": f.begin_phy,
                "end_phy_offset": f.end_phy,
            }
        )
        f.close()
    out["index"] = files
    cp_path = layout.checkpoint_path
    if os.path.exists(cp_path):
        with open(cp_path, "rb") as fh:
            raw = fh.read(40)
        names = ["physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp", "masterFlushedOffset", "confirmPhyOffset"]
        out["checkpoint"] = dict(zip(names, struct.unpack(">qqqqq", raw.ljust(40, b"\0"))))
    topics = read_json(layout.config_file("topics.json")) or {}
    out["topics"] = sorted(topics.get("topicConfigTable", {}))
    offsets = read_json(layout.config_file("consumerOffset.json")) or {}
    out["consumer_offsets"] = offsets.get("offsetTable", {})
    return out


@dataclass
class FsckReport:
    records: int = 0
    bytes: int = 0
    commitlog_end: int = 0
    units_checked: int = 0
    keys_checked: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # worth knowing, not damage

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, problem: str, limit: int = 1000) -> None:
        if len(self.problems) < limit:
            self.problems.append(problem)
        elif len(self.problems) == limit:
            self.problems.append("… more problems not listed")


def fsck(root: str, settings: dict[str, Any] | None = None, progress: Progress | None = None) -> FsckReport:
    """Check a store offline: records parse with good CRCs, consume-queue units point at the
    right records, and every key is in the index. Never writes."""
    check_store_dir(root, settings)
    rep = FsckReport()
    config_dir = StoreLayout.of(root, StoreConfig()).config_dir
    problems, notes = check_config_dir(config_dir)
    for problem in problems:
        rep.add(problem)
    rep.notes += notes
    try:
        cfg, layout = store_layout(root, settings)
    except UnreadableConfig:  # (named above) the files are still checked with the settings given
        cfg = StoreConfig(settings or {})
        layout = StoreLayout.of(root, cfg)
    tell = progress or (lambda stage, done, total: None)
    cl_dir = layout.commitlog_dir
    seg_size = first_file_size(cl_dir) or cfg.mappedFileSizeCommitLog
    cl = SegmentQueue(cl_dir, seg_size, clock=Clock())
    try:
        cl.load(readonly=True)
    except SegmentSizeError as e:  # a truncated or foreign file: nothing after it can be trusted
        rep.add(f"commit log: {e}")
        return rep
    for d in cl.damage:
        rep.add(d)
    segs = cl.segments
    total = len(segs) * seg_size
    record_index: dict[int, tuple[int, int, int, int]] = {}  # phy → (size, topic id, queue id, queue offset)
    topic_names: list[str] = []
    key_hashes, key_phys = [], []
    for i, seg in enumerate(segs):
        pos = 0
        while True:
            cols, pos, stop, bad = codec.scan_records(seg.mm, pos, seg.size, True, seg.start, 65536)
            remap = []
            for t in cols.topic_names:
                if t not in topic_names:
                    topic_names.append(t)
                remap.append(topic_names.index(t))
            for j in range(len(cols)):
                record_index[int(cols.phys[j])] = (
                    int(cols.sizes[j]),
                    remap[cols.topic_ids[j]],
                    int(cols.queue_ids[j]),
                    int(cols.queue_offsets[j]),
                )
            key_hashes.append(cols.key_hashes)
            key_phys.append(cols.phys[cols.key_owner])
            rep.records += len(cols)
            rep.bytes += int(cols.sizes.sum()) if len(cols) else 0
            tell("commit log", i * seg_size + pos, total)
            if stop != "limit" or pos >= seg.size:
                break
        if stop == "bad" and (i < len(segs) - 1 or seg.data_end(pos) > pos):
            rep.add(f"commitlog {seg.start:020d}: bad record at offset {seg.start + pos}" + (" (length mismatch)" if bad > 0 else ""))
        rep.commitlog_end = seg.start + pos if stop != "blank" else seg.start + seg.size
    cl_min = segs[0].start if segs else 0
    cl.close()
    # consume queues
    cqs = layout.queue_dirs()
    for n, (topic, qid, d) in enumerate(cqs):
        units = _queue_units(d, first_file_size(d) or cfg.cq_file_size)
        for off, phy, size, _tag in units.tolist():
            if phy == 0 and size == FILLER_SIZE:
                continue
            rep.units_checked += 1
            if phy < cl_min:
                continue  # its data expired
            rec = record_index.get(phy)
            where = f"consumequeue {topic}/{qid} offset {off}"
            if rec is None:
                rep.add(f"{where}: no record at commit-log offset {phy}")
                continue
            rsize, tid, rq, rqoff = rec
            if rsize != size or topic_names[tid] != topic or rq != qid or rqoff != off:
                rep.add(f"{where}: points at a record of {topic_names[tid]}/{rq} offset {rqoff} size {rsize} (unit size {size})")
        tell("consume queues", n + 1, len(cqs))
    # index
    if key_hashes:
        kh = np.concatenate(key_hashes)
        kp = np.concatenate(key_phys)
        ents = []
        floor = None
        for path in layout.index_files():
            name = os.path.basename(path)
            geo = _index_geometry(cfg, os.path.getsize(path))
            if geo is None:
                rep.add(f"index {name}: size does not match maxHashSlotNum/maxIndexNum")
                continue
            f = IndexFile(path, geo[0], geo[1], create=False, readonly=True)
            floor = f.begin_phy if floor is None else min(floor, f.begin_phy)
            ents.append(f.entries_array().copy())
            f.close()
        covered = kp >= (floor if floor is not None else 0)
        if not ents:
            if len(kh):
                rep.notes.append(f"index: no index files ({len(kh)} keys); the next start rebuilds them from the commit log")
        else:
            all_e = np.concatenate(ents)
            order = np.lexsort((all_e["hash"].astype(np.int64), all_e["phy"].astype(np.int64)))
            ep = all_e["phy"].astype(np.int64)[order]
            eh = all_e["hash"].astype(np.int64)[order]
            missing = 0
            for h, p in zip(kh[covered].tolist(), kp[covered].tolist()):
                lo = np.searchsorted(ep, p, "left")
                hi = np.searchsorted(ep, p, "right")
                if not (eh[lo:hi] == h).any():
                    missing += 1
                    if missing <= 20:
                        rep.add(f"index: key hash {h} of the record at {p} is not indexed")
            rep.keys_checked = int(covered.sum())
            if missing > 20:
                rep.add(f"index: {missing} keys in all are not indexed")
        tell("index", 1, 1)
    return rep
