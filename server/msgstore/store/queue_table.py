"""Every consume queue of a store, by (topic, queue id), with the queue offset each one's next
message takes (the reference's consume-queue table and topic-queue table).

The map is replaced, never changed in place, so readers take it without a lock; creation and
removal take the table's lock. Appends to one queue are serialised by that queue's lock, which
the write path holds while it assigns queue offsets.

Cost follows traffic, not the number of queues (issue 21): the queues' files are reached
through one bounded pool of descriptors, only the queues written since the last flush are
flushed, and a start takes the queues' ends from the saved state instead of their files.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import shutil
import threading

from . import queue_state
from .clock import Clock
from .consume_queue import ConsumeQueue
from .file_pool import FilePool
from .layout import StoreLayout
from .queue_state import QueueRecord, QueueState
from .segment import Syncer, msync

QueueKey = tuple[str, int]

log = logging.getLogger(__name__)

SYNCFS_OVER = 64  # new directories beyond which one syncfs(2) of the file system is cheaper


def _syncfs(path: str) -> bool:
    """syncfs(2) of the file system holding ``path`` (Linux); False where it is missing."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(path, os.O_RDONLY)
    except (OSError, AttributeError):
        return False
    try:
        return bool(libc.syncfs(fd) == 0)
    except AttributeError:
        return False
    finally:
        os.close(fd)


