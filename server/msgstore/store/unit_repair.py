"""Consume-queue units written again from the commit log when they are found damaged.

A consume queue is derived data (docs/store-format.md §3.1, §8): every unit says where one
record of the queue lies in the commit log, and that record itself names its topic, queue and
queue offset. So a unit that points at no record, or at another record (a flipped byte, a
zeroed page), or a segment file cut short, is no reason to lose a message: the read path finds
it, and the records that belong there are looked for in the stretch of the commit log between
the neighbouring good units (each record's queue offset says which unit it is), and the units
written again. Only what the commit log no longer holds stays missing (and is skipped, as
before). RocketMQ truncates a consume queue at its first bad unit and re-dispatches from the
checkpoint; a damaged unit in the middle of a queue is read as is there.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..record import codec
from .consume_queue import UNIT
from .schedule_units import SCHEDULE_TOPIC, level_delay_ms

if TYPE_CHECKING:
    from .commitlog import CommitLog
    from .consume_queue import ConsumeQueue

log = logging.getLogger(__name__)

NEIGHBOURS = 64  # how far to look for a good unit on either side of the damage
_HEADER = struct.Struct(">iiiiiq")  # TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET
_UNIT = struct.Struct(">qiq")


def record_matches(header: bytes | memoryview, size: int, queue_id: int, queue_offset: int) -> bool:
    """A record's header names the unit that points at it (size, magic, queue id and offset)."""
    if len(header) < _HEADER.size:
        return False
    total, magic, _crc, qid, _flag, qoff = _HEADER.unpack_from(header, 0)
    return total == size and magic in (codec.MAGIC_V1, codec.MAGIC_V2) and qid == queue_id and qoff == queue_offset


class UnitRepair:
    def __init__(self, commitlog: CommitLog, delay_levels_ms: Callable[[], Sequence[int]] = lambda: ()):
        self.commitlog = commitlog
        self.delay_levels_ms = delay_levels_ms  # (a delay level's units hold due times: schedule_units.py)
        self.repaired = 0  # units written again (figures)
        self._lock = threading.Lock()
        self._hopeless: set[tuple[str, int, int]] = set()  # (topic, queue, offset) whose record is not in the log

    def _good(self, cq: ConsumeQueue, offset: int) -> tuple[int, int] | None:
        """(phy, size) of the unit at ``offset`` when it points at its own record."""
        unit = cq.unit(offset)
        if unit is None:
            return None
        phy, size, _tag = unit
        if size <= 0:
            return None
        raw = self.commitlog.read_record(phy)
        if raw is None or not record_matches(raw, size, cq.queue_id, offset):
            return None
        return phy, size

    def repair(self, cq: ConsumeQueue, first: int, end: int) -> int:
        """Write units [first, end) of ``cq`` again from the records the commit log holds for
        them; returns how many were written (0: nothing found, and not looked for again)."""
        with self._lock:
            first = max(first, cq.min_offset)
            end = min(end, cq.max_offset)
            if first >= end or all((cq.topic, cq.queue_id, o) in self._hopeless for o in range(first, end)):
                return 0
            lo = max(self.commitlog.min_offset, 0)
            for k in range(first - 1, max(cq.min_offset, first - NEIGHBOURS) - 1, -1):
                good = self._good(cq, k)
                if good is not None:
                    lo = good[0] + good[1]
                    break
            hi = self.commitlog.max_offset
            for k in range(end, min(cq.max_offset, end + NEIGHBOURS)):
                good = self._good(cq, k)
                if good is not None:
                    hi = good[0]
                    break
            found = self._records_of(cq, first, end, lo, hi)
            for offset, unit in sorted(found.items()):
                cq.rewrite(offset, unit)
            missing = [o for o in range(first, end) if o not in found]
            self._hopeless.update((cq.topic, cq.queue_id, o) for o in missing)
            self.repaired += len(found)
            log.warning(
                "consume queue %s/%d: units %d..%d were damaged; %d written again from the commit log (%d..%d)%s",
                cq.topic,
                cq.queue_id,
                first,
                end - 1,
                len(found),
                lo,
                hi,
                f", {len(missing)} whose records it no longer holds skipped" if missing else "",
            )
            return len(found)

    def _records_of(self, cq: ConsumeQueue, first: int, end: int, lo: int, hi: int) -> dict[int, bytes]:
        """Units for the records of ``cq`` with queue offsets in [first, end) found in [lo, hi)."""
        out: dict[int, bytes] = {}
        pos = lo
        segments = self.commitlog.segments
        while pos < hi and len(out) < end - first:
            raw = self.commitlog.read_record(pos)
            if raw is None:  # the blank at a segment's end, or damage: the next segment
                seg = segments.find(pos)
                if seg is None:
                    nxt = next((s for s in segments.segments if s.start > pos), None)
                    if nxt is None:
                        break
                    pos = nxt.start
                else:
                    pos = seg.start + seg.size
                continue
            d = codec.dispatch_record(raw, 0, pos)
            if d.topic == cq.topic and d.queue_id == cq.queue_id and first <= d.queue_offset < end:
                tag = d.store_timestamp + level_delay_ms(d.queue_id, self.delay_levels_ms()) if d.topic == SCHEDULE_TOPIC else d.tags_code
                out[d.queue_offset] = _UNIT.pack(pos, d.size, tag)
            pos += len(raw)
        assert all(len(u) == UNIT for u in out.values())
        return out
