"""The commit log: every record of every topic, appended in one global order (docs/store-format.md §2, §4)."""

from __future__ import annotations

import enum
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from ..record import codec
from ..record.codec import Buffer
from .clock import Clock
from .config import StoreConfig
from .segment import Segment, Syncer, msync
from .segment_queue import SegmentQueue, WriteBufferPool

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY = 4 * 1024 * 1024


class AppendError(Exception):
    """An append that did not happen; ``status`` is the PutStatus name to report."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(slots=True)
class Appended:
    phy_offset: int
    end_offset: int
    store_timestamp: int


class ReadMiss(enum.Enum):
    """Why :meth:`RecordReader.record` has no view to give."""

    GONE = "gone"  # not (or no longer) in the commit log: deleted by retention, or past its end
    NOT_A_RECORD = "not a record"  # bytes are there, but no record of that size starts there


class Holder(Protocol):
    def hold(self, release: Callable[[], None], view: memoryview | None = None) -> None: ...


@dataclass(slots=True)
class Scanned:
    """Records parsed from one segment by :meth:`CommitLog.scan` (see ``codec.scan_records``)."""

    columns: Any  # codec.Columns
    end: int  # phy offset after the last record parsed
    stop: str  # "limit" | "blank" | "bad"
    bad_size: int
    segment_end: int
    segment_full: bool


class RecordReader:
    """Zero-copy views of whole records for one read (a pull). Each segment read from is held
    once and handed to ``holder`` (a GetResult), so its mapping outlives the views."""

    def __init__(self, segments: SegmentQueue, holder: Holder):
        self._segments = segments
        self._holder = holder
        self._seg: Segment | None = None
        self._view: memoryview | None = None

    def record(self, phy: int, size: int) -> memoryview | ReadMiss:
        seg = self._seg
        if seg is None or not (seg.start <= phy < seg.start + seg.size):
            seg = self._segments.find(phy)  # units mostly share a segment: hold it once per read
            if seg is None or not seg.hold():
                self._seg = None
                return ReadMiss.GONE
            self._seg, self._view = seg, memoryview(seg.mm)
            self._holder.hold(seg.release, self._view)
        pos = phy - seg.start
        if pos + size > seg.read_position:
            return ReadMiss.GONE
        total, magic = _SIZE_MAGIC.unpack_from(seg.mm, pos) if size >= 8 else (0, 0)
        if total != size or (magic != codec.MAGIC_V1 and magic != codec.MAGIC_V2):
            return ReadMiss.NOT_A_RECORD
        assert self._view is not None
        return self._view[pos : pos + size]


_SIZE_MAGIC = codec._S_SIZE_MAGIC  # TOTALSIZE and MAGICCODE at the start of a record


class CommitLog:
    def __init__(
        self,
        directory: str,
        config: StoreConfig,
        *,
        clock: Clock,
        syncer: Syncer = msync,
        store_host: tuple[str, int] = ("127.0.0.1", 10911),
    ):
        self.directory = directory
        self.segment_size = config.mappedFileSizeCommitLog
        pool = WriteBufferPool(config.transientStorePoolSize, self.segment_size) if config.transientStorePoolEnable else None
        self.pool = pool
        # a stale tail after a crash is a run of records, and no zero run inside one is longer
        # than a body (whatever maxMessageSize was when it was written: not below the default)
        zero_run = max(config.maxMessageSize, DEFAULT_MAX_BODY) + (1 << 20)
        self.segments = SegmentQueue(
            directory, self.segment_size, clock=clock, syncer=syncer, pool=pool, preallocate=True, zero_run=zero_run
        )
        self.clock = clock
        self.lock = threading.Lock()
        self.set_store_host(store_host)
        self.last_store_ts = 0
        self.lock_held_since = 0.0

    def set_store_host(self, host: tuple[str, int]) -> None:
        self.store_host = host
        self.store_host_bytes = codec.host_bytes(host)
        self.store_v6 = codec.is_v6(host)

    def load(self) -> None:
        self.segments.load()

    # ------------------------------------------------------------------ offsets

    @property
    def min_offset(self) -> int:
        return self.segments.min_offset() if self.segments.segments else 0

    @property
    def max_offset(self) -> int:
        """End of what readers may see."""
        return self.segments.max_offset()

    @property
    def flushed_offset(self) -> int:
        return self.segments.flushed_where

    @property
    def committed_offset(self) -> int:
        """Where the write-buffer committer has got to (transientStorePoolEnable)."""
        return self.segments.committed_where

    # ------------------------------------------------------------------ writing

    def append(
        self, batch: codec.Batch, queue_offset: int, timeout_s: float, on_appended: Callable[[int, int, int], None] | None = None
    ) -> Appended:
        """Append a prepared batch as consecutive records; must be called under the queue lock.

        The store timestamp and phy offset are fixed inside the global lock, so store time is
        monotone with phy offset. Raises :class:`AppendError` with the status to report.
        """
        if batch.total + codec.BLANK_SIZE > self.segment_size:
            raise AppendError("MESSAGE_ILLEGAL", f"batch of {batch.total} bytes does not fit in one segment of {self.segment_size}")
        if not self.lock.acquire(timeout=timeout_s):
            raise AppendError("OS_PAGE_CACHE_BUSY", "the append lock was busy for longer than osPageCacheBusyTimeOutMills")
        try:
            seg = self._writable()
            if batch.total + codec.BLANK_SIZE > seg.remaining:
                seg.append_blank(codec.blank_record(seg.remaining))
                if not seg.uses_buffer:  # a write buffer still has to be committed through it
                    seg.close_writer()
                seg = self._writable()
            phy = seg.start + seg.wrote
            now = self.clock.now_ms()
            ts = now if now > self.last_store_ts else self.last_store_ts
            data = batch.finalize(queue_offset, phy, ts)
            try:
                seg.append(data)
            except OSError as e:
                raise AppendError("SERVICE_NOT_AVAILABLE", f"writing the commit log failed: {e.strerror or e}") from e
            self.last_store_ts = ts
            seg.store_timestamp = ts
            if on_appended is not None:  # inside the lock, so callbacks see commit-log order
                on_appended(phy, phy + len(data), ts)
            return Appended(phy, phy + len(data), ts)
        finally:
            self.lock.release()

    def append_raw(self, phy: int, data: Buffer) -> int:
        """Write a master's commit-log bytes at the master's own offset ``phy`` (a follower's
        copy is the master's byte for byte: same records, same BLANK ends, same segment starts).
        ``phy`` must be this log's end, or a segment start when the log is empty (a new follower
        starts from the master's first segment). Returns the new end. A chunk that crosses a
        segment end continues in the next segment, as the master's did."""
        view = memoryview(data)
        with self.lock:
            end = self.max_offset
            if self.segments.segments and phy != end:
                raise AppendError("MESSAGE_ILLEGAL", f"replicated bytes at {phy}, but this commit log ends at {end}")
            if not self.segments.segments and phy % self.segment_size:
                raise AppendError("MESSAGE_ILLEGAL", f"a new copy starts at a segment start, not at {phy}")
            while len(view):
                try:
                    seg = self.segments.last_writable(phy)
                except OSError as e:
                    raise AppendError("CREATE_MAPPED_FILE_FAILED", f"creating a commit-log segment failed: {e.strerror or e}") from e
                n = min(len(view), seg.size - seg.wrote)
                try:
                    seg.append(view[:n])
                except OSError as e:
                    raise AppendError("SERVICE_NOT_AVAILABLE", f"writing the commit log failed: {e.strerror or e}") from e
                if seg.full and not seg.uses_buffer:
                    seg.close_writer()
                view = view[n:]
                phy += n
            return phy

    def use_write_buffers(self, on: bool) -> None:
        """Write buffers (transientStorePoolEnable) on or off for the segments to come; turning
        them off commits the current one's buffer into its file and gives the buffer back, so
        the write position and the readable end are one again (a follower appends at the
        master's offsets, which must be this log's write position)."""
        with self.lock:
            self.segments.pool = self.pool if on else None
            last = self.segments.last()
            if not on and last is not None and last.uses_buffer:
                last.commit(0)
                last.drop_buffer()

    def partial_record_at(self, phy: int) -> bool:
        """A record starts at ``phy`` but the log ends before it does (a copy cut mid-record)."""
        seg = self.segments.find(phy)
        if seg is None or not seg.hold():
            return False
        try:
            pos = phy - seg.start
            return pos < seg.read_position and not codec.check(seg.mm, pos, seg.read_position, False)[1]
        finally:
            seg.release()

    def _writable(self) -> Segment:
        try:
            return self.segments.last_writable(0)
        except OSError as e:
            raise AppendError("CREATE_MAPPED_FILE_FAILED", f"creating a commit-log segment failed: {e.strerror or e}") from e

    # ------------------------------------------------------------------ reading

    def reader(self, holder: Holder) -> RecordReader:
        return RecordReader(self.segments, holder)

    def scan(self, offset: int, bound: int, max_records: int) -> Scanned | None:
        """Parse records from ``offset`` within its segment, below ``bound``; None when the
        segment is not there (deleted, or not yet created)."""
        seg = self.segments.find(offset)
        if seg is None or not seg.hold():
            return None
        try:
            pos = offset - seg.start
            limit = min(seg.read_position, bound - seg.start)
            cols, end, stop, bad = codec.scan_records(seg.mm, pos, limit, False, seg.start, max_records)
        finally:
            seg.release()
        return Scanned(cols, seg.start + end, stop, bad, seg.start + seg.size, seg.full)

    def first_record(self, seg: Segment) -> tuple[bool, int]:
        """(the segment's first record parses with its CRC, its store time) — recovery's test
        for where to start."""
        size, ok = codec.check(seg.mm, 0, seg.size, True)
        if not ok or size <= 0:
            return False, 0
        return True, codec.store_timestamp_of(seg.mm, 0)

    def scan_segment(self, seg: Segment, pos: int, check_crc: bool, max_records: int) -> tuple[Any, int, str, int]:
        """Recovery's walk: records of one segment from ``pos`` (``codec.scan_records``)."""
        scanned: tuple[Any, int, str, int] = codec.scan_records(seg.mm, pos, seg.size, check_crc, seg.start, max_records)
        return scanned

    def view(self, phy: int, size: int) -> tuple[Segment, memoryview] | None:
        """A held segment and a view of ``size`` bytes at ``phy``; None if not (or no longer) there.
        The caller must ``release()`` the segment."""
        seg = self.segments.find(phy)
        if seg is None:
            return None
        pos = phy - seg.start
        if pos + size > seg.read_position or size <= 0:
            return None
        if not seg.hold():
            return None
        return seg, seg.view(pos, size)

    def read(self, phy: int, size: int) -> bytes | None:
        held = self.view(phy, size)
        if held is None:
            return None
        seg, view = held
        try:
            return bytes(view)
        finally:
            view.release()
            seg.release()

    @contextmanager
    def raw(self, phy: int, max_bytes: int) -> Iterator[memoryview | None]:
        """Up to ``max_bytes`` of the log from ``phy``, within its segment (what a master sends a
        follower), as a view of the mapped segment valid inside the ``with`` only (the segment is
        held meanwhile): the master encodes its chunk straight from it, without first copying up
        to a MiB out. An empty view at the end, None when ``phy`` is no longer (or not yet) stored."""
        seg = self.segments.find(phy)
        if seg is None:
            yield memoryview(b"") if phy == self.max_offset else None
            return
        size = min(max_bytes, seg.read_position - (phy - seg.start))
        held = self.view(phy, size) if size > 0 else None
        if held is None:
            yield memoryview(b"") if size <= 0 else None
            return
        seg, view = held
        try:
            yield view
        finally:
            view.release()
            seg.release()

    def read_record(self, phy: int) -> bytes | None:
        """The whole record at ``phy`` (its size read from the record itself)."""
        seg = self.segments.find(phy)
        if seg is None or not seg.hold():
            return None
        try:
            pos = phy - seg.start
            limit = seg.read_position
            size, ok = codec.check(seg.mm, pos, limit, False)
            if not ok or size <= 0:
                return None
            return seg.read(pos, size)
        finally:
            seg.release()

    def store_time_at(self, phy: int, size: int) -> int | None:
        seg = self.segments.find(phy)
        if seg is None or not seg.hold():
            return None
        try:
            pos = phy - seg.start
            if pos + codec.OFF_BORNHOST + 28 > seg.read_position:
                return None
            return codec.store_timestamp_of(seg.mm, pos)
        finally:
            seg.release()

    # ------------------------------------------------------------------ maintenance

    def delete_expired(
        self, expired_ms: int, interval_ms: int, forcibly_ms: int, clean_now: bool, batch_max: int, protect_from: int | None
    ) -> int:
        return self.segments.delete_expired_by_time(expired_ms, interval_ms, forcibly_ms, clean_now, batch_max, protect_from)

    def close(self) -> None:
        self.segments.close()

    def segment_files(self) -> list[str]:
        return [os.path.basename(s.path) for s in self.segments.segments]
