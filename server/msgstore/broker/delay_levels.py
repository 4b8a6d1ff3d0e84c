"""RocketMQ 4's delay levels (its ScheduleMessageService): queue n-1 of ``SCHEDULE_TOPIC_XXXX``
holds the messages of level n in the order they were stored, so they come due in that order,
and each level needs only a cursor: the next queue offset to deliver, kept in
``config/delayOffset.json`` (``{"offsetTable": {"1": 17, ...}}``; RocketMQ writes the same
table with bare numbers as keys and a ``dataVersion``, both read, the latter written back).

A message is due ``messageDelayLevel[n-1]`` after its store time. The cursor is saved after
the delivery it covers, so a crash (or a failover: a follower holds the copy it last fetched)
delivers at most the messages since the last save again, never loses one.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator

import numpy as np

from ..record.codec import Message, StoredMessage
from ..store import MessageStore
from ..store.config import StoreConfig
from ..store.layout import DELAY_OFFSET
from ..store.metadata import read_json
from ..store.schedule_units import LEGACY_MAX
from .delivery import deliver, restored
from .progress_file import ProgressFile
from .queue_reading import read_batch
from .system_topics import SCHEDULE_TOPIC

log = logging.getLogger(__name__)

FILE = DELAY_OFFSET
BATCH = 256


class DelayLevelService(ProgressFile):
    def __init__(self, store: MessageStore, settings: Callable[[], StoreConfig]):
        self.store = store
        self.settings = settings
        self.path = os.path.join(store.layout.config_dir, FILE)
        self.offsets: dict[int, int] = {}  # level → the next queue offset to deliver
        self._kept: dict[str, object] = {}  # what else the file held (RocketMQ's dataVersion), written back
        self.lock = threading.Lock()
        self.dirty = False
        self.delivered = 0
        self._head_due: dict[int, tuple[int, int]] = {}  # level → (its cursor, when the message there is due)
        self._levels_seen: tuple[int, ...] = ()

    # ------------------------------------------------------------------ progress

    def load(self) -> None:
        doc = read_json(self.path)
        table = doc.get("offsetTable", {}) if isinstance(doc, dict) else {}
        with self.lock:
            self.offsets = {int(k): int(v) for k, v in table.items()}
            self._kept = {k: v for k, v in doc.items() if k != "offsetTable"} if isinstance(doc, dict) else {}
            self.dirty = False
            self._head_due = {}

    def state_json(self) -> str:
        with self.lock:
            doc = {**self._kept, "offsetTable": {str(k): v for k, v in sorted(self.offsets.items())}}
            return json.dumps(doc, separators=(",", ":"))

    # ------------------------------------------------------------------ delivery

    def pending(self) -> int:
        levels = self.settings().delay_levels_ms
        return sum(max(0, self.store.max_offset(SCHEDULE_TOPIC, n - 1) - self._cursor(n)) for n in range(1, len(levels) + 1))

    def _cursor(self, level: int) -> int:
        return max(self.offsets.get(level, 0), self.store.min_offset(SCHEDULE_TOPIC, level - 1))

    def lowest_pending_phy(self) -> int | None:
        """The commit-log offset of the oldest message not delivered yet (retention keeps it)."""
        lowest = None
        for level in range(1, len(self.settings().delay_levels_ms) + 1):
            cq = self.store.consume_queue(SCHEDULE_TOPIC, level - 1)
            if cq is None:
                continue
            at = self._cursor(level)
            if at < cq.max_offset and (unit := cq.unit(at)) is not None and (lowest is None or unit[0] < lowest):
                lowest = unit[0]
        return lowest

    def run_due(self, now_ms: int) -> int | None:
        """Deliver every message due by ``now_ms``; ms until the next one is due (None: none
        waits, or the store refused the delivery: try again soon)."""
        levels = self.settings().delay_levels_ms
        if levels != self._levels_seen:  # (a due time is corrected by its level's delay)
            self._head_due.clear()
            self._levels_seen = levels
        wait: int | None = None
        for level in range(1, len(levels) + 1):
            head = self._head_due.get(level)
            if head is not None and head[0] == self.offsets.get(level, 0) and now_ms < head[1] <= now_ms + levels[level - 1]:
                left: int | None = head[1] - now_ms  # (its first pending message is not due: nothing to read)
            else:
                self._head_due.pop(level, None)
                left = self._run_level(level, levels[level - 1], now_ms)
            if left is not None and (wait is None or left < wait):
                wait = left
        return wait

    def waits_on(self, level: int) -> bool:
        """The level's first pending message and its due time are known: one stored after it is
        due later (a level's messages come due in queue order), so its arrival changes nothing."""
        return level in self._head_due

    def _run_level(self, level: int, delay_ms: int, now_ms: int) -> int | None:
        qid = level - 1
        store = self.store
        at = self._cursor(level)
        if at > self.offsets.get(level, 0) and self.offsets.get(level, 0) < store.max_offset(SCHEDULE_TOPIC, qid):
            log.error(
                "delay level %d: messages %d to %d were deleted before their time: not delivered", level, self.offsets.get(level, 0), at - 1
            )
            self._advance(level, at)
        cq = store.consume_queue(SCHEDULE_TOPIC, qid)
        while cq is not None and at < cq.max_offset:
            units = cq.units_array(at, BATCH)
            wanted, legacy = _due_units(units, delay_ms, now_ms)
            if wanted == 0:
                return self._not_due(level, at, int(units["tag"][0]), now_ms)
            stored, next_offset = read_batch(store, SCHEDULE_TOPIC, qid, at, wanted)
            if not stored:
                if next_offset <= at:
                    return 1000  # not readable yet (a unit ahead of its record): look again soon
                log.error(
                    "delay level %d: messages %d to %d are gone before their time (deleted under disk pressure): not delivered",
                    level,
                    at,
                    next_offset - 1,
                )
                self._advance(level, next_offset)
                at = next_offset
                continue
            due = [m for m in stored if m.queue_offset < at + wanted]
            if not due:  # (the read passed over messages gone: those it returned are not known due)
                log.error("delay level %d: messages %d to %d are gone before their time: not delivered", level, at, at + wanted - 1)
                self._advance(level, at + wanted)
                at += wanted
                continue
            if legacy:  # units written before issue 33 hold no due time: the store time says it
                due = list(itertools.takewhile(lambda m: m.store_timestamp + delay_ms <= now_ms, due))
                if not due:
                    return self._not_due(level, at, stored[0].store_timestamp + delay_ms, now_ms)
            out = [(m, restored(m)) for m in due]
            done = deliver(store, [r for _m, r in out if r is not None])
            if not all(done):
                kept = sum(1 for _ in _leading_true(out, done))
                self._advance(level, at + kept)
                return 1000
            self.delivered += len(done)
            at = due[-1].queue_offset + 1
            self._advance(level, at)
        return None

    def _not_due(self, level: int, at: int, due_ms: int, now_ms: int) -> int:
        """The level's first pending message (at ``at``) is due at ``due_ms``, later than now:
        remembered, so that nothing of the level is read again before then. ms until then."""
        self._head_due[level] = (at, due_ms)
        return due_ms - now_ms

    def _advance(self, level: int, offset: int) -> None:
        with self.lock:
            if self.offsets.get(level, 0) != offset:
                self.offsets[level] = offset
                self.dirty = True


def _due_units(units: np.ndarray, delay_ms: int, now_ms: int) -> tuple[int, bool]:
    """How many of a level's ``units`` (from its cursor on) are due by the due times they hold,
    and whether they hold none: then ``(n, True)`` for the run of n units written before issue
    33, whose messages' store times decide. A due time more than the level's delay away is due
    now (RocketMQ's ``correctDeliverTimestamp``: the clock went back, or the level was
    shortened). ``(1, True)`` when no unit is readable there (the read says why)."""
    if not len(units):
        return 1, True  # (the read repairs the unit or says why: the message's store time decides)
    due_at = units["tag"].astype(np.int64)
    legacy = due_at <= LEGACY_MAX
    if legacy[0]:
        return (len(units) if legacy.all() else int(np.argmin(legacy))), True
    due_at = np.where(due_at > now_ms + delay_ms, now_ms, due_at)
    stop = np.flatnonzero((due_at > now_ms) | legacy)
    return (int(stop[0]) if len(stop) else len(units)), False


def _leading_true(out: list[tuple[StoredMessage, Message | None]], done: list[bool]) -> Iterator[bool]:
    """The messages of ``out`` delivered before the first one that was not (unrestorable ones
    count as delivered: there is nothing to deliver)."""
    it = iter(done)
    for _m, r in out:
        if r is None:
            yield True
            continue
        if not next(it):
            return
        yield True
