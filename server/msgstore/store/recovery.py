"""Crash recovery (docs/store-format.md §8, §12.1, §12.2, §12.7).

Find the end of the last good record, re-dispatch what the consume queues and index lack,
cut everything after the end (zeroing the bytes, so stale data can never pass for records) and
report what happened: mode, progress, duration, bytes scanned and truncated.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from .checkpoint import Checkpoint
from .commitlog import CommitLog
from .config import StoreConfig
from .consume_queue import ConsumeQueue
from .dispatch import Dispatcher
from .index import IndexService
from .queue_state import QueueState
from .queue_table import QueueTable
from .segment import Segment

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
    tail_bytes_checked: int = 0  # read after the end to find (and zero) a stale tail
    records_scanned: int = 0
    index_files_destroyed: int = 0
    index_rebuilt_from: int = -1
    queues_scanned: int = 0  # after a crash: queues whose saved end was not found on disk
    queues_checked: int = 0  # after a crash: saved ends checked against their files (none when only the process died)
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

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["progress"] = self.progress
        return d


def truncate_all(cl: CommitLog, queues: QueueTable, index: IndexService, dispatcher: Dispatcher, end: int) -> int:
    """Make ``end`` the end of the commit log, and take the consume queues and the index back
    with it: what recovery does with a torn tail, and a follower with a tail its new master never
    had (docs/store-format.md §14). Returns the bytes zeroed or dropped."""
    truncated = cl.segments.truncate_dirty(end)
    for seg in cl.segments.segments[:-1]:
        seg.close_writer()
    for cq in queues.all():
        cq.truncate_dirty(end)
    index.truncate(end)
    queues.rebuild_offsets()
    cl_min = cl.min_offset
    for cq in queues.all():
        cq.correct_min_offset(cl_min)
    dispatcher.clear_hints()
    dispatcher.reput_from = min(dispatcher.reput_from, end)
    return truncated


def normal_start(cl: CommitLog, segs: list[Segment], cq_max_phy: int) -> int:
    """Last segment whose first record parses and lies at or before the queues' max."""
    for i in range(len(segs) - 1, -1, -1):
        if segs[i].start <= max(cq_max_phy, 0):
            ok, _ = cl.first_record(segs[i])
            if ok:
                return i
    return 0


def abnormal_start(cl: CommitLog, segs: list[Segment], min_timestamp: int) -> int:
    """Last segment whose first record's store time is at or before the checkpoint's."""
    for i in range(len(segs) - 1, -1, -1):
        ok, ts = cl.first_record(segs[i])
        if ok and ts != 0 and ts <= min_timestamp:
            return i
    return 0


CHECKERS = 8  # threads checking saved ends: a cold page cache makes each check a few disk reads


def _check_saved_ends(cqs: list[ConsumeQueue]) -> list[bool]:
    """``verify_saved_end`` of every queue, in parallel where there are many (each check is a
    handful of system calls on files of its own, which release the interpreter's lock)."""
    if len(cqs) < 512:
        return [cq.verify_saved_end() for cq in cqs]
    with concurrent.futures.ThreadPoolExecutor(CHECKERS, thread_name_prefix="cq-check") as pool:
        return list(pool.map(ConsumeQueue.verify_saved_end, cqs, chunksize=256))


