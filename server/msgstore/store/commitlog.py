"""The commit log: every record of every topic, appended in one global order (STORE_SPEC §2, §4)."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import Callable

from ..record import codec
from .clock import Clock
from .config import StoreConfig
from .segment import Segment, Syncer, msync
from .segment_queue import SegmentQueue, WriteBufferPool

log = logging.getLogger(__name__)


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


class CommitLog:
    def __init__(self, directory: str, config: StoreConfig, *, clock: Clock, syncer: Syncer = msync,
                 store_host: tuple[str, int] = ("127.0.0.1", 10911)):
        self.directory = directory
        self.segment_size = config.mappedFileSizeCommitLog
        pool = WriteBufferPool(config.transientStorePoolSize, self.segment_size) if config.transientStorePoolEnable else None
        self.pool = pool
        self.segments = SegmentQueue(directory, self.segment_size, clock=clock, syncer=syncer, pool=pool, preallocate=True)
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

    # ------------------------------------------------------------------ writing

    def append(self, batch, queue_offset: int, timeout_s: float,
               on_appended: Callable[[int, int, int], None] | None = None) -> Appended:
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

    def _writable(self) -> Segment:
        try:
            return self.segments.last_writable(0)
        except OSError as e:
            raise AppendError("CREATE_MAPPED_FILE_FAILED", f"creating a commit-log segment failed: {e.strerror or e}") from e

    # ------------------------------------------------------------------ reading

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

    def delete_expired(self, expired_ms: int, interval_ms: int, forcibly_ms: int, clean_now: bool,
                       batch_max: int, protect_from: int | None) -> int:
        return self.segments.delete_expired_by_time(expired_ms, interval_ms, forcibly_ms, clean_now, batch_max, protect_from)

    def close(self) -> None:
        self.segments.close()

    def segment_files(self) -> list[str]:
        return [os.path.basename(s.path) for s in self.segments.segments]
