"""Getting the commit log and consume queues onto disk (STORE_SPEC §5).

SYNC_FLUSH: puts wait for a single group-commit flusher that serves all waiting puts at once,
so throughput grows with the number of concurrent producers. ASYNC_FLUSH: a timed flusher.
With a write buffer, a committer copies buffered appends into the file first.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, TYPE_CHECKING

from .service import ServiceThread

if TYPE_CHECKING:
    from .store import MessageStore

log = logging.getLogger(__name__)


def flush_commitlog(store: "MessageStore", least_pages: int) -> bool:
    """Flush segment after segment until nothing moves; True when something was flushed."""
    queue = store.commitlog.segments
    moved = False
    t0 = time.perf_counter()
    for _ in range(len(queue.segments) + 1):
        if queue.flush(least_pages):
            break
        moved = True
    if moved:
        if queue.store_timestamp:
            store.checkpoint.physic_msg_timestamp = queue.store_timestamp
        elapsed = time.perf_counter() - t0
        for observe in store.flush_observers:
            observe(elapsed)
    return moved


class FlushRequest:
    __slots__ = ("end", "event", "ok", "_callbacks", "_lock")

    def __init__(self, end: int):
        self.end = end
        self.event = threading.Event()
        self.ok = False
        self._callbacks: list[Callable[["FlushRequest"], None]] = []
        self._lock = threading.Lock()

    def wait(self, timeout_s: float) -> bool:
        return self.event.wait(timeout_s) and self.ok

    def add_done_callback(self, fn: Callable[["FlushRequest"], None]) -> None:
        """Call ``fn`` (on the flush thread) once the flush is done; at once if it already is.
        Lets an event loop await a flush without parking a thread on ``wait``."""
        with self._lock:
            if not self.event.is_set():
                self._callbacks.append(fn)
                return
        fn(self)

    def done(self, ok: bool) -> None:
        with self._lock:
            self.ok = ok
            self.event.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(self)


class GroupCommitService(ServiceThread):
    name = "group-commit"

    def __init__(self, store: "MessageStore"):
        super().__init__()
        self.store = store
        self._cond = threading.Condition()
        self._pending: list[FlushRequest] = []

    def request(self, end_offset: int) -> FlushRequest:
        req = FlushRequest(end_offset)
        with self._cond:
            self._pending.append(req)
            self._cond.notify()
        return req

    def cycle(self) -> None:
        with self._cond:
            if not self._pending and not self.stopped:
                # Wake every 10 ms anyway: puts with WAIT=false are flushed without a request.
                self._cond.wait(0.01)
            reqs, self._pending = self._pending, []
        self._flush(reqs)

    def _flush(self, reqs: list[FlushRequest]) -> None:
        moved = flush_commitlog(self.store, 0)
        flushed = self.store.commitlog.flushed_offset
        for r in reqs:
            r.done(flushed >= r.end)
        if moved:
            self.store.dispatcher.wakeup()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopped.set()
            self._cond.notify_all()
        super().stop(timeout)

    def on_stop(self) -> None:
        with self._cond:
            reqs, self._pending = self._pending, []
        self._flush(reqs)


class RealTimeFlushService(ServiceThread):
    name = "flush-commitlog"

    def __init__(self, store: "MessageStore"):
        super().__init__()
        self.store = store
        self._last_thorough = time.monotonic()

    def cycle(self) -> None:
        cfg = self.store.config
        self.wait(cfg.flushIntervalCommitLog / 1000)
        least = cfg.flushCommitLogLeastPages
        now = time.monotonic()
        if now - self._last_thorough >= cfg.flushCommitLogThoroughInterval / 1000:
            self._last_thorough = now
            least = 0
        flush_commitlog(self.store, least)

    def on_stop(self) -> None:
        flush_commitlog(self.store, 0)


class CommitService(ServiceThread):
    """Copies write-buffer contents into the commit-log files (transientStorePoolEnable)."""

    name = "commit-commitlog"

    def __init__(self, store: "MessageStore"):
        super().__init__()
        self.store = store
        self._last_thorough = time.monotonic()

    def cycle(self) -> None:
        cfg = self.store.config
        self.wait(cfg.commitIntervalCommitLog / 1000)
        least = cfg.commitCommitLogLeastPages
        now = time.monotonic()
        if now - self._last_thorough >= cfg.commitCommitLogThoroughInterval / 1000:
            self._last_thorough = now
            least = 0
        if commit_all(self.store, least):
            self.store.dispatcher.wakeup()
            flusher = self.store.flusher
            if flusher is not None:
                flusher.wakeup()

    def on_stop(self) -> None:
        commit_all(self.store, 0)


def commit_all(store: "MessageStore", least_pages: int) -> bool:
    queue = store.commitlog.segments
    moved = False
    for _ in range(len(queue.segments) + 1):
        if queue.commit(least_pages):
            break
        moved = True
    return moved


class ConsumeQueueFlushService(ServiceThread):
    """Flushes consume queues and then the checkpoint, once a second."""

    name = "flush-consumequeue"

    def __init__(self, store: "MessageStore"):
        super().__init__()
        self.store = store
        self._last_thorough = time.monotonic()

    def cycle(self) -> None:
        cfg = self.store.config
        self.wait(cfg.flushIntervalConsumeQueue / 1000)
        least = cfg.flushConsumeQueueLeastPages
        now = time.monotonic()
        if now - self._last_thorough >= cfg.flushConsumeQueueThoroughInterval / 1000:
            self._last_thorough = now
            least = 0
        self.flush(least)

    def flush(self, least_pages: int) -> None:
        store = self.store
        logics_ts = store.dispatcher.logics_timestamp
        for cq in store.consume_queues():
            try:
                for _ in range(len(cq.segments.segments) + 1):
                    if cq.flush(least_pages):
                        break
            except ValueError:  # destroyed meanwhile
                continue
        if logics_ts:
            store.checkpoint.logics_msg_timestamp = logics_ts
        store.checkpoint.flush()

    def on_stop(self) -> None:
        self.flush(0)
