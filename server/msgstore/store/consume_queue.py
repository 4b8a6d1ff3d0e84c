"""Consume queues (docs/store-format.md §3.1): per (topic, queue id) an array of 20-byte units
``[phy offset][size][tagsCode]`` so queue offset N lives at byte N×20."""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Callable, Iterator

import numpy as np

from .clock import Clock
from .file_pool import FilePool
from .queue_file import QueueFile
from .segment import Segment, Syncer, msync
from .segment_queue import SegmentQueue

log = logging.getLogger(__name__)

UNIT = 20
FILLER_SIZE = 0x7FFFFFFF
_UNIT = struct.Struct(">qiq")
FILLER = _UNIT.pack(0, FILLER_SIZE, 0)
UNIT_DTYPE = np.dtype([("phy", ">i8"), ("size", ">i4"), ("tag", ">i8")])


_TAIL_RUN = 4096  # zero bytes after a queue's last unit that mark its file's end (a unit holds runs of at most 16)


def is_filler(phy: int, size: int) -> bool:
    return phy == 0 and size == FILLER_SIZE


def _whole_units(raw: bytes) -> bytes:
    """A read cut short (a file truncated behind the store's back) ends at a whole unit."""
    return raw[: len(raw) - len(raw) % UNIT]


class ConsumeQueue:
    __slots__ = ("topic", "queue_id", "file_size", "segments", "max_phy_offset", "min_logic_offset", "first_phy", "_lock", "on_write")

    UNKNOWN = -2  # first_phy not known (after a scan): the cleaner reads the queue to learn it

    def __init__(
        self,
        topic: str,
        queue_id: int,
        root: str,
        file_size: int,
        *,
        clock: Clock,
        syncer: Syncer = msync,
        pool: FilePool | None = None,
        on_write: Callable[[ConsumeQueue], None] | None = None,
        on_new_file: Callable[[str], None] | None = None,
    ):
        """``pool``: the node's bounded pool of queue-file descriptors (one of its own when
        none is given); ``on_write``: told of every write (the table's dirty set);
        ``on_new_file``: told of every file created (its directory is synced before a state
        names it)."""
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size
        files = pool if pool is not None else FilePool(8)

        def open_file(path: str, start: int, create: bool) -> Segment:
            made = QueueFile(path, start, file_size, files, create=create)
            if create and on_new_file is not None:
                on_new_file(path)
            return made  # type: ignore[return-value]

        # a unit is never all zeros, and zero runs across units are at most 16 bytes long
        self.segments = SegmentQueue(
            os.path.join(root, topic, str(queue_id)), file_size, clock=clock, syncer=syncer, zero_run=4096, factory=open_file
        )
        self.max_phy_offset = -1  # phy offset + size of the last real unit (duplicate detection)
        self.min_logic_offset = 0  # in bytes
        self.first_phy = -1  # phy offset of the first real unit from the min on (-1: none, UNKNOWN: not known)
        self._lock = threading.Lock()
        self.on_write = on_write

    # ------------------------------------------------------------------ load and recover

    def load(self) -> None:
        self.segments.load()

    def adopt(self, starts: list[int], min_logic: int, end: int, max_phy: int, first_phy: int) -> None:
        """Take the state a clean stop (or the last save) recorded, opening nothing."""
        self.segments.adopt(starts, end)
        self.min_logic_offset = min_logic
        self.max_phy_offset = max_phy
        self.first_phy = first_phy

    def state(self) -> tuple[list[int], int, int, int, int]:
        """(segment starts, min logic offset, end, max phy, first phy): what :meth:`adopt` takes."""
        with self._lock:
            segs = self.segments.segments
            return [s.start for s in segs], self.min_logic_offset, self.segments.max_wrote_offset(), self.max_phy_offset, self.first_phy

    def verify_saved_end(self) -> bool:
        """After a crash, a saved end is kept only if the unit before it is on disk and is the
        last one the state knew (its phy + size is the saved max), and no file was rolled past
        it; only then are the units past it zeroed (re-dispatch writes back those the commit
        log still has), so a later scan can never take stale ones back. False: scan this queue
        instead, with nothing touched."""
        end = self.segments.max_wrote_offset()
        last = self.segments.last()
        if last is None:
            return not os.path.isdir(self.segments.directory) or not os.listdir(self.segments.directory)
        if os.path.exists(os.path.join(self.segments.directory, f"{last.start + self.file_size:020d}")):
            return False
        tail: bytes | None = None  # what follows the end in its file (one read with the unit before it, when both are in it)
        if end > self.min_logic_offset:
            seg = self.segments.find(end - UNIT)
            if seg is None:
                return False
            if seg is last and end < last.start + self.file_size:
                raw = seg.read(end - UNIT - seg.start, UNIT + _TAIL_RUN)
                raw, tail = raw[:UNIT], raw[UNIT:]
            else:
                raw = seg.read(end - UNIT - seg.start, UNIT)
            if len(raw) < UNIT:
                return False
            phy, size, _tag = _UNIT.unpack(raw)
            if not (phy >= 0 and size > 0):
                return False
            if not is_filler(phy, size) and phy + size != self.max_phy_offset:
                return False
        if end < last.start + self.file_size:
            if tail is None:
                tail = last.read(end - last.start, _TAIL_RUN)
            if tail.count(0) != len(tail):  # (a zero run this long is past any unit: the file's end)
                last.zero_from(end - last.start, _TAIL_RUN)
        return True

    def rescan(self) -> None:
        """Forget the saved segments and ends: list the directory and scan (§8)."""
        self.segments.load()
        self.max_phy_offset = -1
        self.min_logic_offset = 0
        self.recover()

    def recover(self) -> None:
        """Scan from the third-last segment to the first invalid unit; that is the end. Only a
        file's allocated extent is read: its holes are empty units (RocketMQ reads up to the
        first one, which for a sparse 5.7 MB file with a few units is all of it)."""
        segs = self.segments.segments
        if not segs:
            return
        idx = max(0, len(segs) - 3)
        end = segs[idx].start
        last_real = None
        while idx < len(segs):
            seg = segs[idx]
            extent = seg.extent_end() if isinstance(seg, QueueFile) else self.file_size
            limit = min(self.file_size, -(-extent // UNIT) * UNIT)
            units = np.frombuffer(_whole_units(seg.read(0, limit)), dtype=UNIT_DTYPE)
            valid = (units["phy"] >= 0) & (units["size"] > 0)
            n_valid = len(units) if valid.all() else int(np.argmin(valid))
            real = np.nonzero(~((units["phy"][:n_valid] == 0) & (units["size"][:n_valid] == FILLER_SIZE)))[0]
            if len(real):
                u = units[real[-1]]
                last_real = int(u["phy"]) + int(u["size"])
            end = seg.start + n_valid * UNIT
            if n_valid * UNIT < self.file_size:
                break
            idx += 1
        if last_real is not None:
            self.max_phy_offset = last_real
        self.segments.truncate_dirty(end)
        for seg in self.segments.segments[:-1]:
            seg.close_writer()
        self.segments.set_positions_after_recovery(end)
        first = self.segments.first()
        if first is not None:
            self.min_logic_offset = first.start
        self.first_phy = self.UNKNOWN if first is not None else -1

    # ------------------------------------------------------------------ writing

    def put_units(self, phys: np.ndarray, sizes: np.ndarray, tags: np.ndarray, first_queue_offset: int) -> int:
        """Write units for consecutive queue offsets; returns how many were written.

        Units whose ``phy + size`` is within the already dispatched range are duplicates and
        skipped, which makes re-dispatch after recovery idempotent. A failed write raises
        OSError naming this queue (the refusal of writes that follows says which and why).
        """
        try:
            return self._put_units(phys, sizes, tags, first_queue_offset)
        except OSError as e:
            raise self._named(e) from e

    def _named(self, e: OSError) -> OSError:
        return OSError(e.errno, f"consume queue {self.topic}/{self.queue_id}: {e.strerror or e}")

    def _put_units(self, phys: np.ndarray, sizes: np.ndarray, tags: np.ndarray, first_queue_offset: int) -> int:
        with self._lock:
            keep = (phys + sizes) > self.max_phy_offset
            if not keep.all():
                first_kept = int(np.argmax(keep)) if keep.any() else len(keep)
                if not keep[first_kept:].all():  # interleaved duplicates: keep order, drop them
                    return self._put_each(phys, sizes, tags, first_queue_offset, keep)
                phys, sizes, tags = phys[first_kept:], sizes[first_kept:], tags[first_kept:]
                first_queue_offset += first_kept
            n = len(phys)
            if n == 0:
                return 0
            units = np.empty(n, dtype=UNIT_DTYPE)
            units["phy"] = phys
            units["size"] = sizes
            units["tag"] = tags
            self._append_run(first_queue_offset, units.tobytes(), int(phys[0]), int(phys[-1]) + int(sizes[-1]))
            return n

    def _append_run(self, first_queue_offset: int, data: bytes, first_phy: int, end_phy: int) -> None:
        """Write a run of new units (under the lock) and move the queue's positions past it."""
        self._write(first_queue_offset * UNIT, data)
        self.max_phy_offset = end_phy
        if self.first_phy == -1:  # it was empty: this is its first unit
            self.first_phy = first_phy
        if self.on_write is not None:
            self.on_write(self)

    def _put_each(self, phys: np.ndarray, sizes: np.ndarray, tags: np.ndarray, first_queue_offset: int, keep: np.ndarray) -> int:
        written = 0
        for i in range(len(phys)):
            if keep[i] and int(phys[i]) + int(sizes[i]) > self.max_phy_offset:
                self._write((first_queue_offset + i) * UNIT, _UNIT.pack(int(phys[i]), int(sizes[i]), int(tags[i])))
                self.max_phy_offset = int(phys[i]) + int(sizes[i])
                if self.first_phy == -1:
                    self.first_phy = int(phys[i])
                written += 1
        if written and self.on_write is not None:
            self.on_write(self)
        return written

    def put_few(self, units: list[tuple[int, int, int]], first_queue_offset: int) -> int:
        """:meth:`put_units` for a handful of (phy, size, tag) units, without numpy: a lone
        message's dispatch spent most of its time in numpy's per-call costs. Same bytes, same
        skipping of units already held."""
        try:
            return self._put_few(units, first_queue_offset)
        except OSError as e:
            raise self._named(e) from e

    def _put_few(self, units: list[tuple[int, int, int]], first_queue_offset: int) -> int:
        with self._lock:
            floor = self.max_phy_offset
            first_kept = 0
            while first_kept < len(units) and units[first_kept][0] + units[first_kept][1] <= floor:
                first_kept += 1
            rest = units[first_kept:]
            if any(p + s <= floor for p, s, _ in rest):  # interleaved duplicates: as put_units
                phys, sizes, tags = (np.array(column, dtype=np.int64) for column in zip(*units))
                return self._put_each(phys, sizes, tags, first_queue_offset, (phys + sizes) > floor)
            if not rest:
                return 0
            last_phy, last_size, _ = rest[-1]
            data = b"".join([_UNIT.pack(p, s, t) for p, s, t in rest])
            self._append_run(first_queue_offset + first_kept, data, rest[0][0], last_phy + last_size)
            return len(rest)

    def put_unit(self, phy: int, size: int, tag: int, queue_offset: int) -> bool:
        return self.put_few([(phy, size, tag)], queue_offset) == 1

    def _write(self, logic_offset: int, data: bytes) -> None:
        """Place ``data`` at ``logic_offset``, splitting at segment ends and filling gaps."""
        current = self.segments.max_wrote_offset()
        if self.segments.last() is None and logic_offset > 0:
            # First segment ever for this queue starts mid-way: fill the units before with
            # [0][0x7FFFFFFF][0] so the file stays scannable (they never raise max phy).
            start = logic_offset - logic_offset % self.file_size
            seg = self.segments.create(start)
            pre = logic_offset - start
            if pre:
                seg.write_at(0, FILLER * (pre // UNIT))
            self.min_logic_offset = logic_offset
            self.segments.set_positions_after_recovery(logic_offset)
            current = logic_offset
        elif logic_offset < current:
            log.debug("%s/%d: unit at %d already written (current %d), skipped", self.topic, self.queue_id, logic_offset, current)
            n_skip = min(len(data), current - logic_offset)
            data = data[n_skip:]
            logic_offset += n_skip
            if not data:
                return
        elif logic_offset > current:
            log.error("%s/%d: gap in queue offsets (%d units missing); filled", self.topic, self.queue_id, (logic_offset - current) // UNIT)
            self._write(current, FILLER * ((logic_offset - current) // UNIT))
        view = memoryview(data)
        pos = logic_offset
        while len(view):
            last = self.segments.last()
            if last is None or last.full or pos >= last.start + self.file_size:
                if last is not None:
                    last.close_writer()
                last = self.segments.create(pos - pos % self.file_size)
            room = last.start + self.file_size - pos
            chunk = view[:room]
            last.write_at(pos - last.start, chunk)
            pos += len(chunk)
            view = view[len(chunk) :]

    # ------------------------------------------------------------------ reading

    @property
    def min_offset(self) -> int:
        return self.min_logic_offset // UNIT

    @property
    def max_offset(self) -> int:
        """Next queue offset to be written."""
        return self.segments.max_wrote_offset() // UNIT

    def unit(self, offset: int) -> tuple[int, int, int] | None:
        pos = offset * UNIT
        seg = self.segments.find(pos)
        if seg is None or pos - seg.start + UNIT > seg.wrote:
            return None
        raw = seg.read(pos - seg.start, UNIT)
        return _UNIT.unpack(raw) if len(raw) == UNIT else None

    def units(self, offset: int, max_count: int) -> list[tuple[int, int, int]]:
        """Up to ``max_count`` units from ``offset`` inside one segment (a pull never needs more)."""
        pos = offset * UNIT
        seg = self.segments.find(pos)
        if seg is None:
            return []
        rel = pos - seg.start
        n = min(max_count, (seg.wrote - rel) // UNIT)
        if n <= 0:
            return []
        return list(_UNIT.iter_unpack(_whole_units(seg.read(rel, n * UNIT))))

    def units_array(self, offset: int, max_count: int) -> np.ndarray:
        pos = offset * UNIT
        seg = self.segments.find(pos)
        if seg is None:
            return np.empty(0, dtype=UNIT_DTYPE)
        rel = pos - seg.start
        n = min(max_count, (seg.wrote - rel) // UNIT)
        if n <= 0:
            return np.empty(0, dtype=UNIT_DTYPE)
        return np.frombuffer(_whole_units(seg.read(rel, n * UNIT)), dtype=UNIT_DTYPE)

    def rewrite(self, offset: int, units: bytes) -> None:
        """Write units again over damaged ones below the queue's end (a repair: the dispatcher
        only ever appends at the end, so the two never write the same place). A segment file
        left shorter than its size (truncated) gets its size back."""
        with self._lock:
            pos = offset * UNIT
            view = memoryview(units)
            while len(view):
                seg = self.segments.find(pos)
                if seg is None:
                    raise ValueError(f"{self.topic}/{self.queue_id}: no segment holds queue offset {pos // UNIT}")
                room = seg.start + self.file_size - pos
                chunk = view[:room]
                seg.write_at(pos - seg.start, chunk)
                path = getattr(seg, "path", None)
                if path is not None and os.path.getsize(path) < self.file_size:
                    os.truncate(path, self.file_size)
                pos += len(chunk)
                view = view[len(chunk) :]

    def segment_range(self, offset: int) -> tuple[int, int]:
        """Queue offsets [first, end) of the segment holding ``offset`` (end capped at the queue's end)."""
        seg = self.segments.find(offset * UNIT)
        if seg is None:
            return offset, offset
        return max(seg.start // UNIT, self.min_offset), min((seg.start + self.file_size) // UNIT, self.max_offset)

    def iter_units(self, start: int) -> Iterator[tuple[int, int, int, int]]:
        """(queue offset, phy, size, tag) from ``start`` to the end."""
        off = max(start, self.min_offset)
        end = self.max_offset
        while off < end:
            batch = self.units(off, 4096)
            if not batch:
                break
            for phy, size, tag in batch:
                yield off, phy, size, tag
                off += 1

    def last_unit_phy(self, seg: Segment) -> int:
        pos = seg.wrote - UNIT
        if pos < 0:
            return -1
        raw = seg.read(pos, UNIT)
        if len(raw) < UNIT:
            return -1
        phy: int = _UNIT.unpack(raw)[0]
        return phy

    # ------------------------------------------------------------------ maintenance

    def truncate_dirty(self, phy_end: int) -> None:
        """Drop units pointing at or past the recovered commit-log end."""
        if self.max_phy_offset <= phy_end:
            return  # units lie in phy order: the last real one ends before the end, so all do
        with self._lock:
            segs = self.segments.segments
            cut = None
            for seg in reversed(segs):
                units = np.frombuffer(_whole_units(seg.read(0, seg.wrote)), dtype=UNIT_DTYPE) if seg.wrote else np.empty(0, UNIT_DTYPE)
                real = ~((units["phy"] == 0) & (units["size"] == FILLER_SIZE))
                bad = (units["phy"] >= phy_end) & real
                if not bad.any():
                    cut = seg.start + seg.wrote if cut is None else cut
                    break
                first_bad = int(np.argmax(bad))
                cut = seg.start + first_bad * UNIT
                if first_bad > 0:
                    break
            if cut is None:
                return
            if cut < self.segments.max_wrote_offset():
                self.segments.truncate_dirty(cut)
                self.segments.set_positions_after_recovery(cut)
            self.max_phy_offset = -1
            for seg in reversed(self.segments.segments):
                if seg.wrote:
                    units = np.frombuffer(_whole_units(seg.read(0, seg.wrote)), dtype=UNIT_DTYPE)
                    real = np.nonzero(~((units["phy"] == 0) & (units["size"] == FILLER_SIZE)))[0]
                    if len(real):
                        u = units[real[-1]]
                        self.max_phy_offset = int(u["phy"]) + int(u["size"])
                        break
            if self.segments.last() is None:
                self.min_logic_offset = 0
            self.first_phy = -1 if self.max_phy_offset < 0 else self.UNKNOWN
            if self.on_write is not None:
                self.on_write(self)

    def correct_min_offset(self, cl_min: int) -> None:
        """Move the min offset to the first real unit whose data is still in the commit log
        (nothing is read when the first unit known is: the cleaner's pass over 100,000 queues
        then costs a comparison each)."""
        if self.first_phy >= cl_min:
            return
        with self._lock:
            if self.segments.max_wrote_offset() <= self.min_logic_offset:
                return
            for seg in self.segments.segments:
                if seg.wrote == 0 or seg.start + seg.wrote <= self.min_logic_offset:
                    continue
                lo = max(0, self.min_logic_offset - seg.start)
                units = np.frombuffer(_whole_units(seg.read(lo, seg.wrote - lo)), dtype=UNIT_DTYPE)
                # a zeroed unit is damage, not a unit whose record is gone: the min stops there
                # and a read writes it again from the commit log (unit_repair.py)
                damaged = (units["phy"] == 0) & (units["size"] == 0)
                ok = ((units["phy"] >= cl_min) & (units["size"] != FILLER_SIZE) & (units["size"] > 0)) | damaged
                if ok.any():
                    at = int(np.argmax(ok))
                    self.min_logic_offset = seg.start + lo + at * UNIT
                    self.first_phy = int(units["phy"][at])
                    break
            else:
                self.min_logic_offset = self.segments.max_wrote_offset()
                self.first_phy = -1
        self._changed()

    def _changed(self) -> None:
        if self.on_write is not None:
            self.on_write(self)

    def delete_expired(self, cl_min: int) -> int:
        return self.segments.delete_expired_by_offset(cl_min, self.last_unit_phy)

    def flush(self, least_pages: int) -> bool:
        return self.segments.flush(least_pages)

    def flush_all(self) -> None:
        for seg in self.segments.segments:
            seg.flush(0)
        last = self.segments.last()
        if last is not None:
            self.segments.flushed_where = last.start + last.wrote

    def destroy(self) -> None:
        self.segments.destroy_all()
        self.max_phy_offset = -1
        self.min_logic_offset = 0
        self.first_phy = -1

    def close(self) -> None:
        self.segments.close()

    def offset_by_time(self, timestamp: int, upper: bool, store_time_at: Callable[[int, int], int | None]) -> int:
        """Binary search on store timestamps (monotone with queue offset).

        LOWER: earliest unit with time ≥ t; UPPER: latest unit with time ≤ t; clamped to
        [min, max]. ``store_time_at(phy, size)`` reads a record's store time, None if deleted.
        """
        lo, hi = self.min_offset, self.max_offset - 1
        if hi < lo:
            return self.min_offset
        # skip units whose data is gone
        while lo <= hi:
            u = self.unit(lo)
            if u is not None and not is_filler(u[0], u[1]) and store_time_at(u[0], u[1]) is not None:
                break
            lo += 1
        if lo > hi:
            return self.max_offset
        result = None
        a, b = lo, hi
        while a <= b:
            mid = (a + b) // 2
            u = self.unit(mid)
            t = store_time_at(u[0], u[1]) if u else None
            if t is None:
                a = mid + 1
                continue
            if upper:
                if t <= timestamp:
                    result = mid
                    a = mid + 1
                else:
                    b = mid - 1
            else:
                if t >= timestamp:
                    result = mid
                    b = mid - 1
                else:
                    a = mid + 1
        if result is None:
            return lo if upper else self.max_offset
        return result
