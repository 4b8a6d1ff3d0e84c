"""An ordered run of equally sized segments (the reference's MappedFileQueue).

Finds the segment holding an offset, rolls to a new segment, truncates after a recovered end
and deletes old segments by age (commit log) or by offset (consume queues). The segment list is
replaced, never mutated in place, so readers can take a snapshot without a lock.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
from collections.abc import Callable, Iterable

from .clock import Clock
from .layout import segment_files, segment_name
from .segment import Segment, Syncer, msync

log = logging.getLogger(__name__)

DROP_STEP = 8 * 1024 * 1024  # page cache is given back (drop_cached) this much at a time, at least


class SegmentSizeError(ValueError):
    """A segment file whose length differs from the configured size (never silently resized)."""


class WriteBufferPool:
    """Reusable write buffers for ``transientStorePoolEnable`` (anonymous mappings)."""

    def __init__(self, count: int, size: int):
        self.size = size
        self._free = [mmap.mmap(-1, size) for _ in range(count)]
        self._lock = threading.Lock()

    def borrow(self) -> mmap.mmap | None:
        with self._lock:
            return self._free.pop() if self._free else None

    def give_back(self, buf: mmap.mmap) -> None:
        with self._lock:
            self._free.append(buf)

    @property
    def available(self) -> int:
        return len(self._free)


class SegmentQueue:
    def __init__(
        self,
        directory: str,
        segment_size: int,
        *,
        clock: Clock,
        syncer: Syncer = msync,
        pool: WriteBufferPool | None = None,
        preallocate: bool = False,
        zero_run: int | None = None,
        factory: Callable[[str, int, bool], Segment] | None = None,
    ):
        """``factory(path, start, create)``: how a segment file is opened (consume queues use
        pooled-descriptor QueueFiles instead of mapped Segments)."""
        self.directory = directory
        self.segment_size = segment_size
        self.clock = clock
        self.syncer = syncer
        self.pool = pool
        # Reserve a new segment's blocks up front: writes into it run ~4x faster than into a
        # sparse file here, and a full disk fails the creation instead of a later write.
        self.preallocate = preallocate
        self.segments: list[Segment] = []
        self.flushed_where = 0
        self.committed_where = 0
        self.uncached_where = 0  # drop_cached gave back the page cache below this, as far as flushed
        self.store_timestamp = 0
        self.damage: list[str] = []
        self.zero_run = zero_run  # see Segment.data_end
        self.tail_examined = 0
        self.factory = factory
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ loading

    def load(self, readonly: bool = False) -> None:
        """Map every segment file (docs/store-format.md §1 loading rules); read-only for offline tools,
        which then also leave an empty last file alone."""
        names = segment_files(self.directory)
        segments: list[Segment] = []
        try:
            for i, name in enumerate(names):
                path = os.path.join(self.directory, name)
                length = os.path.getsize(path)
                if length == 0 and i == len(names) - 1:
                    if readonly:
                        continue
                    log.warning("deleting empty last segment %s", path)
                    os.unlink(path)
                    continue
                if length != self.segment_size:
                    if self.factory is None:  # the commit log: its segments are the data itself
                        raise SegmentSizeError(f"{path}: length {length} differs from the configured segment size {self.segment_size}")
                    # a consume-queue file cut short or grown: its size back (zeros), its missing
                    # units written again from the commit log when read (unit_repair.py)
                    msg = f"{path}: length {length} differs from the configured segment size {self.segment_size}; resized"
                    log.error(msg)
                    self.damage.append(msg)
                    if not readonly:
                        os.truncate(path, self.segment_size)
                if self.factory is not None:
                    seg = self.factory(path, int(name), False)
                else:
                    seg = Segment(path, int(name), self.segment_size, create=False, syncer=self.syncer, readonly=readonly)
                seg.set_positions(self.segment_size)
                segments.append(seg)
        except BaseException:  # do not leak the mappings opened so far
            for seg in segments:
                seg.close()
            raise
        for prev, nxt in zip(segments, segments[1:]):
            if nxt.start - prev.start != self.segment_size:
                msg = f"{self.directory}: segments {segment_name(prev.start)} and {segment_name(nxt.start)} are not adjacent"
                log.error(msg)
                self.damage.append(msg)
        self.segments = segments

    def adopt(self, starts: list[int], end: int) -> None:
        """Take the segments a saved queue state names, ending at ``end``, without opening or
        listing anything (a node with 100,000 queues restarts without touching their files)."""
        assert self.factory is not None
        segs = [self.factory(os.path.join(self.directory, segment_name(start)), start, False) for start in starts]
        for seg in segs:
            seg.set_positions(min(self.segment_size, max(0, end - seg.start)))
        self.segments = segs
        self.set_positions_after_recovery(end)

    # ------------------------------------------------------------------ lookup

    def first(self) -> Segment | None:
        segs = self.segments
        return segs[0] if segs else None

    def last(self) -> Segment | None:
        segs = self.segments
        return segs[-1] if segs else None

    def create(self, start: int) -> Segment:
        """Create the segment starting at ``start``; OSError (e.g. ENOSPC) propagates."""
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, segment_name(start))
        if self.factory is not None:
            made = self.factory(path, start, True)
            with self._lock:
                self.segments = self.segments + [made]
            return made
        buf = self.pool.borrow() if self.pool is not None else None
        try:
            seg = Segment(
                path,
                start,
                self.segment_size,
                create=True,
                syncer=self.syncer,
                write_buffer=buf,
                on_release_buffer=self.pool.give_back if self.pool is not None else None,
                preallocate=self.segment_size if self.preallocate else 0,
            )
        except BaseException:
            if buf is not None and self.pool is not None:
                self.pool.give_back(buf)
            try:
                os.unlink(path)
            except OSError:
                pass
            raise
        with self._lock:
            self.segments = self.segments + [seg]
        return seg

    def last_writable(self, start_if_empty: int = 0) -> Segment:
        """The segment appends go to, rolling to a new one when the last is full."""
        last = self.last()
        if last is None:
            start = start_if_empty - start_if_empty % self.segment_size
            return self.create(start)
        if last.full:
            return self.create(last.start + self.segment_size)
        return last

    def find(self, offset: int, first_if_missing: bool = False) -> Segment | None:
        segs = self.segments
        if not segs:
            return None
        first = segs[0]
        if offset < first.start or offset >= segs[-1].start + self.segment_size:
            return first if first_if_missing else None
        idx = (offset - first.start) // self.segment_size
        if 0 <= idx < len(segs):
            seg = segs[idx]
            if seg.start <= offset < seg.start + self.segment_size:
                return seg
        for seg in segs:  # a gap in the run (damage) breaks the arithmetic
            if seg.start <= offset < seg.start + self.segment_size:
                return seg
        return first if first_if_missing else None

    def min_offset(self) -> int:
        """Offset of the first byte still present (-1 when empty)."""
        for seg in self.segments:
            if seg.available:
                return seg.start
        segs = self.segments
        return segs[-1].start + self.segment_size if segs else -1

    def max_offset(self) -> int:
        """Offset after the last readable byte."""
        last = self.last()
        return last.start + last.read_position if last else 0

    def max_wrote_offset(self) -> int:
        last = self.last()
        return last.start + last.wrote if last else 0

    def remaining_to_flush(self) -> int:
        return self.max_offset() - self.flushed_where

    # ------------------------------------------------------------------ flush and commit

    def flush(self, least_pages: int) -> bool:
        """Flush the segment holding ``flushed_where`` (one segment per call, as the reference);
        returns True when nothing moved."""
        seg = self.find(self.flushed_where, first_if_missing=self.flushed_where == 0)
        if seg is None:
            return True
        ts = seg.store_timestamp
        pos = seg.flush(least_pages)
        where = seg.start + pos
        moved = where != self.flushed_where
        self.flushed_where = where
        if moved and ts and seg.flushed >= seg.wrote:
            self.store_timestamp = ts
        return not moved

    def drop_cached(self, below: int) -> int:
        """Give back the page cache of flushed bytes below offset ``below`` (Segment.drop_cached),
        in steps of at least ``DROP_STEP``; returns the bytes given back."""
        if below - self.uncached_where < DROP_STEP:
            return 0
        dropped = 0
        for seg in list(self.segments):
            if seg.start >= below:
                break
            if seg.uncached < self.segment_size:
                try:
                    dropped += seg.drop_cached(below - seg.start)
                except (OSError, ValueError) as e:  # (truncated or deleted meanwhile: a cache, never worth failing a flush)
                    log.debug("giving back the page cache of %s: %s", seg.path, e)
        self.uncached_where = below
        return dropped

    def commit(self, least_pages: int) -> bool:
        seg = self.find(self.committed_where, first_if_missing=self.committed_where == 0)
        if seg is None:
            return True
        pos = seg.commit(least_pages)
        where = seg.start + pos
        moved = where != self.committed_where
        self.committed_where = where
        return not moved

    # ------------------------------------------------------------------ truncation

    def truncate_dirty(self, offset: int) -> int:
        """Make ``offset`` the end: zero the tail of its segment, destroy later segments.

        Returns the number of bytes that were zeroed or dropped; ``tail_examined`` says how many
        were read to find them (bounded by ``zero_run``, see :meth:`Segment.data_end`).
        """
        dropped = 0
        self.tail_examined = 0
        keep: list[Segment] = []
        for seg in self.segments:
            if seg.start + self.segment_size <= offset:
                keep.append(seg)
            elif seg.start <= offset:
                pos = offset - seg.start
                seg.examined = 0
                dropped += seg.zero_from(pos, self.zero_run)
                self.tail_examined += seg.examined
                seg.set_positions(pos)
                keep.append(seg)
            else:
                seg.examined = 0
                dropped += seg.data_end(0, self.zero_run)
                self.tail_examined += seg.examined
                seg.destroy(0, self.clock.now_ms())
                if os.path.exists(seg.path):
                    os.unlink(seg.path)
        with self._lock:
            self.segments = keep
        self.flushed_where = min(self.flushed_where, offset) if keep else 0
        self.committed_where = min(self.committed_where, offset) if keep else 0
        self.uncached_where = min(self.uncached_where, offset) if keep else 0
        return dropped

    def set_positions_after_recovery(self, end: int) -> None:
        self.flushed_where = end
        self.committed_where = end

    # ------------------------------------------------------------------ deletion

    def delete_expired_by_time(
        self, expired_ms: int, interval_ms: int, forcibly_ms: int, clean_now: bool, batch_max: int, protect_from: int | None = None
    ) -> int:
        """Delete expired segments oldest first, never the newest, never from the middle (§9).

        ``protect_from``: a phy offset whose segment and all later ones are kept unless
        ``clean_now`` (the retention guard, §12.5).
        """
        segs = list(self.segments)
        deletable = len(segs) - 1
        deleted: list[Segment] = []
        vanished: list[Segment] = []
        for i in range(deletable):
            seg = segs[i]
            now = self.clock.now_ms()
            mtime = seg.mtime_ms()
            if mtime is None and seg.available:  # removed behind our back: forget it, it was not our deletion
                log.warning("segment %s is gone from the disk; dropped from the commit log", seg.path)
                vanished.append(seg)
                continue
            # (a segment we are destroying may lose its file when its last reader lets go)
            expired = mtime is None or now >= mtime + expired_ms
            if not (expired or clean_now):
                break
            if protect_from is not None and not clean_now and seg.start + self.segment_size > protect_from:
                break
            if not seg.destroy(forcibly_ms, now):
                break
            deleted.append(seg)
            if len(deleted) >= batch_max:
                break
            if interval_ms > 0 and i + 1 < deletable:
                self.clock.sleep(interval_ms / 1000)
        self._forget(deleted + vanished)
        return len(deleted)

    def delete_expired_by_offset(self, min_phy_offset: int, last_unit_phy: Callable[[Segment], int]) -> int:
        """Consume-queue cleanup: drop segments (never the last) whose last unit points below
        ``min_phy_offset``."""
        segs = list(self.segments)
        deleted: list[Segment] = []
        now = self.clock.now_ms()
        for seg in segs[:-1]:
            if last_unit_phy(seg) >= min_phy_offset:
                break
            if not seg.destroy(60_000, now):
                break
            deleted.append(seg)
        self._forget(deleted)
        return len(deleted)

    def retry_delete_first(self, forcibly_ms: int) -> bool:
        """Retry destroying a first segment that readers kept alive; True when it went."""
        first = self.first()
        if first is None or first.available:
            return False
        if first.destroy(forcibly_ms, self.clock.now_ms()):
            self._forget([first])
            return True
        return False

    def _forget(self, gone: Iterable[Segment]) -> None:
        ids = {id(s) for s in gone}
        if ids:
            with self._lock:
                self.segments = [s for s in self.segments if id(s) not in ids]

    def destroy_all(self) -> None:
        for seg in self.segments:
            seg.destroy(0, self.clock.now_ms())
            if os.path.exists(seg.path):
                os.unlink(seg.path)
        self.segments = []
        self.flushed_where = self.committed_where = 0
        try:
            os.rmdir(self.directory)
        except OSError:
            pass

    def close(self) -> None:
        for seg in self.segments:
            seg.close()
