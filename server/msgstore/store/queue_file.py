"""One consume-queue file, reached through a descriptor of the :class:`FilePool` instead of a
mapping of its own (the commit log keeps its mapped :class:`Segment`).

A queue file is 5.7 MB of mostly holes whose few used kilobytes are read in small pieces, so
``pread``/``pwrite`` cost no more than a slice of a mapping would, and a node holding 100,000
queues holds neither 100,000 mappings nor 200,000 descriptors (issue 21). The positions
(``wrote``, ``flushed``) and the deletion protocol are those of :class:`Segment`, which
:class:`SegmentQueue` expects; opening the file is deferred to its first read or write, so a
store that knows its queues' ends (``queue_state.py``) starts without touching the files.
"""

from __future__ import annotations

import errno
import os

from .file_pool import FilePool
from .segment import PAGE, data_extents


class QueueFile:
    __slots__ = ("path", "start", "size", "pool", "wrote", "committed", "flushed", "full", "store_timestamp", "examined", "available")

    def __init__(self, path: str, start: int, size: int, pool: FilePool, *, create: bool = False):
        self.path = path
        self.start = start
        self.size = size
        self.pool = pool
        if create:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if os.fstat(fd).st_size:  # a file left by a crash: its units are stale (re-dispatch writes back the good ones)
                    pool.forget(path)
                    os.ftruncate(fd, 0)
                os.ftruncate(fd, size)
            finally:
                os.close(fd)
        self.wrote = self.committed = self.flushed = 0
        self.full = False
        self.store_timestamp = 0
        self.examined = 0
        self.available = True

    # ------------------------------------------------------------------ positions

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def read_position(self) -> int:
        return self.wrote

    @property
    def uses_buffer(self) -> bool:
        return False

    @property
    def cleanup_over(self) -> bool:
        return not self.available

    def set_positions(self, pos: int) -> None:
        self.wrote = self.committed = self.flushed = pos
        self.full = pos >= self.size

    # ------------------------------------------------------------------ reading and writing

    def read(self, pos: int, size: int) -> bytes:
        """``size`` bytes at ``pos`` (fewer past the file's end; none once it is deleted)."""
        try:
            entry = self.pool.borrow(self.path)  # (no context manager: this is every pull's path)
        except FileNotFoundError:
            return b""
        try:
            return os.pread(entry.fd, size, pos)
        finally:
            self.pool.give_back(entry)

    def write_at(self, pos: int, data: bytes | memoryview) -> None:
        view = memoryview(data)
        n = len(view)
        entry = self.pool.borrow(self.path)
        try:
            p = pos
            while len(view):
                w = os.pwrite(entry.fd, view, p)
                if w <= 0:
                    raise OSError(errno.ENOSPC, "short write", self.path)
                p += w
                view = view[w:]
        finally:
            self.pool.give_back(entry)
        if pos + n > self.wrote:
            self.wrote = self.committed = pos + n
        if self.wrote >= self.size:
            self.full = True

    def close_writer(self) -> None:
        """Nothing to give back: the pool owns the descriptor."""

    # ------------------------------------------------------------------ flushing

    def dirty_pages(self) -> int:
        return self.wrote // PAGE - self.flushed // PAGE

    def able_to_flush(self, least_pages: int) -> bool:
        if self.full and self.wrote > self.flushed:
            return True
        if least_pages > 0:
            return (self.wrote // PAGE - self.flushed // PAGE) >= least_pages
        return self.wrote > self.flushed

    def flush(self, least_pages: int) -> int:
        if not self.able_to_flush(least_pages) or not self.available:
            return self.flushed
        target = self.wrote
        try:
            with self.pool.use(self.path) as fd:
                os.fdatasync(fd)
        except FileNotFoundError:  # deleted meanwhile: nothing left to flush
            return self.flushed
        self.flushed = target
        return self.flushed

    # ------------------------------------------------------------------ recovery

    def data_end(self, pos: int, zero_run: int | None = None) -> int:
        """Offset after the last non-zero byte at or after ``pos`` (see Segment.data_end):
        holes are skipped through SEEK_DATA, so a sparse file is never read through."""
        last = pos
        chunk = min(1 << 16, zero_run) if zero_run else 1 << 16
        try:
            with self.pool.use(self.path) as fd:
                for begin, end in data_extents(fd, pos, self.size):
                    p = begin
                    while p < end:
                        if zero_run is not None and p - last >= zero_run:
                            return last
                        data = os.pread(fd, min(chunk, end - p), p)
                        self.examined += len(data)
                        kept = len(data.rstrip(b"\0"))
                        if kept:
                            last = p + kept
                        p += len(data) or chunk
        except FileNotFoundError:
            pass
        return last

    def extent_end(self) -> int:
        """Where the file's allocated data ends (a bound for a scan of its units: RocketMQ
        reads a queue file up to its first empty unit, we never read its holes at all)."""
        try:
            with self.pool.use(self.path) as fd:
                return max((end for _begin, end in data_extents(fd, 0, self.size)), default=0)
        except FileNotFoundError:
            return 0

    def zero_from(self, pos: int, zero_run: int | None = None) -> int:
        end = self.data_end(pos, zero_run)
        if end > pos:
            with self.pool.use(self.path) as fd:
                os.pwrite(fd, bytes(end - pos), pos)
                os.fdatasync(fd)
        return end - pos

    # ------------------------------------------------------------------ deletion

    def hold(self) -> bool:
        return self.available

    def release(self) -> None:
        pass

    def destroy(self, interval_forcibly_ms: int = 0, now_ms: int = 0) -> bool:
        self.available = False
        self.pool.forget(self.path)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        return True

    def close(self) -> None:
        self.pool.forget(self.path)

    def mtime_ms(self) -> int | None:
        try:
            return int(os.stat(self.path).st_mtime * 1000)
        except FileNotFoundError:
            return None

    def __repr__(self) -> str:
        return f"QueueFile({os.path.basename(self.path)}, wrote={self.wrote}, flushed={self.flushed})"


def read_extent(path: str, unit: int = 20) -> tuple[bytes, int]:
    """A queue file's bytes up to where its allocated data ends (rounded up to a whole unit),
    and the file's size: what offline tools and the Spark reader scan, instead of 5.7 MB of
    holes per queue. Bytes past the returned ones are holes: empty units."""
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        end = max((e for _b, e in data_extents(fd, 0, size)), default=0)
        limit = min(size, -(-end // unit) * unit)
        return os.pread(fd, limit, 0), size