class Recovery:
    def __init__(
        self,
        commitlog: CommitLog,
        queues: QueueTable,
        index: IndexService,
        checkpoint: Checkpoint,
        dispatcher: Dispatcher,
        settings: Callable[[], StoreConfig],
        report: RecoveryReport,
        now_ms: Callable[[], int],
    ):
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.checkpoint = checkpoint
        self.dispatcher = dispatcher
        self.settings = settings
        self.report = report
        self.now_ms = now_ms
        self.last_store_ts = 0

    def run(self, last_exit_ok: bool, saved: QueueState | None = None, page_cache_kept: bool = False) -> None:
        """``saved``: the consume queues' state the table adopted (queue_state.py). Taken whole
        after a clean stop; otherwise the commit log is dispatched again from where it stood
        when the ends were taken, and, unless only the process died (``page_cache_kept``:
        abort_file.py), each queue's saved end is first checked against its file (a queue
        whose end is not on disk is scanned).

        Why a process crash needs no check: its writes are all in the page cache, so the commit
        log keeps every record whose units a queue holds, re-dispatch writes back the same
        units at the same places, and no queue can hold a unit whose record is gone."""
        report = self.report
        report.mode = "normal" if last_exit_ok else "abnormal"
        report.state = "running"
        report.started_ms = self.now_ms()
        t0 = time.monotonic()
        cl = self.commitlog
        cqs = self.queues.all()
        trusted = saved is not None and saved.clean and last_exit_ok
        if saved is None:
            for cq in cqs:
                cq.recover()
        rescanned: list[ConsumeQueue] = []
        if saved is not None and not trusted and not page_cache_kept:
            report.queues_checked = len(cqs)
            for cq, kept in zip(cqs, _check_saved_ends(cqs)):
                if not kept:
                    report.queues_scanned += 1
                    cq.rescan()
                    rescanned.append(cq)
                    if cq.segments.last() is None and not os.path.isdir(cq.segments.directory):
                        self.queues.forget(cq.topic, cq.queue_id)  # dropped after the state was saved
            cqs = self.queues.all()
        segs = list(cl.segments.segments)
        report.damage.extend(cl.segments.damage)
        if not segs:
            self.queues.drop_all()
            self.index.destroy_all()
            self._finish(0, t0)
            return
        cq_max = max((cq.max_phy_offset for cq in cqs), default=-1)
        if last_exit_ok:
            strict_idx = normal_start(cl, segs, cq_max)
        else:
            strict_idx = abnormal_start(cl, segs, self.checkpoint.min_timestamp())
        units_from = saved.dispatched if trusted and saved is not None else 0  # a clean stop's queues hold all before it
        if saved is not None and not trusted:
            # consume-queue units are written again only for what came after the ends were
            # taken: from the earlier of the dispatch position and the flushed end then, and
            # from the last good unit of a queue whose saved end was not on disk (it lost units
            # before that). The log itself is still scanned from the checkpoint's start, to find
            # its end as RocketMQ does; scanning is cheap, writing 100,000 queues' units is not.
            floors = [cq.max_phy_offset for cq in rescanned if self.queues.get(cq.topic, cq.queue_id) is cq]
            if all(f >= 0 for f in floors):  # else a rescanned queue kept no unit: all of it, as without a state
                units_from = min([saved.dispatched, *([saved.flushed] if saved.flushed > 0 else []), *floors])
                at = cl.segments.find(units_from)
                if at in segs:
                    strict_idx = min(strict_idx, segs.index(at))
                elif units_from < segs[0].start:  # the log was cleaned past it: from its start
                    strict_idx = 0
        scan_idx = strict_idx
        idx_end = self.index.end_phy
        if self.settings().messageIndexEnable and idx_end < segs[strict_idx].start:
            # §12.2: the index lost entries (files destroyed after a crash, or deleted): start
            # earlier and re-index every record the discarded files covered.
            catch_up = cl.segments.find(max(idx_end, segs[0].start), first_if_missing=True)
            scan_idx = segs.index(catch_up) if catch_up in segs else 0
        report.bytes_to_scan = sum(s.size for s in segs[scan_idx:])
        end = self._scan(segs, scan_idx, strict_idx, units_from)
        if self.index.end_phy > idx_end:
            report.index_rebuilt_from = idx_end
        self._finish(end, t0)

    def _scan(self, segs: list[Segment], first: int, strict: int, units_from: int = 0) -> int:
        """Walk records from segment ``first``; the end of the last good record is returned
        (consume-queue units only for records from ``units_from`` on).

        Segments before ``strict`` are only read to rebuild the index: a bad record there is
        reported as damage and the walk moves on to the next segment instead of cutting the log.
        """
        report, cl = self.report, self.commitlog
        check_crc = self.settings().checkCRCOnRecover
        dispatcher = self.dispatcher
        end = segs[first].start
        for i in range(first, len(segs)):
            seg = segs[i]
            pos = 0
            while True:
                cols, pos, stop, _bad = cl.scan_segment(seg, pos, check_crc, CHUNK)
                if len(cols):
                    dispatcher.apply_columns(cols, units_from=units_from)
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
        report = self.report
        cl = self.commitlog
        truncated = truncate_all(cl, self.queues, self.index, self.dispatcher, end)
        report.tail_bytes_checked = cl.segments.tail_examined
        cl.segments.set_positions_after_recovery(end)
        report.bytes_truncated = truncated
        self.dispatcher.reput_from = end
        if self.last_store_ts or self.checkpoint.physic_msg_timestamp:  # store times never go back
            cl.last_store_ts = max(self.last_store_ts, self.checkpoint.physic_msg_timestamp)
        report.commitlog_end = end
        report.duration_ms = int((time.monotonic() - t0) * 1000)
        report.state = "done"
        if truncated:
            log.warning("recovery truncated %d bytes after offset %d", truncated, end)
        log.info(
            "%s recovery done in %d ms: end %d, %d records scanned, %d bytes truncated",
            report.mode,
            report.duration_ms,
            end,
            report.records_scanned,
            truncated,
        )
