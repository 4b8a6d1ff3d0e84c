"""One fixed-size memory-mapped file (the reference's MappedFile).

A segment knows three positions: ``wrote`` (appended), ``committed`` (copied out of the write
buffer, when one is used) and ``flushed`` (forced to disk). Readers hold a reference while they
read so that deletion waits for them (docs/store-format.md §4).
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
from collections.abc import Callable, Iterator

from ..record.codec import Buffer

log = logging.getLogger(__name__)

PAGE = mmap.PAGESIZE
FOLIO = 2 * 1024 * 1024  # the largest page-cache folio to expect (drop_cached)
Syncer = Callable[[mmap.mmap, int, int], None]


def data_extents(fd: int, pos: int, size: int) -> Iterator[tuple[int, int]]:
    """(begin, end) ranges of the file at or after ``pos`` (below ``size``) that hold allocated
    blocks: holes are skipped with SEEK_DATA/SEEK_HOLE, never read."""
    cursor = pos
    while cursor < size:
        try:
            data = os.lseek(fd, cursor, os.SEEK_DATA)
        except OSError:
            return  # ENXIO: nothing but holes after cursor
        if data >= size:
            return
        hole = min(os.lseek(fd, data, os.SEEK_HOLE), size)
        yield max(data, pos), hole
        cursor = hole


def msync(mm: mmap.mmap, offset: int, length: int) -> None:
    """Force ``length`` bytes at ``offset`` (page-aligned) of a mapping to disk."""
    if length > 0:
        mm.flush(offset, length)


class Segment:
    """A mapped file named by the offset of its first byte."""

    def __init__(
        self,
        path: str,
        start: int,
        size: int,
        *,
        create: bool,
        syncer: Syncer = msync,
        write_buffer: mmap.mmap | None = None,
        on_release_buffer: Callable[[mmap.mmap], None] | None = None,
        preallocate: int = 0,
        readonly: bool = False,
    ):
        self.path = path
        self.start = start
        self.size = size
        self._syncer = syncer
        if readonly and create:
            raise ValueError("a read-only segment cannot be created")
        flags = (os.O_RDONLY if readonly else os.O_RDWR) | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o644)
        try:
            if create:
                os.ftruncate(fd, size)
                if preallocate:
                    os.posix_fallocate(fd, 0, preallocate)
            else:
                actual = os.fstat(fd).st_size
                if actual != size:
                    raise ValueError(f"{path}: size {actual} differs from the configured {size}")
            prot = mmap.PROT_READ if readonly else mmap.PROT_READ | mmap.PROT_WRITE
            self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED, prot)
        except BaseException:
            os.close(fd)
            raise
        # Writes go through pwrite on this descriptor: on a full disk that fails with ENOSPC,
        # where a store into a shared mapping of a sparse file would kill us with SIGBUS.
        self._fd: int | None = fd
        self._fd_lock = threading.Lock()  # a flush syncing through the descriptor holds it open (see close_writer)
        self._fd_syncing = 0
        self._fd_close_pending = False
        self.wrote = 0
        self.committed = 0
        self.flushed = 0
        self.store_timestamp = 0  # store time of the last record appended
        self.examined = 0  # bytes data_end has read (recovery reports how much tail it checked)
        self.uncached = 0  # page cache given back below this position (drop_cached)
        self.full = False
        self._buffer = write_buffer
        self._on_release_buffer = on_release_buffer
        self._refs = 1
        self._available = True
        self._cleanup_over = False
        self._first_shutdown_ms = 0
        self._unlink_on_cleanup = False
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ positions

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def remaining(self) -> int:
        return self.size - self.wrote

    @property
    def read_position(self) -> int:
        """How far readers may see: committed data when a write buffer is in use."""
        return self.committed if self._buffer is not None else self.wrote

    @property
    def uses_buffer(self) -> bool:
        return self._buffer is not None

    def set_positions(self, pos: int) -> None:
        self.wrote = self.committed = self.flushed = pos
        self.uncached = min(self.uncached, pos // PAGE * PAGE)  # (madvise wants a page-aligned start)
        self.full = pos >= self.size

    # ------------------------------------------------------------------ writing

    def _pwrite(self, pos: int, data: Buffer) -> None:
        fd = self._fd
        tmp = None
        if fd is None:
            fd = tmp = os.open(self.path, os.O_RDWR)
        try:
            view = memoryview(data)
            while len(view):
                n = os.pwrite(fd, view, pos)
                if n <= 0:
                    raise OSError(28, "short write", self.path)
                pos += n
                view = view[n:]
        finally:
            if tmp is not None:
                os.close(tmp)

    def append(self, data: Buffer) -> int:
        """Write ``data`` at the write position (the caller checked it fits); returns that position.

        OSError (ENOSPC) propagates with the position unchanged, so a failed append leaves
        nothing that counts as written.
        """
        pos = self.wrote
        n = len(data)
        if self._buffer is not None:
            self._buffer[pos : pos + n] = data
        else:
            self._pwrite(pos, data)
        self.wrote = pos + n
        if self.wrote >= self.size:
            self.full = True
        return pos

    def append_blank(self, blank: bytes) -> None:
        """End the segment: the BLANK record claims every remaining byte."""
        pos = self.wrote
        if self._buffer is not None:
            self._buffer[pos : pos + len(blank)] = blank
        else:
            self._pwrite(pos, blank)
        self.wrote = self.size
        self.full = True

    def write_at(self, pos: int, data: Buffer) -> None:
        """Write at an explicit position (consume queues place units by queue offset)."""
        n = len(data)
        self._pwrite(pos, data)
        if pos + n > self.wrote:
            self.wrote = self.committed = pos + n
        if self.wrote >= self.size:
            self.full = True

    def write_mapped(self, pos: int, data: Buffer) -> None:
        """Store into the mapping directly; only for ranges preallocated at creation."""
        self.mm[pos : pos + len(data)] = data

    def commit(self, least_pages: int) -> int:
        """Copy the write buffer into the file; returns the committed position."""
        if self._buffer is None:
            return self.wrote
        wrote = self.wrote
        if wrote <= self.committed:
            return self.committed
        if not (self.full or least_pages <= 0 or (wrote // PAGE - self.committed // PAGE) >= least_pages):
            return self.committed
        start = self.committed
        self._pwrite(start, memoryview(self._buffer)[start:wrote])
        self.committed = wrote
        if self.full and self.committed >= self.size:
            self._return_buffer()
        return self.committed

    def close_writer(self) -> None:
        """Full segments give their descriptor back (thousands of queues would exhaust fds).
        A flush syncing through it meanwhile closes it when done: closed under it, the sync
        failed with EBADF, or (the number reused by another file) synced the wrong file and
        counted this one as flushed."""
        with self._fd_lock:
            if self._fd_syncing:
                self._fd_close_pending = True
                return
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def _sync_fd(self) -> bool:
        """fdatasync through the write descriptor; False when there is none (closed)."""
        with self._fd_lock:
            fd = self._fd
            if fd is None:
                return False
            self._fd_syncing += 1
        try:
            os.fdatasync(fd)
        finally:
            with self._fd_lock:
                self._fd_syncing -= 1
                close = self._fd_syncing == 0 and self._fd_close_pending
                if close:
                    self._fd, self._fd_close_pending = None, False
            if close:
                os.close(fd)
        return True

    def drop_buffer(self) -> None:
        """Stop using the write buffer (after committing it): later appends go to the file."""
        if self._buffer is not None and self.committed >= self.wrote:
            self._return_buffer()

    def _return_buffer(self) -> None:
        buf, self._buffer = self._buffer, None
        if buf is not None and self._on_release_buffer is not None:
            self._on_release_buffer(buf)

    def dirty_pages(self) -> int:
        return self.read_position // PAGE - self.flushed // PAGE

    def able_to_flush(self, least_pages: int) -> bool:
        target = self.read_position
        if self.full and target > self.flushed:
            return True
        if least_pages > 0:
            return (target // PAGE - self.flushed // PAGE) >= least_pages
        return target > self.flushed

    def flush(self, least_pages: int) -> int:
        """msync the dirty range if at least ``least_pages`` pages are dirty; returns flushed."""
        if not self.able_to_flush(least_pages):
            return self.flushed
        if not self.hold():
            return self.flushed
        try:
            target = self.read_position
            begin = (self.flushed // PAGE) * PAGE
            # fdatasync releases the GIL; mmap.flush (msync) holds it for the whole disk wait,
            # which stalled every put thread and left group commit with one request per flush.
            # Writes go through this descriptor, so it covers them all.
            if not (self._syncer is msync and self._buffer is None and self._sync_fd()):
                self._syncer(self.mm, begin, target - begin)
            self.flushed = target
        finally:
            self.release()
        return self.flushed

    def drop_cached(self, below: int) -> int:
        """Give the page cache of flushed bytes below ``below`` back to the kernel; returns the
        bytes given back now. Only flushed (clean) pages: nothing unwritten is ever dropped, and
        a later read takes the bytes from the file again. Our own mapping's pages go first
        (the kernel keeps a page a process maps), then the file's (posix_fadvise)."""
        end = min(below, self.flushed)
        # a large folio partly inside the range is skipped by the kernel and never retried:
        # steps end on folio boundaries until the segment is wholly behind
        end = end // PAGE * PAGE if end >= self.size else end // FOLIO * FOLIO
        begin = self.uncached // PAGE * PAGE
        if end <= begin or not self.hold():
            return 0
        try:
            self.mm.madvise(mmap.MADV_DONTNEED, begin, end - begin)
            fd = os.open(self.path, os.O_RDONLY)  # (our write descriptor may be closed meanwhile: close_writer)
            try:
                os.posix_fadvise(fd, begin, end - begin, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            self.uncached = end
        finally:
            self.release()
        return end - begin

    def _data_extents(self, pos: int) -> Iterator[tuple[int, int]]:
        """(begin, end) ranges at or after ``pos`` that hold allocated blocks (holes skipped)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return
        try:
            yield from data_extents(fd, pos, self.size)
        finally:
            os.close(fd)

    def data_end(self, pos: int, zero_run: int | None = None) -> int:
        """Offset after the last non-zero byte at or after ``pos`` (``pos`` when all zero).

        ``zero_run``: stop once that many zero bytes follow the last non-zero one. What was
        written after ``pos`` is one run of records appended in order, and no run of zeros
        inside records is that long, so nothing stale lies beyond; without the bound a
        preallocated segment (all of it "data" to SEEK_DATA) is read to its end, 1 GiB of zeros
        to restart an idle store. ``examined`` counts the bytes read."""
        last = pos
        chunk = 1 << 20
        for begin, end in self._data_extents(pos):
            p = begin
            while p < end:
                if zero_run is not None and p - last >= zero_run:
                    return last
                n = min(chunk, end - p)
                kept = len(self.mm[p : p + n].rstrip(b"\0"))
                self.examined += n
                if kept:
                    last = p + kept
                p += n
        return last

    def zero_from(self, pos: int, zero_run: int | None = None) -> int:
        """Zero every non-zero byte from ``pos`` on (§12.1) so stale bytes can never pass for
        records later; returns how many bytes were cut. Holes are skipped, so a sparse 1 GiB
        segment is not filled in (``zero_run``: see :meth:`data_end`)."""
        end = self.data_end(pos, zero_run)
        chunk = 1 << 20
        p = pos
        while p < end:
            n = min(chunk, end - p)
            self._pwrite(p, bytes(n))
            p += n
        if end > pos:
            begin = (pos // PAGE) * PAGE
            self._syncer(self.mm, begin, end - begin)
        return end - pos

    # ------------------------------------------------------------------ reading

    def view(self, pos: int, size: int) -> memoryview:
        """A zero-copy view of committed bytes; valid while the caller holds a reference."""
        return memoryview(self.mm)[pos : pos + size]

    def read(self, pos: int, size: int) -> bytes:
        return self.mm[pos : pos + size]

    # ------------------------------------------------------------------ references and deletion

    @property
    def available(self) -> bool:
        return self._available

    def hold(self) -> bool:
        with self._lock:
            if self._available and self._refs > 0:
                self._refs += 1
                return True
            return False

    def release(self) -> None:
        with self._lock:
            self._refs -= 1
            if self._refs > 0:
                return
        self._cleanup()

    def _cleanup(self) -> None:
        with self._lock:
            if self._cleanup_over or self._available:
                return
            self._cleanup_over = True
        self._return_buffer()
        self.close_writer()
        try:
            self.mm.close()
        except BufferError:
            # A forcibly destroyed segment may still be viewed by a straggler; the mapping is
            # then unmapped by the garbage collector when the last view goes.
            pass
        if self._unlink_on_cleanup:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def shutdown(self, interval_forcibly_ms: int, now_ms: int) -> None:
        if self._available:
            self._available = False
            self._first_shutdown_ms = now_ms
            self.release()
        elif self._refs > 0 and now_ms - self._first_shutdown_ms >= interval_forcibly_ms:
            with self._lock:
                self._refs = -1000 - self._refs
            self._cleanup()

    @property
    def cleanup_over(self) -> bool:
        return self._refs <= 0 and self._cleanup_over

    def destroy(self, interval_forcibly_ms: int, now_ms: int) -> bool:
        """Unmap and delete the file; False while readers still hold it (the file then goes
        when the last reader lets go, or forcibly after ``interval_forcibly_ms``)."""
        self._unlink_on_cleanup = True
        self.shutdown(interval_forcibly_ms, now_ms)
        if not self.cleanup_over:
            return False
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        return True

    def close(self) -> None:
        """Unmap without deleting (store shutdown)."""
        self._available = False
        with self._lock:
            self._refs = 0
        self._cleanup()

    def mtime_ms(self) -> int | None:
        """The file's last modification (ms), None when the file is gone."""
        try:
            return int(os.stat(self.path).st_mtime * 1000)
        except FileNotFoundError:
            return None

    def __repr__(self) -> str:
        return f"Segment({os.path.basename(self.path)}, wrote={self.wrote}, flushed={self.flushed})"
