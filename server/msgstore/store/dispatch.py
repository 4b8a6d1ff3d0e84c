"""Turning commit-log records into consume-queue units and index entries (docs/store-format.md §6).

The dispatcher follows the commit log in order up to a bound (the max offset under
ASYNC_FLUSH, the flushed offset under SYNC_FLUSH, so consumers never see unflushed messages in
sync mode). The put path leaves a *hint* per batch, the fields it already knows, so the common
case needs no re-parsing; anything without a hint (recovery, a dropped hint) is parsed from the
commit log. Dispatch is idempotent: consume queues skip units they already hold and the index
skips records below its last offset.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from ..record import codec
from .commitlog import CommitLog
from .config import StoreConfig
from .consume_queue import ConsumeQueue
from .index import IndexService
from .queue_table import QueueTable
from .results import Unavailable
from .running_flags import RunningFlags
from .schedule_units import SCHEDULE_TOPIC, deliver_times
from .service import ServiceThread

log = logging.getLogger(__name__)

MAX_HINTS = 65536
PARSE_CHUNK = 4096  # records parsed per dispatch step
# A hint of at most this many messages is applied without numpy: for a lone message numpy's
# per-call costs were most of its dispatch, on the event loop, between a send and the next.
SMALL_HINT = 8
# seconds between looks at the commit log for appends that woke nobody (Dispatcher.cycle): every
# append path wakes the dispatcher or dispatches itself, so the poll is a safety net; at 1 ms
# its wake-ups were half of an idle node's CPU, and with the sends it raced (below) 7-10 % of
# the CPU of a node taking 5,000 sends a second
POLL_INTERVAL = 0.010


@dataclass(slots=True)
class Hint:
    """What the put path knows about a batch it just appended."""

    phy: int
    end: int
    topic: str
    queue_id: int
    queue_offset: int
    store_timestamp: int
    sizes: list[int]
    tags_codes: list[int]
    key_hashes: list[int]
    key_owner: list[int]
    sys_flags: list[int]
    takes_offset: list[bool]

    @property
    def count_offsets_all(self) -> bool:
        return all(self.takes_offset)


ArrivalListener = Callable[[str, int, int], None]


class IndexFileError(OSError):
    """Writing (or creating) an index file failed; the store reports INDEX_FILE_ERROR rather
    than a consume-queue error, so an operator looks at the right files."""


def _index_add(index: IndexService, *columns: np.ndarray) -> None:
    try:
        index.add(*columns)
    except OSError as e:
        raise IndexFileError(e.errno, f"index: {e.strerror or e}") from e


class Dispatcher(ServiceThread):
    name = "dispatch"

    def __init__(
        self, commitlog: CommitLog, queues: QueueTable, index: IndexService, flags: RunningFlags, settings: Callable[[], StoreConfig]
    ):
        super().__init__()
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.flags = flags
        self.settings = settings
        self.reput_from = 0
        self.logics_timestamp = 0
        self._hints: collections.deque[Hint] = collections.deque()
        self._hint_lock = threading.Lock()
        self.listeners: list[ArrivalListener] = []
        self._idle = threading.Condition()
        self.failures = 0
        self._running = threading.Lock()  # held while dispatching: truncation waits for it (paused())
        # replication (ha/): a SYNC master dispatches only what its in-sync followers hold, a
        # follower only what its master confirmed; None = no bound beyond the log's own
        self.limit: Callable[[], int | None] | None = None
        self._waiting_at = -1  # where dispatch last waited for an unreadable record
        self._polled = 0  # the bound the last poll saw (Dispatcher.cycle)

    # ------------------------------------------------------------------ hints

    def add_hint(self, hint: Hint) -> None:
        with self._hint_lock:
            if len(self._hints) >= MAX_HINTS:
                self._hints.clear()  # far behind: parse from the commit log instead
            self._hints.append(hint)

    def clear_hints(self) -> None:
        with self._hint_lock:
            self._hints.clear()

    def _hint_at(self, offset: int, bound: int) -> Hint | None:
        with self._hint_lock:
            hints = self._hints
            while hints and hints[0].phy < offset:
                hints.popleft()
            if hints and hints[0].phy == offset and hints[0].end <= bound:
                return hints.popleft()
        return None

    # ------------------------------------------------------------------ the loop

    def bound(self) -> int:
        cl = self.commitlog
        end = min(cl.flushed_offset, cl.max_offset) if self.settings().flushDiskType == "SYNC_FLUSH" else cl.max_offset
        limit = self.limit() if self.limit is not None else None
        return end if limit is None else min(end, limit)

    @property
    def behind_bytes(self) -> int:
        return max(0, self.bound() - self.reput_from)

    def cycle(self) -> None:
        """Woken (a send, a store put, a replicated chunk, a flush, a report that moves the
        bound), dispatch at once. On a poll, dispatch (up to the bound, as always) only when
        something the previous poll saw below the bound is still not dispatched. What a send
        appended is dispatched by that send's own path: on the event loop after its answer
        (:meth:`dispatch_here`), else by the wakeup it then makes. A poll that got there first
        took the GIL from the loop on its way to that dispatch, and left the arrival's long
        polls to a hand-off from this thread (at 5,000 sends a second a 1 ms poll took a sixth
        of them). So the polls take only what nobody took within an interval: an append or a
        bound move that woke nobody waits at most two."""
        if self.wait(POLL_INTERVAL) or self._left_a_poll():
            self.dispatch_available()

    def _left_a_poll(self) -> bool:
        """Whether anything below the bound the previous poll saw is still not dispatched; the
        bound seen now is remembered for the next poll."""
        seen, self._polled = self._polled, self.bound()
        return self.reput_from < min(seen, self._polled)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No dispatch while the block runs (the commit log's end is being moved back)."""
        with self._running:
            yield

    def dispatch_available(self) -> None:
        try:
            with self._running:
                self._dispatch_to(self.bound())
            if self.failures:
                self.failures = 0
                self.flags.clear(Unavailable.LOGICS_QUEUE_ERROR)
                self.flags.clear(Unavailable.INDEX_FILE_ERROR)
        except OSError as e:
            # A full disk while writing a queue or the index: refuse writes, retry later from
            # the same offset (dispatch is idempotent).
            self.failures += 1
            log.error("dispatch failed at %d: %s", self.reput_from, e)
            self.flags.mark(
                Unavailable.INDEX_FILE_ERROR if isinstance(e, IndexFileError) else Unavailable.LOGICS_QUEUE_ERROR,
                f"{e} (dispatch retries from commit-log offset {self.reput_from})",
            )
            self._stopped.wait(min(1.0, 0.05 * self.failures))
        with self._idle:
            self._idle.notify_all()

    def dispatch_here(self, most: int) -> bool:
        """Dispatch in the caller's thread (the event loop, after a send's answer) when at most
        ``most`` bytes wait and the dispatcher thread is not at work: a consumer keeping up with
        a trickle is then woken with no hand-off to this thread and back (two thread switches
        per arrival on a machine whose cores the producer and the consumer share). False when
        left to the thread: more waits, a bound holds some back, the thread is dispatching, or
        the last try failed."""
        if self.failures or not self._running.acquire(blocking=False):
            return False
        try:
            bound = self.bound()
            if bound < self.commitlog.max_offset or not 0 < bound - self.reput_from <= most:
                return False  # (held back by a bound, replication's or a flush's; or done by the thread already)
            self._dispatch_to(bound)
        except OSError:  # the thread retries it, and reports it
            return False
        except Exception:  # a bug must not fail the send stream (its answers): the thread retries
            log.exception("dispatch on the event loop failed at %d; left to the dispatcher thread", self.reput_from)
            return False
        finally:
            self._running.release()
        with self._idle:
            self._idle.notify_all()
        return self.reput_from >= bound

    def _dispatch_to(self, bound: int) -> None:
        cl = self.commitlog
        while self.reput_from < bound and not self.stopped:
            cl_min = cl.min_offset
            if self.reput_from < cl_min:
                log.warning("dispatcher fell behind deleted segments; jumping from %d to %d", self.reput_from, cl_min)
                self.reput_from = cl_min
                continue
            hint = self._hint_at(self.reput_from, bound)
            if hint is not None:
                self.apply_hint(hint)
                self.reput_from = hint.end
                continue
            if not self._dispatch_parsed(bound):
                break

    def _dispatch_parsed(self, bound: int) -> bool:
        """Parse records at ``reput_from``; False when nothing could be done (wait)."""
        got = self.commitlog.scan(self.reput_from, bound, PARSE_CHUNK)
        if got is None:
            return False
        next_offset = got.end
        if got.stop == "blank":  # the rest of this segment is empty
            next_offset = got.segment_end
        elif got.stop == "bad":
            if got.bad_size > 0:
                log.error("[BUG] record at %d has an inconsistent length; skipped", got.end)
                next_offset = got.end + got.bad_size
            elif got.segment_full:
                log.error("unreadable record at %d; skipping the rest of its segment", got.end)
                next_offset = got.segment_end
            elif got.end != self._waiting_at:  # said once per place (a follower's copy may end mid-record for a while)
                self._waiting_at = got.end
                log.error("unreadable record at %d; dispatch waits", got.end)
        if len(got.columns):
            self.apply_columns(got.columns)
        moved = next_offset != self.reput_from
        self.reput_from = next_offset
        return moved

    # ------------------------------------------------------------------ applying

    def apply_hint(self, h: Hint) -> None:
        cq = self.queues.get(h.topic, h.queue_id, create=True)
        assert cq is not None
        if len(h.sizes) <= SMALL_HINT and not h.key_hashes and h.topic != SCHEDULE_TOPIC:
            self._put_small_hint(cq, h)
        else:
            self._put_hint(cq, h)
        self.logics_timestamp = h.store_timestamp
        self._notify(h.topic, h.queue_id, cq.max_offset)

    def _put_hint(self, cq: ConsumeQueue, h: Hint) -> None:
        """A hint's units and index entries, column by column."""
        n = len(h.sizes)
        sizes = np.asarray(h.sizes, dtype=np.int64)
        phys = np.empty(n, dtype=np.int64)
        phys[0] = h.phy
        if n > 1:
            np.cumsum(sizes[:-1], out=phys[1:])
            phys[1:] += h.phy
        if h.topic == SCHEDULE_TOPIC:  # (a delay level's units hold due times)
            tags = deliver_times(h.queue_id, np.full(n, h.store_timestamp, dtype=np.int64), self.settings().delay_levels_ms)
        else:
            tags = np.asarray(h.tags_codes, dtype=np.int64)
        if h.count_offsets_all:
            cq.put_units(phys, sizes, tags, h.queue_offset)
        else:
            mask = np.asarray(h.takes_offset, dtype=bool)
            if mask.any():
                cq.put_units(phys[mask], sizes[mask], tags[mask], h.queue_offset)
        if h.key_hashes and self.settings().messageIndexEnable:
            owner = np.asarray(h.key_owner, dtype=np.int64)
            flags = np.asarray(h.sys_flags, dtype=np.int64)[owner]
            _index_add(
                self.index,
                np.asarray(h.key_hashes, dtype=np.int64),
                phys[owner],
                np.full(len(owner), h.store_timestamp, dtype=np.int64),
                flags,
            )

    @staticmethod
    def _put_small_hint(cq: ConsumeQueue, h: Hint) -> None:
        """A few messages without keys (a trickle's sends): their units without numpy."""
        units = []
        phy = h.phy
        for size, tag, takes in zip(h.sizes, h.tags_codes, h.takes_offset):
            if takes:
                units.append((phy, size, tag))
            phy += size
        if units:
            cq.put_few(units, h.queue_offset)

    def apply_columns(self, cols: codec.Columns, index: bool = True, units_from: int = 0) -> None:
        """Dispatch parsed records: consume-queue units per queue (for records from commit-log
        offset ``units_from`` on: recovery knows the queues hold the rest), index entries per key."""
        n = len(cols)
        if n == 0:
            return
        t = cols.sys_flags & codec.TRANSACTION_MASK
        idx = np.nonzero(((t == codec.TRANSACTION_NOT_TYPE) | (t == codec.TRANSACTION_COMMIT)) & (cols.phys >= units_from))[0]
        touched = []
        if len(idx):
            group_key = (cols.topic_ids[idx].astype(np.int64) << 32) | cols.queue_ids[idx].astype(np.int64) & 0xFFFFFFFF
            order = np.argsort(group_key, kind="stable")
            sorted_keys = group_key[order]
            bounds = np.flatnonzero(np.diff(sorted_keys)) + 1
            for sel in np.split(idx[order], bounds):
                topic = cols.topic_names[cols.topic_ids[sel[0]]]
                qid = int(cols.queue_ids[sel[0]])
                if codec.topic_error(topic) is not None or qid < 0:
                    log.error("record at %d has an illegal topic %r or queue %d; not dispatched", cols.phys[sel[0]], topic, qid)
                    continue
                cq = self.queues.get(topic, qid, create=True)
                assert cq is not None
                q = cols.queue_offsets[sel]
                if topic == SCHEDULE_TOPIC:  # (a delay level's units hold due times)
                    tags = deliver_times(qid, cols.store_timestamps[sel], self.settings().delay_levels_ms)
                else:
                    tags = cols.tags_codes[sel]
                breaks = np.flatnonzero(np.diff(q) != 1) + 1  # runs of consecutive queue offsets
                for run in np.split(np.arange(len(sel)), breaks):
                    r = sel[run]
                    cq.put_units(cols.phys[r], cols.sizes[r].astype(np.int64), tags[run], int(q[run[0]]))
                touched.append((topic, qid, cq))
        if index and len(cols.key_hashes) and self.settings().messageIndexEnable:
            owner = cols.key_owner
            _index_add(self.index, cols.key_hashes, cols.phys[owner], cols.store_timestamps[owner], cols.sys_flags[owner].astype(np.int64))
        self.logics_timestamp = int(cols.store_timestamps[-1])
        for topic, qid, cq in touched:
            self._notify(topic, qid, cq.max_offset)

    def _notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        for listener in self.listeners:
            try:
                listener(topic, queue_id, max_offset)
            except Exception:
                log.exception("arrival listener failed")

    def wait_dispatched(self, offset: int, timeout: float) -> bool:
        """Block until everything below ``offset`` is dispatched (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self.reput_from < offset:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.wakeup()
                self._idle.wait(min(left, 0.05))
        return True
