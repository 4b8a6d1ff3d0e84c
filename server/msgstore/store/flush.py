"""Getting the commit log and consume queues onto disk (docs/store-format.md §5).

SYNC_FLUSH: puts wait for a single group-commit flusher that serves all waiting puts at once,
so throughput grows with the number of concurrent producers. ASYNC_FLUSH: a paced flusher
(``service.PacedService``). With a write buffer, a paced committer copies buffered appends into
the file first. The functions here do one pass; the store wires them into services.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable

from .checkpoint import Checkpoint
from .commitlog import CommitLog
from .queue_table import QueueTable
from .service import ServiceThread

log = logging.getLogger(__name__)

FlushObserver = Callable[[float], None]  # told how long each commit-log flush took (seconds)


def flush_commitlog(commitlog: CommitLog, checkpoint: Checkpoint, observers: Iterable[FlushObserver], least_pages: int) -> bool:
    """Flush segment after segment until nothing moves; True when something was flushed."""
    queue = commitlog.segments
    moved = False
    t0 = time.perf_counter()
    for _ in range(len(queue.segments) + 1):
        if queue.flush(least_pages):
            break
        moved = True
    if moved:
        if queue.store_timestamp:
            checkpoint.physic_msg_timestamp = queue.store_timestamp
        elapsed = time.perf_counter() - t0
        for observe in observers:
            observe(elapsed)
    return moved


def drop_cached(commitlog: CommitLog, dispatched: int, keep: int) -> int:
    """Give the kernel back the page cache of the commit log's bytes more than ``keep`` behind
    both its flushed end and ``dispatched`` (the dispatcher reads every record once; 0: never
    give back). Where fresh memory is dear (a VM whose host takes back the pages its guest
    frees: page-cache growth cost 2.6 us per KiB appended here, half of a batched send's server
    CPU), the next appends reuse these pages; and what appends add to a pod's page cache, which
    counts against its memory limit, stays near ``keep``. Each range is given back once: what a
    reader further behind brings back again (from the file) is the kernel's to reclaim. Clean
    pages only: nothing unflushed is dropped. Where the platform has no posix_fadvise, nothing."""
    if keep <= 0 or not hasattr(os, "posix_fadvise"):
        return 0
    return commitlog.segments.drop_cached(min(commitlog.flushed_offset, dispatched) - keep)


def commit_all(commitlog: CommitLog, least_pages: int) -> bool:
    """Copy write-buffer contents into the files (transientStorePoolEnable); True when moved."""
    queue = commitlog.segments
    moved = False
    for _ in range(len(queue.segments) + 1):
        if queue.commit(least_pages):
            break
        moved = True
    return moved


def flush_consume_queues(queues: QueueTable, checkpoint: Checkpoint, logics_timestamp: int, least_pages: int) -> bool:
    """Flush the consume queues written since the last pass, then the checkpoint (its logics
    time only once the queues holding messages up to it are on disk). False when a queue's
    flush failed: the logics time then stays where it was."""
    ok = queues.flush_dirty(least_pages)
    if logics_timestamp and ok:
        checkpoint.logics_msg_timestamp = logics_timestamp
    checkpoint.flush()
    return ok


class FlushRequest:
    __slots__ = ("end", "event", "ok", "_callbacks", "_lock")

    def __init__(self, end: int):
        self.end = end
        self.event = threading.Event()
        self.ok = False
        self._callbacks: list[Callable[[FlushRequest], None]] = []
        self._lock = threading.Lock()

    def wait(self, timeout_s: float) -> bool:
        return self.event.wait(timeout_s) and self.ok

    def add_done_callback(self, fn: Callable[[FlushRequest], None]) -> None:
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
    """SYNC_FLUSH's flusher: one flush serves every request that arrived before it started."""

    name = "group-commit"

    def __init__(
        self,
        commitlog: CommitLog,
        checkpoint: Checkpoint,
        observers: Iterable[FlushObserver],
        on_flushed: Callable[[], None],
        after_flush: Callable[[], None] = lambda: None,
    ):
        super().__init__()
        self.commitlog = commitlog
        self.after_flush = after_flush  # once the answers are out (the store gives page cache back)
        self.checkpoint = checkpoint
        self.observers = observers
        self.on_flushed = on_flushed  # the dispatcher's bound moved (it follows the flushed offset)
        self._cond = threading.Condition()
        self._pending: list[FlushRequest] = []
        self.commits = 0  # flushes that answered requests, and the requests they answered:
        self.requests_answered = 0  # their ratio says how many acks share one fdatasync

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
        moved = flush_commitlog(self.commitlog, self.checkpoint, self.observers, 0)
        flushed = self.commitlog.flushed_offset
        if reqs:
            self.commits += 1
            self.requests_answered += len(reqs)
        for r in reqs:
            r.done(flushed >= r.end)
        if moved:
            self.on_flushed()
            self.after_flush()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopped.set()
            self._cond.notify_all()
        super().stop(timeout)

    def on_stop(self) -> None:
        with self._cond:
            reqs, self._pending = self._pending, []
        self._flush(reqs)
