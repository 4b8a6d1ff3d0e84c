"""Crash recovery (STORE_SPEC §8, §12.1, §12.2, §12.7).

Find the end of the last good record, re-dispatch what the consume queues and index lack,
cut everything after the end (zeroing the bytes, so stale data can never pass for records) and
report what happened: mode, progress, duration, bytes scanned and truncated.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from ..record import codec
from .segment import Segment

if TYPE_CHECKING:
    from .store import MessageStore

log = logging.getLogger(__name__)

CHUNK = 4096


@dataclass
class RecoveryReport:
    mode: str = "pending"  # normal | abnormal
    state: str = "pending"  # pending | running | done | failed
    started_ms: int = 0
    duration_ms: int = 0
    bytes_to_scan: int = 0
    bytes_scanned: int = 0
    bytes_truncated: int = 0
    records_scanned: int = 0
    index_files_destroyed: int = 0
    index_rebuilt_from: int = -1
    commitlog_end: int = 0
    damage: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def progress(self) -> float:
        if self.state == "done":
            return 1.0
        if self.bytes_to_scan <= 0:
            return 0.0
        return min(1.0, self.bytes_scanned / self.bytes_to_scan)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["progress"] = self.progress
        return d


def _first_record_ok(seg: Segment) -> tuple[bool, int]:
    """(first record parses with CRC, its store time)."""
    size, ok = codec.check(seg.mm, 0, seg.size, True)
    if not ok or size <= 0:
        return False, 0
    return True, codec.store_timestamp_of(seg.mm, 0)


def normal_start(segs: list[Segment], cq_max_phy: int) -> int:
    """Last segment whose first record parses and lies at or before the queues' max."""
    for i in range(len(segs) - 1, -1, -1):
        if segs[i].start <= max(cq_max_phy, 0):
            ok, _ = _first_record_ok(segs[i])
            if ok:
                return i
    return 0


def abnormal_start(segs: list[Segment], min_timestamp: int) -> int:
    """Last segment whose first record's store time is at or before the checkpoint's."""
    for i in range(len(segs) - 1, -1, -1):
        ok, ts = _first_record_ok(segs[i])
        if ok and ts != 0 and ts <= min_timestamp:
            return i
    return 0


class Recovery:
    def __init__(self, store: "MessageStore", report: RecoveryReport):
        self.store = store
        self.report = report
        self.last_store_ts = 0

    def run(self, last_exit_ok: bool) -> None:
        store, report = self.store, self.report
        report.mode = "normal" if last_exit_ok else "abnormal"
        report.state = "running"
        report.started_ms = store.clock.now_ms()
        t0 = time.monotonic()
        cl = store.commitlog
        cqs = list(store.consume_queues())
        for cq in cqs:
            cq.recover()
        segs = list(cl.segments.segments)
        report.damage.extend(cl.segments.damage)
        if not segs:
            for cq in cqs:
                cq.destroy()
            store.drop_all_consume_queues()
            store.index.destroy_all()
            self._finish(0, t0)
            return
        cq_max = max((cq.max_phy_offset for cq in cqs), default=-1)
        if last_exit_ok:
            strict_idx = normal_start(segs, cq_max)
        else:
            strict_idx = abnormal_start(segs, store.checkpoint.min_timestamp())
        scan_idx = strict_idx
        idx_end = store.index.end_phy
        if store.config.messageIndexEnable and idx_end < segs[strict_idx].start:
            # §12.2: the index lost entries (files destroyed after a crash, or deleted): start
            # earlier and re-index every record the discarded files covered.
            catch_up = cl.segments.find(max(idx_end, segs[0].start), first_if_missing=True)
            scan_idx = segs.index(catch_up) if catch_up in segs else 0
        report.bytes_to_scan = sum(s.size for s in segs[scan_idx:])
        end = self._scan(segs, scan_idx, strict_idx)
        if store.index.end_phy > idx_end:
            report.index_rebuilt_from = idx_end
        self._finish(end, t0)

    def _scan(self, segs: list[Segment], first: int, strict: int) -> int:
        """Walk records from segment ``first``; the end of the last good record is returned.

        Segments before ``strict`` are only read to rebuild the index: a bad record there is
        reported as damage and the walk moves on to the next segment instead of cutting the log.
        """
        store, report = self.store, self.report
        check_crc = store.config.checkCRCOnRecover
        dispatcher = store.dispatcher
        end = segs[first].start
        for i in range(first, len(segs)):
            seg = segs[i]
            pos = 0
            while True:
                cols, pos, stop, _bad = codec.scan_records(seg.mm, pos, seg.size, check_crc, seg.start, CHUNK)
                if len(cols):
                    dispatcher.apply_columns(cols)
                    report.records_scanned += len(cols)
                    self.last_store_ts = int(cols.store_timestamps[-1])
                report.bytes_scanned = seg.start + pos - segs[first].start
                if stop != "limit" or pos >= seg.size:
                    break
            report.bytes_scanned = seg.start + seg.size - segs[first].start
            if stop == "blank" or pos >= seg.size:
                end = seg.start + seg.size
                continue
            if i < strict:
                msg = f"commitlog {seg.start:020d}: unreadable record at {seg.start + pos}; rest of segment skipped while re-indexing"
                log.warning(msg)
                report.damage.append(msg)
                end = seg.start + seg.size
                continue
            end = seg.start + pos
            break
        return end

    def _finish(self, end: int, t0: float) -> None:
        store, report = self.store, self.report
        cl = store.commitlog
        truncated = cl.segments.truncate_dirty(end)
        cl.segments.set_positions_after_recovery(end)
        for seg in cl.segments.segments[:-1]:
            seg.close_writer()
        report.bytes_truncated = truncated
        for cq in list(store.consume_queues()):
            cq.truncate_dirty(end)
        store.index.truncate(end)
        store.rebuild_queue_offsets()
        cl_min = cl.min_offset
        for cq in list(store.consume_queues()):
            cq.correct_min_offset(cl_min)
        store.dispatcher.reput_from = end
        if self.last_store_ts:
            cl.last_store_ts = self.last_store_ts
        report.commitlog_end = end
        report.duration_ms = int((time.monotonic() - t0) * 1000)
        report.state = "done"
        if truncated:
            log.warning("recovery truncated %d bytes after offset %d", truncated, end)
        log.info("%s recovery done in %d ms: end %d, %d records scanned, %d bytes truncated",
                 report.mode, report.duration_ms, end, report.records_scanned, truncated)

