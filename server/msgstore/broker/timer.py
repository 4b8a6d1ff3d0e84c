"""Delivery at a time to the millisecond (RocketMQ 5's timer): messages wait in queue 0 of
``rmq_sys_wheel_timer`` in the order they were sent, and come due in the order of their
``TIMER_DELIVER_MS``.

RocketMQ keeps a timer log and a time wheel of one-second slots on disk. Here the pending
messages are a heap in memory, rebuilt at start (or at a promotion) by reading the queue from
its first message not yet done; each entry is one integer (delivery time and queue offset),
so a million pending messages take about 50 MiB. What is done (delivered, or recalled) is a
bitmap of queue offsets in ``config/timercheck`` (progress.py; RocketMQ's file of that name
holds its wheel's positions), saved every second: a crash or a failover redelivers at most
the messages done since the last save, and loses none.

A recall writes a marker to the same queue (``TIMER_DEL_UNIQKEY``, as RocketMQ 5.3 does), so
it replicates and survives a restart like the message it cancels.
"""

from __future__ import annotations

import datetime
import heapq
import json
import logging
import os
import threading
from collections.abc import Callable

from ..record.codec import Message, StoredMessage
from ..record.recall_handle import RecallHandle
from ..store import GetStatus, MessageStore, PutResult, PutStatus
from ..store.layout import TIMER_CHECK
from ..store.metadata import read_json
from .delivery import deliver, ensure_topic, restored
from .progress import DoneOffsets
from .progress_file import ProgressFile
from .queue_reading import batches_from, phy_of
from .system_topics import (
    PROP_REAL_QID,
    PROP_REAL_TOPIC,
    PROP_TIMER_DEL_UNIQKEY,
    PROP_TIMER_DELIVER_MS,
    PROP_TIMER_OUT_MS,
    PROP_UNIQ_KEY,
    TIMER_TOPIC,
)

log = logging.getLogger(__name__)

FILE = TIMER_CHECK
SHIFT = 1 << 40  # a heap entry: deliver_ms * SHIFT + queue offset
BATCH = 512  # due messages delivered per round
RECALL_KEPT_MS = 60_000  # a recall that met no message is forgotten this long after its time


class TooLate(Exception):
    """A recall of a message whose time has come (it is delivered, or being delivered)."""


class RecallFailed(Exception):
    """The store took no write for the recall's marker (full, fenced)."""


