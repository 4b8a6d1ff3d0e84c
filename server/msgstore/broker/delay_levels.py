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

from ..record.codec import Message, StoredMessage
from ..store import MessageStore
from ..store.config import StoreConfig
from ..store.layout import DELAY_OFFSET
from ..store.metadata import read_json
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

    # ------------------------------------------------------------------ progress

    def load(self) -> None:
        doc = read_json(self.path)
        table = doc.get("offsetTable", {}) if isinstance(doc, dict) else {}
        with self.lock:
            self.offsets = {int(k): int(v) for k, v in table.items()}
            self._kept = {k: v for k, v in doc.items() if k != "offsetTable"} if isinstance(doc, dict) else {}
            self.dirty = False

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
        wait: int | None = None
        for level in range(1, len(levels) + 1):
            left = self._run_level(level, levels[level - 1], now_ms)
            if left is not None and (wait is None or left < wait):
                wait = left
        return wait

    def _run_level(self, level: int, delay_ms: int, now_ms: int) -> int | None:
        qid = level - 1
        store = self.store
        at = self._cursor(level)
        if at > self.offsets.get(level, 0) and self.offsets.get(level, 0) < store.max_offset(SCHEDULE_TOPIC, qid):
            log.error(
                "delay level %d: messages %d to %d were deleted before their time: not delivered", level, self.offsets.get(level, 0), at - 1
            )
            self._advance(level, at)
        while at < store.max_offset(SCHEDULE_TOPIC, qid):
            stored, next_offset = read_batch(store, SCHEDULE_TOPIC, qid, at, BATCH)
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
            due = list(itertools.takewhile(lambda m: m.store_timestamp + delay_ms <= now_ms, stored))  # in queue order
            out = [(m, restored(m)) for m in due]
            done = deliver(store, [r for _m, r in out if r is not None])
            if not all(done):
                kept = sum(1 for _ in _leading_true(out, done))
                self._advance(level, at + kept)
                return 1000
            self.delivered += len(done)
            at = stored[len(due) - 1].queue_offset + 1 if due else at
            self._advance(level, at)
            if len(due) < len(stored):
                return stored[len(due)].store_timestamp + delay_ms - now_ms
        return None

    def _advance(self, level: int, offset: int) -> None:
        with self.lock:
            if self.offsets.get(level, 0) != offset:
                self.offsets[level] = offset
                self.dirty = True


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