class QueueTable:
    def __init__(self, layout: StoreLayout, file_size: int, *, clock: Clock, syncer: Syncer = msync, max_open_files: int = 1024):
        self.layout = layout
        self.file_size = file_size
        self.clock = clock
        self.syncer = syncer
        self.pool = FilePool(max_open_files)
        self._dirty: set[ConsumeQueue] = set()  # written (or cut) since their last flush
        self._dirty_lock = threading.Lock()
        self.changes = 0  # writes since the start: the state is saved when this moved
        self.state_lock = threading.Lock()  # a save, against an invalidation (queues cut or dropped)
        self.state_epoch = 0  # bumped by every invalidation: a save that saw another epoch is not written
        self._new_dirs: set[str] = set()  # directories that got a queue file since the last save (fsynced before it)
        self._queues: dict[QueueKey, ConsumeQueue] = {}
        self._lock = threading.RLock()
        self._next: dict[QueueKey, int] = {}  # the next message's queue offset, per queue
        self._append_locks: dict[QueueKey, threading.Lock] = {}
        self._append_locks_lock = threading.Lock()

    def _new(self, topic: str, queue_id: int) -> ConsumeQueue:
        return ConsumeQueue(
            topic,
            queue_id,
            self.layout.consumequeue_dir,
            self.file_size,
            clock=self.clock,
            syncer=self.syncer,
            pool=self.pool,
            on_write=self._written,
            on_new_file=self._new_file,
        )

    def _new_file(self, path: str) -> None:
        qdir = os.path.dirname(path)
        with self._dirty_lock:
            self._new_dirs.update((qdir, os.path.dirname(qdir), os.path.dirname(os.path.dirname(qdir))))

    def sync_new_dirs(self) -> None:
        """Make the names of queue files created since the last save durable before a state
        that lists them is (a file's fdatasync does not write its directory entry)."""
        with self._dirty_lock:
            dirs, self._new_dirs = self._new_dirs, set()
        if len(dirs) > SYNCFS_OVER and _syncfs(self.layout.consumequeue_dir):
            return  # thousands of new queues: one syncfs instead of a directory fsync each
        for d in sorted(dirs, key=len, reverse=True):
            try:
                fd = os.open(d, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def sync_file_system(self) -> None:
        """Every queue file's name and contents on disk (a crashed run's new files among them)."""
        os.makedirs(self.layout.consumequeue_dir, exist_ok=True)
        if not _syncfs(self.layout.consumequeue_dir):
            os.sync()

    def invalidate_state(self) -> None:
        """Queues are about to be cut or dropped: the saved ends would lie, so they go first
        (a crash then scans), and a save already under way is not written."""
        with self.state_lock:
            self.state_epoch += 1
            queue_state.discard(self.layout.consumequeue_dir)

    def _written(self, cq: ConsumeQueue) -> None:
        with self._dirty_lock:
            self._dirty.add(cq)
            self.changes += 1

    def load(self) -> None:
        """Every queue found on disk (a walk of the directories: without a saved state)."""
        for topic, queue_id, _path in self.layout.queue_dirs():
            cq = self._new(topic, queue_id)
            cq.load()
            self._queues[(topic, queue_id)] = cq

    def adopt(self, state: QueueState) -> None:
        """Every queue the saved state names, opening no file."""
        queues = {}
        collecting = gc.isenabled()
        gc.disable()  # 100,000 queues are 500,000 objects: without this, collections take a third of the start
        try:
            for topic, queue_id, starts, min_logic, end, max_phy, first_phy in state.queues:
                cq = self._new(topic, queue_id)
                cq.adopt(starts, min_logic, end, max_phy, first_phy)
                queues[(topic, queue_id)] = cq
        finally:
            if collecting:
                gc.enable()
        self._queues = queues

    def snapshot(self) -> list[QueueRecord]:
        out: list[QueueRecord] = []
        for (topic, queue_id), cq in list(self._queues.items()):
            starts, min_logic, end, max_phy, first_phy = cq.state()
            out.append((topic, queue_id, starts, min_logic, end, max_phy, first_phy))
        return out

    # ------------------------------------------------------------------ flushing

    def flush_dirty(self, least_pages: int) -> bool:
        """Flush the queues written since their last flush; one not flushed whole (fewer dirty
        pages than ``least_pages``) stays dirty. False when a flush failed: that queue and every
        one not reached yet stay dirty, and nothing may be claimed durable this pass."""
        with self._dirty_lock:
            dirty, self._dirty = self._dirty, set()
        pending = list(dirty)
        for i, cq in enumerate(pending):
            try:
                for _ in range(len(cq.segments.segments) + 1):
                    if cq.flush(least_pages):
                        break
            except (ValueError, FileNotFoundError):  # destroyed meanwhile
                continue
            except OSError as e:
                log.error("flushing consume queue %s/%d failed: %s", cq.topic, cq.queue_id, e)
                with self._dirty_lock:
                    self._dirty.update(pending[i:])
                return False
            if cq.segments.flushed_where < cq.segments.max_wrote_offset() and (cq.topic, cq.queue_id) in self._queues:
                with self._dirty_lock:
                    self._dirty.add(cq)
        return True

    # ------------------------------------------------------------------ lookup

    def get(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None:
        cq = self._queues.get((topic, queue_id))
        if cq is None and create:
            with self._lock:
                cq = self._queues.get((topic, queue_id))
                if cq is None:
                    cq = self._new(topic, queue_id)
                    self._queues = {**self._queues, (topic, queue_id): cq}
        return cq

    def all(self) -> list[ConsumeQueue]:
        return list(self._queues.values())

    def items(self) -> list[tuple[QueueKey, ConsumeQueue]]:
        return list(self._queues.items())

    def queues_of(self, topic: str) -> list[int]:
        return sorted(q for t, q in self._queues if t == topic)

    def topics(self) -> dict[str, int]:
        """Each topic on disk with one more than its highest queue id."""
        seen: dict[str, int] = {}
        for topic, qid in self._queues:
            seen[topic] = max(seen.get(topic, 0), qid + 1)
        return seen

    def __len__(self) -> int:
        return len(self._queues)

    # ------------------------------------------------------------------ queue offsets

    def append_lock(self, key: QueueKey) -> threading.Lock:
        lock = self._append_locks.get(key)
        if lock is None:
            with self._append_locks_lock:
                lock = self._append_locks.setdefault(key, threading.Lock())
        return lock

    def next_offset(self, key: QueueKey) -> int:
        """The queue offset the next message of ``key`` takes (hold its append lock)."""
        return self._next.get(key, 0)

    def advance(self, key: QueueKey, next_offset: int) -> None:
        self._next[key] = next_offset

    def rebuild_offsets(self) -> None:
        """After recovery: every queue continues from its recovered end."""
        self._next = {key: cq.max_offset for key, cq in self._queues.items()}

    # ------------------------------------------------------------------ removal

    def forget(self, topic: str, queue_id: int) -> None:
        """Take a queue out of the table without touching its files (recovery found it gone)."""
        with self._lock:
            rest = dict(self._queues)
            rest.pop((topic, queue_id), None)
            self._queues = rest
            self._next.pop((topic, queue_id), None)

    def drop(self, topic: str, queue_id: int) -> None:
        if (topic, queue_id) in self._queues:
            self.invalidate_state()
        with self._lock:
            cq = self._queues.get((topic, queue_id))
            if cq is None:
                return
            rest = dict(self._queues)
            del rest[(topic, queue_id)]
            self._queues = rest
            self._next.pop((topic, queue_id), None)
        cq.destroy()
        self.invalidate_state()  # a save whose snapshot raced with the drop (it still lists the queue) is not written
        with self._dirty_lock:
            self._dirty.discard(cq)
            self.changes += 1  # a state without the queue is saved at the next pass (a replay from an older one would make it again)
        try:
            os.rmdir(os.path.join(self.layout.consumequeue_dir, topic))
        except OSError:
            pass

    def drop_all(self) -> None:
        self.invalidate_state()
        with self._lock:
            for cq in self._queues.values():
                cq.destroy()
            self._queues = {}
            self._next = {}
        shutil.rmtree(self.layout.consumequeue_dir, ignore_errors=True)

    def close(self) -> None:
        for cq in self.all():
            cq.close()
        self.pool.close_all()