class TimerService(ProgressFile):
    def __init__(self, store: MessageStore):
        self.store = store
        self.path = os.path.join(store.layout.config_dir, FILE)
        self.lock = threading.Lock()
        self.done = DoneOffsets()
        self.heap: list[int] = []
        self.read_offset = 0  # the next queue offset to take into the heap
        # (topic, UNIQ_KEY) → (deliver ms, the marker's queue offset) of each recall, kept
        # RECALL_KEPT_MS past its time: every copy of that message on that topic stored before the
        # marker is cancelled (a retried send stores two), a message sent after it with the same id
        # is not (a reschedule), and the same id on another topic is another message (RocketMQ's
        # delete key: topic + UNIQ_KEY)
        self.recalled: dict[tuple[str, str], tuple[int, int]] = {}
        self.dirty = False
        self.delivered = 0

    # ------------------------------------------------------------------ progress

    def load(self) -> None:
        """Start over from the saved progress: the heap is rebuilt from the queue."""
        doc = read_json(self.path, strict=False)  # (its own: rebuilt when unreadable)
        with self.lock:
            self.done = DoneOffsets.decode(doc.get("progress", {})) if isinstance(doc, dict) else DoneOffsets()
            self.heap = []
            self.recalled = {}
            self.read_offset = self.done.below
            self.dirty = False

    def state_json(self) -> str:
        with self.lock:
            return json.dumps({"version": 1, "progress": self.done.encode()}, separators=(",", ":"))

    def pending(self) -> int:
        return len(self.heap) + max(0, self.store.max_offset(TIMER_TOPIC, 0) - self.read_offset)

    def lowest_pending_phy(self) -> int | None:
        with self.lock:
            first = self.done.first_pending()
        return phy_of(self.store, TIMER_TOPIC, 0, first)

    # ------------------------------------------------------------------ loading

    def _take_new(self) -> None:
        """Read the messages stored since the last look into the heap; markers recall."""
        for stored, after in batches_from(self.store, TIMER_TOPIC, 0, self.read_offset, BATCH):
            with self.lock:
                for m in stored:
                    off = m.queue_offset
                    props = m.properties
                    uniq = props.get(PROP_TIMER_DEL_UNIQKEY)
                    if uniq is not None:  # a recall (learnt again after every reload): nothing of its own to deliver
                        self.recalled[(props.get(PROP_REAL_TOPIC, ""), uniq)] = (_int(props.get(PROP_TIMER_DELIVER_MS)), off)
                        self._finish(off)
                        continue
                    if off in self.done:
                        continue
                    heapq.heappush(self.heap, _int(props.get(PROP_TIMER_DELIVER_MS)) * SHIFT + off)
                self.read_offset = after

    def _finish(self, offset: int) -> None:
        self.done.add(offset)
        self.dirty = True

    # ------------------------------------------------------------------ delivery

    def run_due(self, now_ms: int) -> int | None:
        """Deliver what is due by ``now_ms``; ms until the next one (None: none pending)."""
        self._take_new()
        while True:
            with self.lock:
                due: list[int] = []
                while self.heap and self.heap[0] // SHIFT <= now_ms and len(due) < BATCH:
                    due.append(heapq.heappop(self.heap))
            if not due:
                break
            try:
                delivered = self._deliver(due)
            except BaseException:
                with self.lock:  # nothing popped is forgotten (one delivered twice is better than one lost)
                    for entry in due:
                        if entry % SHIFT not in self.done:
                            heapq.heappush(self.heap, entry)
                raise
            if not delivered:
                return 1000
        with self.lock:
            stale = [k for k, (at, _marker) in self.recalled.items() if at < now_ms - RECALL_KEPT_MS]
            for k in stale:  # recalls that matched nothing (their message was delivered, or never existed)
                del self.recalled[k]
            if not self.heap:
                return None
            return max(0, self.heap[0] // SHIFT - now_ms)

    def _read(self, offsets: list[int]) -> dict[int, StoredMessage]:
        """The timer queue's messages at ``offsets``, one read per run of consecutive ones
        (messages due together were mostly sent together)."""
        found: dict[int, StoredMessage] = {}
        ordered = sorted(offsets)
        i = 0
        while i < len(ordered):
            j = i + 1
            while j < len(ordered) and ordered[j] == ordered[j - 1] + 1:
                j += 1
            at = ordered[i]
            while at < ordered[j - 1] + 1:  # (a read stops at its byte limit: go on from there)
                res = self.store.get_message(None, TIMER_TOPIC, 0, at, max_msgs=ordered[j - 1] + 1 - at)
                try:
                    got = res.messages() if res.status is GetStatus.FOUND else []
                finally:
                    res.release()
                if not got:
                    break
                found.update((m.queue_offset, m) for m in got)
                at = got[-1].queue_offset + 1
            i = j
        return found

    def _deliver(self, due: list[int]) -> bool:
        store = self.store
        out: list[tuple[int, Message | None]] = []
        read = self._read([entry % SHIFT for entry in due])
        for entry in due:
            off = entry % SHIFT
            m = read.get(off)
            if m is None:
                log.error("timer message at offset %d is gone (deleted under disk pressure?): not delivered", off)
                out.append((entry, None))
                continue
            with self.lock:
                marker = self.recalled.get((m.properties.get(PROP_REAL_TOPIC, ""), m.properties.get(PROP_UNIQ_KEY, "")))
                recalled = marker is not None and off < marker[1]  # (stored before the recall)
            out.append((entry, None if recalled else restored(m, {PROP_TIMER_OUT_MS: str(entry // SHIFT)})))
        messages = [r for _e, r in out if r is not None]
        done = iter(deliver(store, messages))
        ok = True
        with self.lock:
            for entry, r in out:
                if r is None or next(done):
                    self._finish(entry % SHIFT)
                    if r is not None:
                        self.delivered += 1
                else:
                    heapq.heappush(self.heap, entry)
                    ok = False
        return ok

    # ------------------------------------------------------------------ recall

    def recall(self, handle: RecallHandle, now_ms: Callable[[], int]) -> PutResult:
        """Cancel the timer message ``handle`` names, durably (a marker in the timer queue);
        the marker's put, for a caller that waits for followers to hold it."""
        with self.lock:
            if handle.deliver_ms <= now_ms():  # (read under the lock: a delivery cannot slip in between)
                when = datetime.datetime.fromtimestamp(handle.deliver_ms / 1000, datetime.UTC).isoformat(timespec="milliseconds")
                raise TooLate(f"its delivery time ({when}) has come")
            key = (handle.topic, handle.uniq_key)
            self.recalled[key] = (handle.deliver_ms, 1 << 62)  # (its offset once stored: below)
            marker = Message(
                TIMER_TOPIC,
                b"",
                0,
                properties={
                    PROP_TIMER_DEL_UNIQKEY: handle.uniq_key,
                    PROP_TIMER_DELIVER_MS: str(handle.deliver_ms),
                    PROP_REAL_TOPIC: handle.topic,
                    PROP_REAL_QID: "0",
                },
            )
            ensure_topic(self.store, TIMER_TOPIC, 1)
            res = self.store.put_messages(TIMER_TOPIC, 0, [marker])
            if not res.status.stored:
                self.recalled.pop(key, None)
                raise RecallFailed(f"{res.status.name} {res.reason}")
            self.recalled[key] = (handle.deliver_ms, res.queue_offset)
        if res.status is not PutStatus.PUT_OK:
            log.warning("recall of %s stored but not confirmed: %s", handle.uniq_key, res.status.name)
        return res


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0
