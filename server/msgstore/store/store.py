"""``MessageStore``: one object owning a store root, its files and its background services.

Lifecycle: ``MessageStore(root, settings)`` → :meth:`start` (lock, load, recover, start
services) → puts and gets → :meth:`shutdown` (drain, flush, persist, remove ``abort``).
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import threading
import time
from typing import Any, Iterable, Mapping, Sequence

from ..record import codec
from .checkpoint import Checkpoint
from .cleanup import CommitLogCleaner, ConsumeQueueCleaner, DiskMonitor, ScheduledRunner
from .clock import Clock, DiskProbe
from .commitlog import AppendError, CommitLog
from .config import HOT_KEYS, ConfigError, ConfigUpdate, StoreConfig, validate
from .consume_queue import ConsumeQueue, is_filler
from .dispatch import Dispatcher, Hint
from .flush import (CommitService, ConsumeQueueFlushService, FlushRequest, GroupCommitService, RealTimeFlushService, commit_all,
                    flush_commitlog)
from .index import IndexService
from .metadata import ConsumerOffsets, PersistedConfig, SubscriptionGroups, TopicConfig, TopicTable, group_error
from .recovery import Recovery, RecoveryReport
from .results import GetResult, GetStatus, PutResult, PutStatus, Unavailable, failed
from .segment import Syncer, msync
from .service import ServiceThread

log = logging.getLogger(__name__)
_SIZE_MAGIC = codec._S_SIZE_MAGIC  # TOTALSIZE and MAGICCODE at the start of a record

MAX_SCAN_UNITS = 800  # consume-queue units looked at per pull, matched or not


class StoreLockedError(RuntimeError):
    """Another process has this store root open."""


class StoreStateError(RuntimeError):
    """The store is not running (recovering, shutting down or shut down)."""


class MessageStore:
    def __init__(self, root: str, settings: StoreConfig | Mapping[str, Any] | None = None, *,
                 clock: Clock | None = None, disk_probe: DiskProbe | None = None, syncer: Syncer = msync,
                 store_host: tuple[str, int] = ("127.0.0.1", 10911)):
        self.root = os.path.abspath(root)
        if isinstance(settings, StoreConfig):
            self.explicit_settings = settings.non_defaults()
        else:
            self.explicit_settings = dict(settings or {})
        self.config = StoreConfig(self.explicit_settings)  # validated early: bad settings fail here
        self.clock = clock or Clock()
        self.disk_probe = disk_probe or DiskProbe()
        self.syncer = syncer
        self.store_host = store_host
        self.state = "created"
        self.recovery_report = RecoveryReport()
        self.generation = 0
        self.pending_restart: dict[str, Any] = {}
        self.disk_ratio: float | None = None
        self._unavailable: set[Unavailable] = set()
        self._flags_lock = threading.Lock()
        self._cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self._cq_lock = threading.RLock()
        self._queue_offsets: dict[tuple[str, int], int] = {}
        self._queue_locks: dict[tuple[str, int], threading.Lock] = {}
        self._queue_locks_lock = threading.Lock()
        self._config_lock = threading.Lock()
        self._inflight = 0
        self._inflight_cond = threading.Condition()
        self._lock_fd: int | None = None
        self._services: list = []
        self.flusher: GroupCommitService | RealTimeFlushService | None = None
        self.committer: CommitService | None = None
        self.commitlog: CommitLog = None  # type: ignore[assignment]
        self.stats = {"put_messages": 0, "put_bytes": 0, "get_messages": 0, "put_failures": 0, "bad_units": 0}
        self.flush_observers: list = []  # callables(seconds) told how long each commit-log flush took

    # ================================================================== paths

    @property
    def commitlog_dir(self) -> str:
        return self.config.storePathCommitLog or os.path.join(self.root, "commitlog")

    @property
    def consumequeue_dir(self) -> str:
        return self.config.storePathConsumeQueue or os.path.join(self.root, "consumequeue")

    @property
    def index_dir(self) -> str:
        return self.config.storePathIndex or os.path.join(self.root, "index")

    @property
    def config_dir(self) -> str:
        return os.path.join(self.root, "config")

    @property
    def abort_path(self) -> str:
        return os.path.join(self.root, "abort")

    # ================================================================== lifecycle

    def start(self, lock_wait_s: float = 0.0) -> "MessageStore":
        """Lock the root, load everything, recover and start the services.

        ``lock_wait_s``: how long to wait for another process to let go of the root (a previous
        instance still shutting down) before failing with :class:`StoreLockedError`.
        """
        if self.state != "created":
            raise StoreStateError(f"store is {self.state}")
        os.makedirs(self.root, exist_ok=True)
        deadline = time.monotonic() + lock_wait_s
        while True:
            try:
                self._acquire_lock()
                break
            except StoreLockedError:
                if time.monotonic() >= deadline:
                    raise
                self.recovery_report.state = "waiting-for-lock"
                time.sleep(0.1)
        try:
            self.state = "recovering"
            self._load_config()
            last_exit_ok = not os.path.exists(self.abort_path)
            self._create_abort()
            self.topics = TopicTable(self.config_dir)
            self.topics.load()
            self.offsets = ConsumerOffsets(self.config_dir)
            self.offsets.load()
            self.groups = SubscriptionGroups(self.config_dir)
            self.groups.load()
            self.checkpoint = Checkpoint(os.path.join(self.root, "checkpoint"))
            self.commitlog = CommitLog(self.commitlog_dir, self.config, clock=self.clock, syncer=self.syncer, store_host=self.store_host)
            self.commitlog.load()
            self._load_consume_queues()
            self.index = IndexService(self.index_dir, self.config.maxHashSlotNum, self.config.maxIndexNum, clock=self.clock,
                                      syncer=self.syncer, on_file_full=self._index_file_full)
            self.recovery_report.index_files_destroyed = self.index.load(last_exit_ok, self.checkpoint.index_msg_timestamp)
            self.dispatcher = Dispatcher(self)
            Recovery(self, self.recovery_report).run(last_exit_ok)
            self._register_discovered_topics()
            self._start_services()
            self.state = "running"
        except BaseException as e:
            self.recovery_report.state = "failed"
            self.recovery_report.error = str(e)
            self.state = "failed"
            self._close_files()  # whatever was opened before the failure
            self._release_lock()
            raise
        return self

    def _acquire_lock(self) -> None:
        path = os.path.join(self.root, "lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            finally:
                os.close(fd)
            raise StoreLockedError(f"store directory {self.root} is in use by another process"
                                   + (f" (pid {holder})" if holder else "")) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def _release_lock(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def _create_abort(self) -> None:
        fd = os.open(self.abort_path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        dfd = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def _load_config(self) -> None:
        """Defaults ← settings persisted by earlier updates ← explicit start-up settings."""
        self.persisted_config = PersistedConfig(self.config_dir)
        self.persisted_config.load()
        self.generation = self.persisted_config.generation
        merged = dict(self.persisted_config.values)
        merged.update(self.explicit_settings)
        try:
            self.config = StoreConfig(merged)
        except ConfigError as e:
            log.error("ignoring persisted settings in %s: %s", self.persisted_config.path, e)
            self.config = StoreConfig(self.explicit_settings)

    def _load_consume_queues(self) -> None:
        root = self.consumequeue_dir
        if not os.path.isdir(root):
            return
        for topic in sorted(os.listdir(root)):
            tdir = os.path.join(root, topic)
            if not os.path.isdir(tdir) or codec.topic_error(topic):
                continue
            for q in sorted(os.listdir(tdir)):
                if not q.isdigit() or not os.path.isdir(os.path.join(tdir, q)):
                    continue
                cq = self._new_cq(topic, int(q))
                cq.load()
                self._cqs[(topic, int(q))] = cq

    def _register_discovered_topics(self) -> None:
        """Queues on disk whose topic is missing from topics.json (lost metadata) are kept."""
        seen: dict[str, int] = {}
        for topic, qid in self._cqs:
            seen[topic] = max(seen.get(topic, 0), qid + 1)
        for topic, n in seen.items():
            if self.topics.get(topic) is None:
                log.warning("topic %s has queues on disk but is missing from topics.json; registered", topic)
                n = max(n, self.config.defaultTopicQueueNums)
                self.topics.put(TopicConfig(topic, n, n))

    def _start_services(self) -> None:
        cfg = self.config
        if cfg.transientStorePoolEnable:
            self.committer = CommitService(self)
            self._services.append(self.committer)
        self.flusher = GroupCommitService(self) if cfg.flushDiskType == "SYNC_FLUSH" else RealTimeFlushService(self)
        self.cq_flusher = ConsumeQueueFlushService(self)
        self.cleaner = CommitLogCleaner(self)
        self.cq_cleaner = ConsumeQueueCleaner(self)
        self.disk_monitor = DiskMonitor(self)
        self.disk_monitor.check()
        self._services += [
            self.flusher, self.dispatcher, self.cq_flusher,
            ScheduledRunner("clean-commitlog", self, self.cleaner.run_once),
            ScheduledRunner("clean-consumequeue", self, self.cq_cleaner.run_once),
            self.disk_monitor, _OffsetPersister(self),
        ]
        for s in self._services:
            s.start()

    def shutdown(self) -> None:
        """Clean shutdown: refuse new work, drain, flush everything, persist, remove ``abort``."""
        if self.state in ("shutdown", "created"):
            return
        if self.state != "running":
            self._close_files()
            self._release_lock()
            self.state = "shutdown"
            return
        self.state = "shutting_down"
        with self._inflight_cond:
            self._inflight_cond.wait_for(lambda: self._inflight == 0, timeout=30)
        clean = True
        try:
            for s in self._services:
                if s not in (self.dispatcher, self.flusher, self.cq_flusher, self.committer):
                    s.stop()
            if self.committer is not None:
                self.committer.stop()
                commit_all(self, 0)
            self.flusher.stop()
            flush_commitlog(self, 0)
            self.dispatcher.stop()
            self.dispatcher._dispatch_to(self.dispatcher.bound())
            self.cq_flusher.stop()
            self.cq_flusher.flush(0)
            self.index.flush()
            self.checkpoint.physic_msg_timestamp = max(self.checkpoint.physic_msg_timestamp, self.commitlog.segments.store_timestamp)
            self.checkpoint.flush()
            self.offsets.persist()
            self.topics.persist()
            self.groups.persist_if_dirty()
        except Exception:
            clean = False
            log.exception("shutdown did not complete; the next start will recover abnormally")
        self._close_files()
        if clean:
            try:
                os.unlink(self.abort_path)
            except FileNotFoundError:
                pass
        self._release_lock()
        self.state = "shutdown"

    def _close_files(self) -> None:
        for closer in (lambda: self.commitlog.close(), lambda: [cq.close() for cq in self.consume_queues()],
                       lambda: self.index.close(), lambda: self.checkpoint.close()):
            try:
                closer()
            except Exception:
                pass

    def __enter__(self) -> "MessageStore":
        if self.state == "created":
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    @property
    def running(self) -> bool:
        return self.state == "running"

    # ================================================================== flags

    def mark_unavailable(self, reason: Unavailable) -> None:
        with self._flags_lock:
            if reason not in self._unavailable:
                log.error("store refuses writes: %s", reason.value)
            self._unavailable.add(reason)

    def clear_unavailable(self, reason: Unavailable) -> None:
        with self._flags_lock:
            if reason in self._unavailable:
                log.info("store accepts writes again: %s cleared", reason.name)
            self._unavailable.discard(reason)

    @property
    def disk_full(self) -> bool:
        return Unavailable.DISK_FULL in self._unavailable

    def _write_refusal(self) -> Unavailable | None:
        if self.state != "running":
            return Unavailable.RECOVERING if self.state in ("created", "recovering") else Unavailable.SHUTDOWN
        if self._unavailable:
            if Unavailable.DISK_FULL in self._unavailable:
                return Unavailable.DISK_FULL
            return next(iter(self._unavailable))
        return None

    def disk_usage(self) -> float | None:
        ratio = self.disk_probe.usage(self.commitlog_dir if os.path.isdir(self.commitlog_dir) else self.root)
        cq_dir = self.consumequeue_dir
        if ratio is not None and self.config.storePathConsumeQueue and os.path.isdir(cq_dir):
            other = self.disk_probe.usage(cq_dir)
            ratio = None if other is None else max(ratio, other)
        self.disk_ratio = ratio
        return ratio

    def apply_disk_usage(self, ratio: float) -> None:
        if ratio > self.config.diskSpaceWarningLevelRatio / 100:
            self.mark_unavailable(Unavailable.DISK_FULL)
        else:
            self.clear_unavailable(Unavailable.DISK_FULL)

    # ================================================================== queues

    def _new_cq(self, topic: str, queue_id: int) -> ConsumeQueue:
        return ConsumeQueue(topic, queue_id, self.consumequeue_dir, self.config.cq_file_size, clock=self.clock, syncer=self.syncer)

    def consume_queue(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None:
        cq = self._cqs.get((topic, queue_id))
        if cq is None and create:
            with self._cq_lock:
                cq = self._cqs.get((topic, queue_id))
                if cq is None:
                    cq = self._new_cq(topic, queue_id)
                    self._cqs = {**self._cqs, (topic, queue_id): cq}
        return cq

    def consume_queues(self) -> Iterable[ConsumeQueue]:
        return list(self._cqs.values())

    def queues_of(self, topic: str) -> list[int]:
        return sorted(q for t, q in self._cqs if t == topic)

    def drop_all_consume_queues(self) -> None:
        with self._cq_lock:
            for cq in self._cqs.values():
                cq.destroy()
            self._cqs = {}
            self._queue_offsets = {}
        shutil.rmtree(self.consumequeue_dir, ignore_errors=True)

    def _drop_queue(self, topic: str, queue_id: int) -> None:
        with self._cq_lock:
            cq = self._cqs.get((topic, queue_id))
            if cq is None:
                return
            rest = dict(self._cqs)
            del rest[(topic, queue_id)]
            self._cqs = rest
            self._queue_offsets.pop((topic, queue_id), None)
        cq.destroy()
        tdir = os.path.join(self.consumequeue_dir, topic)
        try:
            os.rmdir(tdir)
        except OSError:
            pass

    def rebuild_queue_offsets(self) -> None:
        self._queue_offsets = {key: cq.max_offset for key, cq in self._cqs.items()}

    def _queue_lock(self, key: tuple[str, int]) -> threading.Lock:
        lock = self._queue_locks.get(key)
        if lock is None:
            with self._queue_locks_lock:
                lock = self._queue_locks.setdefault(key, threading.Lock())
        return lock

    def _index_file_full(self, end_ts: int) -> None:
        self.checkpoint.index_msg_timestamp = end_ts
        try:
            self.checkpoint.flush()
        except OSError:
            log.exception("checkpoint flush failed")

    def add_arrival_listener(self, listener) -> None:
        """``listener(topic, queue_id, max_offset)`` runs on the dispatcher thread after new
        units land (long polling hangs off this)."""
        self.dispatcher.listeners.append(listener)

    # ================================================================== topics

    def create_topic(self, topic: str, queues: int | None = None) -> TopicConfig:
        err = codec.topic_error(topic)
        if err:
            raise ValueError(err)
        n = queues or self.config.defaultTopicQueueNums
        if not 1 <= n <= 1024:
            raise ValueError("queues must be between 1 and 1024")
        existing = self.topics.get(topic)
        if existing is not None and existing.write_queue_nums == n:
            return existing
        return self.topics.put(TopicConfig(topic, n, n))

    def delete_topic(self, topic: str) -> bool:
        return self.topics.delete(topic)

    def topic_list(self) -> list[TopicConfig]:
        return sorted(self.topics.topics.values(), key=lambda t: t.name)

    # ================================================================== write path

    def put_message(self, msg: codec.Message) -> PutResult:
        return self.put_messages(msg.topic, msg.queue_id, [msg])

    def put_messages(self, topic: str, queue_id: int, msgs: Sequence[codec.Message]) -> PutResult:
        """Append a batch for one queue: consecutive records, one store time, consecutive
        queue offsets (STORE_SPEC §4)."""
        refusal = self._write_refusal()
        if refusal is not None:
            return failed(PutStatus.SERVICE_NOT_AVAILABLE, refusal.value, refusal)
        checked = self.check_destination(topic, queue_id, len(msgs))
        if checked is not None:
            return checked
        try:
            batch = codec.prepare_batch(topic, queue_id, msgs, self.commitlog.store_host_bytes, self.clock.now_ms(),
                                        self.config.maxMessageSize)
        except codec.BatchError as e:
            self.stats["put_failures"] += 1
            reason = e.reason if len(msgs) == 1 else f"message {e.index}: {e.reason}"
            return failed(PutStatus[e.status], reason)
        return self.put_prepared(batch)

    def check_destination(self, topic: str, queue_id: int, count: int) -> PutResult | None:
        """Topic name, queue range (auto-creating the topic) and a non-empty batch."""
        err = codec.topic_error(topic)
        if err:
            return failed(PutStatus.MESSAGE_ILLEGAL, err)
        if count == 0:
            return failed(PutStatus.MESSAGE_ILLEGAL, "a batch needs at least one message")
        tc = self.topics.get(topic)
        if tc is None:
            if not self.config.autoCreateTopicEnable:
                return failed(PutStatus.MESSAGE_ILLEGAL, f"topic {topic} does not exist")
            tc = self.create_topic(topic)
        if not 0 <= queue_id < tc.write_queue_nums:
            return failed(PutStatus.MESSAGE_ILLEGAL, f"queue id {queue_id} is out of range: topic {topic} has {tc.write_queue_nums} queues")
        return None

    def put_prepared(self, batch, defer_flush: bool = False) -> PutResult:
        """Append a batch already prepared (validated and encoded) for one queue; the API
        prepares every queue's batch of a request before appending any of them.

        ``defer_flush``: under SYNC_FLUSH, return once appended; the caller then waits for
        :meth:`request_flush` itself (the gRPC server awaits it on its event loop)."""
        refusal = self._write_refusal()
        if refusal is not None:
            return failed(PutStatus.SERVICE_NOT_AVAILABLE, refusal.value, refusal)
        with self._inflight_cond:
            self._inflight += 1
        try:
            result = self._append(batch, defer_flush)
        finally:
            with self._inflight_cond:
                self._inflight -= 1
                if self._inflight == 0:
                    self._inflight_cond.notify_all()
        if result.status.stored:
            self.stats["put_messages"] += len(batch)
            self.stats["put_bytes"] += batch.total
        else:
            self.stats["put_failures"] += 1
        return result

    def request_flush(self, end_offset: int) -> FlushRequest | None:
        """A group-commit request for everything below ``end_offset`` (None under ASYNC_FLUSH)."""
        if isinstance(self.flusher, GroupCommitService):
            return self.flusher.request(end_offset)
        return None

    def _append(self, batch, defer_flush: bool = False) -> PutResult:
        cl = self.commitlog
        topic, queue_id = batch.topic, batch.queue_id
        key = (topic, queue_id)
        with self._queue_lock(key):
            qoff = self._queue_offsets.get(key, 0)
            try:
                app = cl.append(batch, qoff, self.config.osPageCacheBusyTimeOutMills / 1000,
                                on_appended=lambda phy, end, ts: self.dispatcher.add_hint(
                                    Hint(phy, end, topic, queue_id, qoff, ts, batch.sizes, batch.tags_codes, batch.key_hashes,
                                         batch.key_owner, batch.sys_flags, batch.takes_offset)))
            except AppendError as e:
                return failed(PutStatus[e.status], e.reason)
            self._queue_offsets[key] = qoff + batch.count_offsets
        status = PutStatus.PUT_OK
        # The dispatcher is not woken per put: it polls every millisecond, as the reference's
        # reput service does. Waking it here made it take the GIL while this thread sat in
        # pwrite, and the producer then waited out whole switch intervals (half the throughput).
        if isinstance(self.flusher, GroupCommitService) and batch.wait_flush and not defer_flush:
            req = self.flusher.request(app.end_offset)
            if not req.wait(self.config.syncFlushTimeout / 1000):
                status = PutStatus.FLUSH_DISK_TIMEOUT
        return PutResult(status, "", app.phy_offset, qoff, batch.sizes, app.store_timestamp, cl.store_host_bytes,
                         batch.takes_offset if batch.count_offsets != len(batch) else None)

    # ================================================================== read path

    def get_message(self, group: str | None, topic: str, queue_id: int, offset: int, max_msgs: int = 32,
                    max_bytes: int = 4 * 1024 * 1024, tag_filter: Iterable[str] | str | None = None) -> GetResult:
        """Pull from one queue (STORE_SPEC §7). Release the result when done with its views."""
        cq = self.consume_queue(topic, queue_id)
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        min_off, max_off = cq.min_offset, cq.max_offset
        if max_off == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, min_off, max_off)
        if offset < min_off:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, min_off, min_off, max_off)
        if offset == max_off:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_off, max_off)
        if offset > max_off:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, max_off, min_off, max_off)
        tags = _tag_set(tag_filter)
        codes = {codec.tags_code(t) for t in tags} if tags else None
        result = GetResult(GetStatus.NO_MATCHED_MESSAGE, offset, min_off, max_off)
        removing = False
        cl = self.commitlog
        seg = seg_view = None
        next_offset = offset
        scanned = 0
        limit = max(MAX_SCAN_UNITS, max_msgs)
        done = False
        while not done and next_offset < max_off and scanned < limit:
            units = cq.units(next_offset, min(limit - scanned, 256))
            if not units:
                break
            for phy, size, tag in units:
                if len(result) >= max_msgs or (result.buffer_total and result.buffer_total + size > max_bytes):
                    done = True
                    break
                scanned += 1
                unit_offset = next_offset
                next_offset += 1
                if is_filler(phy, size) or size <= 0:
                    continue
                if codes is not None and tag not in codes:
                    continue
                if seg is None or not (seg.start <= phy < seg.start + seg.size):
                    seg = cl.segments.find(phy)  # units mostly share a segment: hold it once per pull
                    if seg is not None and seg.hold():
                        seg_view = memoryview(seg.mm)
                        result.hold(seg.release, seg_view)
                    else:
                        seg = None
                if seg is None or phy - seg.start + size > seg.read_position:
                    if not result.buffer_total:
                        removing = True
                    continue
                pos = phy - seg.start
                total, magic = _SIZE_MAGIC.unpack_from(seg.mm, pos) if size >= 8 else (0, 0)
                if total != size or (magic != codec.MAGIC_V1 and magic != codec.MAGIC_V2):
                    # a damaged consume-queue unit: serve nothing rather than bytes that are not
                    # the record (a client would fail to decode them, or worse, decode garbage)
                    self._bad_unit(cq, unit_offset, phy, size)
                    continue
                view = seg_view[pos:pos + size]
                if tags is not None and _record_tags(view) not in tags:
                    view.release()
                    continue
                result.add(view, unit_offset)
        result.next_offset = next_offset
        if len(result):
            result.status = GetStatus.FOUND
            self.stats["get_messages"] += len(result)
        elif removing:
            result.status = GetStatus.MESSAGE_WAS_REMOVING
            result.next_offset = max(next_offset, cq.min_offset)
        return result

    def _bad_unit(self, cq: ConsumeQueue, offset: int, phy: int, size: int) -> None:
        self.stats["bad_units"] += 1
        if self.stats["bad_units"] <= 10:
            log.error("consume queue %s/%d offset %d points at no record (commit-log offset %d, size %d); skipped "
                      "(msgstore fsck lists such units)", cq.topic, cq.queue_id, offset, phy, size)

    def look_message_by_offset(self, phy: int) -> codec.StoredMessage | None:
        raw = self.commitlog.read_record(phy)
        return codec.decode(raw) if raw is not None else None

    def message_by_id(self, msg_id: str) -> codec.StoredMessage | None:
        _host, phy = codec.decode_message_id(msg_id)
        return self.look_message_by_offset(phy)

    def query_message(self, topic: str, key: str, max_num: int = 32, begin: int = 0, end: int | None = None) -> list[codec.StoredMessage]:
        """Messages of ``topic`` with ``key`` (a KEYS word or the UNIQ_KEY), newest first;
        hash collisions are filtered out here (§12.6)."""
        max_num = max(1, min(max_num, self.config.maxMsgsNumBatch))
        end = self.clock.now_ms() + 1000 if end is None else end
        out: list[codec.StoredMessage] = []
        seen: set[int] = set()
        cap = max_num * 8
        for phy in self.index.query(topic, key, cap, begin, end):
            if phy in seen:
                continue
            seen.add(phy)
            msg = self.look_message_by_offset(phy)
            if msg is None or msg.topic != topic or key not in msg.keys:
                continue
            out.append(msg)
            if len(out) >= max_num:
                break
        return out

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queue(topic, queue_id)
        return cq.min_offset if cq else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queue(topic, queue_id)
        return cq.max_offset if cq else 0

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int, upper: bool = False) -> int:
        cq = self.consume_queue(topic, queue_id)
        if cq is None:
            return 0
        return cq.offset_by_time(timestamp, upper, self.commitlog.store_time_at)

    # ================================================================== consumer offsets

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        err = group_error(group) or codec.topic_error(topic)
        if err:
            raise ValueError(err)
        if offset < 0:
            raise ValueError("offset must be >= 0")
        self.groups.ensure(group)
        self.offsets.commit(group, topic, queue_id, offset)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        return self.offsets.query(group, topic, queue_id)

    def consumer_lag(self) -> dict[str, int]:
        """Messages not yet consumed per known consumer group, over the topics it consumes
        (a queue it never committed on counts from the queue's start)."""
        lag: dict[str, int] = {}
        for key, qmap in list(self.offsets.table.items()):
            topic, _, group = key.partition("@")
            total = 0
            for qid in self.queues_of(topic):
                cq = self.consume_queue(topic, qid)
                if cq is not None:
                    total += max(0, cq.max_offset - max(qmap.get(qid, cq.min_offset), cq.min_offset))
            lag[group] = lag.get(group, 0) + total
        return lag

    def messages_held(self) -> int:
        """Messages still stored (between every queue's min and max offsets)."""
        return sum(max(0, cq.max_offset - cq.min_offset) for cq in self.consume_queues())

    def retention_guard_offset(self) -> int | None:
        """Lowest phy offset not yet consumed by a guarded group (§12.5), None if unguarded."""
        groups = self.config.guard_groups
        if not groups:
            return None
        lowest: int | None = None
        for g in groups:
            for topic, qmap in self.offsets.offsets_of_group(g).items():
                for qid in self.queues_of(topic):
                    cq = self.consume_queue(topic, qid)
                    if cq is None:
                        continue
                    committed = max(qmap.get(qid, cq.min_offset), cq.min_offset)
                    if committed >= cq.max_offset:
                        continue
                    unit = cq.unit(committed)
                    if unit is not None and (lowest is None or unit[0] < lowest):
                        lowest = unit[0]
        return lowest

    # ================================================================== admin

    def manual_delete(self) -> int:
        """Arm 20 cleaner runs and do the first one now; returns segments deleted by it."""
        self.cleaner.arm_manual_delete()
        run = self.cleaner.run_once()
        self.cq_cleaner.run_once()
        return run.deleted

    def clean_expired_consume_queues(self) -> list[str]:
        """Destroy queues whose last unit ends below the commit log's min offset."""
        cl_min = self.commitlog.min_offset
        gone = []
        for (topic, qid), cq in list(self._cqs.items()):
            if 0 <= cq.max_phy_offset <= cl_min and cq.max_phy_offset != -1 and cl_min > 0:
                self._drop_queue(topic, qid)
                gone.append(f"{topic}/{qid}")
        return gone

    def clean_unused_topics(self) -> list[str]:
        """Destroy the queues of topics that are not in topics.json."""
        gone = []
        for (topic, qid) in list(self._cqs):
            if self.topics.get(topic) is None:
                self._drop_queue(topic, qid)
                if topic not in gone:
                    gone.append(topic)
        return gone

    def get_config(self) -> dict[str, Any]:
        return self.config.to_dict()

    def update_config(self, changes: Mapping[str, Any], dry_run: bool = False) -> ConfigUpdate:
        """Validate the whole resulting config; apply hot keys now, keep restart-only keys for
        the next start and say so (§12.3). Raises ConfigError naming the bad key."""
        with self._config_lock:
            # what a restart would run with must be valid, and so must what runs now
            after_restart = validate({**self.config.to_dict(), **self.pending_restart, **changes})
            applied = {k: after_restart[k] for k in changes if k in HOT_KEYS and after_restart[k] != self.config.get(k)}
            restart = {k: after_restart[k] for k in changes if k not in HOT_KEYS and after_restart[k] != self.config.get(k)}
            new_config = self.config.with_changes(applied)
            if dry_run:
                return ConfigUpdate(applied, restart, self.generation, True)
            self.generation += 1
            self.persisted_config.values.update({k: after_restart[k] for k in changes})
            self.persisted_config.generation = self.generation
            self.persisted_config.persist()
            for k in changes:
                self.pending_restart.pop(k, None)
            self.pending_restart.update(restart)
            self.config = new_config
            for s in (self.flusher, self.cq_flusher, self.disk_monitor):
                if s is not None:
                    s.wakeup()
            log.info("config generation %d: applied %s, restart required for %s", self.generation, applied, restart)
            return ConfigUpdate(applied, restart, self.generation, False)

    def wait_dispatched(self, timeout: float = 10.0) -> bool:
        """Block until the dispatcher has caught up with its bound (tests and tools)."""
        return self.dispatcher.wait_dispatched(self.dispatcher.bound(), timeout)

    def status(self) -> dict[str, Any]:
        cl = self.commitlog
        rep = self.recovery_report
        out: dict[str, Any] = {
            "state": self.state,
            "root": self.root,
            "recovery": rep.as_dict(),
            "writable": self._write_refusal() is None,
            "unavailable": sorted(u.name for u in self._unavailable),
            "disk_full": self.disk_full,
            "disk_usage": self.disk_ratio,
            "config_generation": self.generation,
            "pending_restart": dict(self.pending_restart),
            "stats": dict(self.stats),
        }
        if cl is not None and self.state in ("running", "shutting_down"):
            out.update({
                "min_phy_offset": cl.min_offset,
                "max_phy_offset": cl.max_offset,
                "flushed_phy_offset": cl.flushed_offset,
                "dispatch_behind_bytes": self.dispatcher.behind_bytes,
                "commitlog_segments": len(cl.segments.segments),
                "consume_queues": len(self._cqs),
                "consume_queue_segments": sum(len(cq.segments.segments) for cq in self.consume_queues()),
                "index_files": len(self.index.files),
                "topics": len(self.topics.topics),
                "checkpoint": self.checkpoint.as_dict(),
                "messages_held": self.messages_held(),
                "consumer_lag": self.consumer_lag(),
            })
        return out


def _tag_set(tag_filter: Iterable[str] | str | None) -> frozenset[str] | None:
    if tag_filter is None:
        return None
    if isinstance(tag_filter, str):
        parts = [t.strip() for t in tag_filter.split("||")]
    else:
        parts = [t.strip() for t in tag_filter]
    parts = [t for t in parts if t]
    if not parts or "*" in parts:
        return None
    return frozenset(parts)


def _record_tags(view) -> str | None:
    """TAGS of a record view, decoded only far enough to find the properties."""
    msg_props = codec.decode(view, 0, with_body=False).properties
    return msg_props.get(codec.PROP_TAGS)


class _OffsetPersister(ServiceThread):
    """Persists consumer offsets every ``flushConsumerOffsetInterval`` (5 s)."""

    name = "persist-offsets"

    def __init__(self, store: MessageStore):
        super().__init__()
        self.store = store

    def cycle(self) -> None:
        self._stopped.wait(self.store.config.flushConsumerOffsetInterval / 1000)
        self.store.offsets.persist_if_dirty()
        self.store.groups.persist_if_dirty()
