"""``MessageStore``: one object owning a store root, its files and its background services.

Lifecycle: ``MessageStore(root, settings)`` → :meth:`start` (lock, load, recover, start
services) → puts and gets → :meth:`shutdown` (drain, flush, persist, remove ``abort``).
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import resource
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..record import codec
from ..record.selector import Selector
from . import abort_file, queue_state
from .checkpoint import Checkpoint
from .cleanup import CommitLogCleaner, ConsumeQueueCleaner, DiskMonitor, DiskUsage
from .clock import Clock, DiskProbe
from .commitlog import AppendError, CommitLog, ReadMiss
from .config import HOT_KEYS, ConfigError, ConfigUpdate, StoreConfig, validate
from .consume_queue import ConsumeQueue, is_filler
from .dispatch import ArrivalListener, Dispatcher, Hint
from .flush import FlushObserver, FlushRequest, GroupCommitService, commit_all, drop_cached, flush_commitlog, flush_consume_queues
from .index import IndexService
from .layout import DELAY_OFFSET, StoreLayout
from .limits import ResourceGuard, ResourceLimit
from .metadata import (
    MESSAGE_TYPES,
    PERM_READ,
    PERM_WRITE,
    ConsumerOffsets,
    PersistedConfig,
    SubscriptionGroups,
    TopicConfig,
    TopicTable,
    group_error,
    read_json,
)
from .queue_state import QueueRecord, QueueState
from .queue_table import QueueTable
from .recovery import Recovery, RecoveryReport, truncate_all
from .results import GetResult, GetStatus, PutResult, PutStatus, QueueProgress, Unavailable, failed
from .running_flags import RunningFlags
from .segment import Syncer, msync
from .service import PacedService, PeriodicService, ServiceThread
from .unit_repair import UnitRepair, record_matches
from .user_table import UserTable

log = logging.getLogger(__name__)

MAX_SCAN_UNITS = 800  # consume-queue units looked at per pull, matched or not


class StoreLockedError(RuntimeError):
    """Another process has this store root open."""

    def __init__(self, message: str, holder: str = ""):
        super().__init__(message)
        self.holder = holder  # its pid, as it wrote it into the lock file ("" when unknown)


class StoreDirError(OSError):
    """The store root cannot be used: not a directory, read-only, not ours to write."""

    def __str__(self) -> str:
        return str(self.strerror)  # the sentence naming the path, without "[Errno 20]"


def _prepare_root(root: str) -> None:
    """Create the root, naming the path and what is wrong with it when that fails (an errno
    alone, ``File exists`` for a regular file, says neither)."""
    if os.path.exists(root) and not os.path.isdir(root):
        raise StoreDirError(errno.ENOTDIR, f"data directory {root} is not a directory")
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as e:
        raise _dir_error(root, e) from None


def _dir_error(root: str, e: OSError) -> StoreDirError:
    if isinstance(e, (FileExistsError, NotADirectoryError)):
        return StoreDirError(errno.ENOTDIR, f"data directory {root}: a parent of it is not a directory")
    if e.errno == errno.EROFS:
        return StoreDirError(e.errno, f"data directory {root} is read-only (its file system is mounted read-only)")
    if e.errno in (errno.EACCES, errno.EPERM):
        return StoreDirError(e.errno, f"data directory {root} is read-only for this user (uid {os.getuid()})")
    return StoreDirError(e.errno, f"data directory {root}: {e.strerror}")


class StoreStateError(RuntimeError):
    """The store is not running (recovering, shutting down or shut down)."""


RECENT_DELETIONS = 1000  # topic deletions a master tells its followers about


class TopicNotEmpty(RuntimeError):
    """A topic to delete still holds messages (delete it with force, or let them expire)."""

    def __init__(self, topic: str, messages: int):
        super().__init__(f"topic {topic} holds {messages} messages on this node: delete it with force to drop them")
        self.messages = messages


class MessageStore:
    """A facade over the store's parts: the commit log, the queue table, the index, the
    checkpoint, the metadata files and the running flags, with the services that keep them
    (flush, dispatch, cleanup, disk monitor). Each service is given the parts it works on,
    never the store."""

    def __init__(
        self,
        root: str,
        settings: StoreConfig | Mapping[str, Any] | None = None,
        *,
        clock: Clock | None = None,
        disk_probe: DiskProbe | None = None,
        syncer: Syncer = msync,
        store_host: tuple[str, int] = ("127.0.0.1", 10911),
    ):
        self.root = os.path.abspath(root)
        if isinstance(settings, StoreConfig):
            self.explicit_settings = settings.non_defaults()
        else:
            self.explicit_settings = dict(settings or {})
        self.config = StoreConfig(self.explicit_settings)  # validated early: bad settings fail here
        self.layout = StoreLayout.of(self.root, self.config)
        self.clock = clock or Clock()
        self.disk_probe = disk_probe or DiskProbe()
        self.syncer = syncer
        self.store_host = store_host
        self.state = "created"
        self._follower = False  # a follower (slave) copies its master and refuses producers (ha/)
        self._applied_offsets = ""  # the master's consumer offsets as last applied (a follower)
        self.recovery_report = RecoveryReport()
        self.generation = 0
        self.pending_restart: dict[str, Any] = {}
        self.startup_overrides: dict[str, tuple[Any, Any]] = {}  # start-up settings that override persisted ones
        self.flags = RunningFlags()
        self._config_lock = threading.Lock()
        self._inflight = 0
        self._inflight_cond = threading.Condition()
        self._inflight_topics: dict[str, int] = {}  # appends under way, per topic (a topic's deletion waits for its own)
        self._deleting: set[str] = set()  # topics being deleted: appends to them are refused meanwhile
        self.deleted_topics: dict[str, int] = {}  # topics deleted here lately -> the log end then (followers drop them too)
        self._lock_fd: int | None = None
        self.limits = ResourceGuard(self.root, lambda: self.flags.disk_full)
        self._state_saved_changes = -1  # the queue table's change count at the last state save (-1: save once after the start)
        self._state_saved_at = 0.0
        self._retention_holders: list[Callable[[], int | None]] = []
        self._abort_stamped = False  # the abort file names this run (after its first queue-state save)
        self._services: list[ServiceThread] = []
        self.flusher: GroupCommitService | PacedService | None = None
        self.committer: PacedService | None = None
        self.commitlog: CommitLog = None  # type: ignore[assignment]
        self.queues: QueueTable = None  # type: ignore[assignment]
        self.stats = {"put_messages": 0, "put_bytes": 0, "get_messages": 0, "put_failures": 0, "bad_units": 0}
        self.flush_observers: list[FlushObserver] = []
        # told when records become readable (replication's streams send them now): after
        # every append that stored some, and, with a write buffer, after every commit that
        # moved the log's readable end; called in that thread, outside the store's locks
        self.append_listeners: list[Callable[[], None]] = []

    def settings(self) -> StoreConfig:
        """The configuration in effect now (services read it on every cycle: hot keys apply)."""
        return self.config

    # ================================================================== paths

    @property
    def commitlog_dir(self) -> str:
        return self.layout.commitlog_dir

    @property
    def consumequeue_dir(self) -> str:
        return self.layout.consumequeue_dir

    @property
    def index_dir(self) -> str:
        return self.layout.index_dir

    @property
    def config_dir(self) -> str:
        return self.layout.config_dir

    @property
    def abort_path(self) -> str:
        return self.layout.abort_path

    # ================================================================== lifecycle

    def lock(self, wait_s: float = 0.0, on_wait: Callable[[str], None] | None = None, give_up: threading.Event | None = None) -> None:
        """Take the root's lock, creating the root if need be; ``start()`` does it when not done.

        A server takes it before it listens, so that a second process on the same directory
        says at once whose lock it waits for instead of serving a port it cannot back.
        ``wait_s``: how long to wait for another process to let go (a previous instance still
        shutting down) before failing with :class:`StoreLockedError`; ``on_wait`` hears once
        who holds it; ``give_up`` set ends the wait early (a SIGTERM meanwhile). A root that is a
        file, or read-only, fails with :class:`StoreDirError`.
        """
        if self._lock_fd is not None:
            return
        _prepare_root(self.root)
        deadline = time.monotonic() + wait_s
        told = False
        while True:
            try:
                self._acquire_lock()
                return
            except StoreLockedError as e:
                if time.monotonic() >= deadline or (give_up is not None and give_up.is_set()):
                    raise
                self.recovery_report.state = "waiting-for-lock"
                if on_wait is not None and not told:
                    on_wait(e.holder)
                    told = True
                time.sleep(0.1)

    def start(self, lock_wait_s: float = 0.0) -> MessageStore:
        """Lock the root (unless :meth:`lock` did), load everything, recover and start the services."""
        if self.state != "created":
            raise StoreStateError(f"store is {self.state}")
        self.lock(lock_wait_s)
        last_exit_ok = True
        created_abort = False
        try:
            self.state = "recovering"
            self._load_config()
            last_exit_ok = not os.path.exists(self.abort_path)
            page_cache_kept = not last_exit_ok and abort_file.page_cache_survived(self.abort_path, self._identity_dirs())
            self._create_abort()
            created_abort = last_exit_ok
            self.topics = TopicTable(self.config_dir)
            self.topics.load()
            self.offsets = ConsumerOffsets(self.config_dir)
            self.offsets.load()
            self.groups = SubscriptionGroups(self.config_dir)
            self.groups.load()
            self.users = UserTable(self.config_dir)
            self.users.load()
            read_json(os.path.join(self.config_dir, DELAY_OFFSET))  # (the broker reads it later: refused here, before serving)
            self.checkpoint = Checkpoint(self.layout.checkpoint_path)
            self.commitlog = CommitLog(self.commitlog_dir, self.config, clock=self.clock, syncer=self.syncer, store_host=self.store_host)
            self.repairs = UnitRepair(self.commitlog, lambda: self.config.delay_levels_ms)
            self.commitlog.load()
            self.queues = QueueTable(
                self.layout, self.config.cq_file_size, clock=self.clock, syncer=self.syncer, max_open_files=self._queue_file_budget()
            )
            saved = queue_state.load(self.layout.consumequeue_dir, self.config.cq_file_size)
            if saved is not None:
                self.queues.adopt(saved)
            else:
                self.queues.load()
            if os.path.isdir(self.layout.consumequeue_dir):
                queue_state.mark_running(self.layout.consumequeue_dir)
            self.index = IndexService(
                self.index_dir,
                self.config.maxHashSlotNum,
                self.config.maxIndexNum,
                clock=self.clock,
                syncer=self.syncer,
                on_file_full=self._index_file_full,
            )
            self.recovery_report.index_files_destroyed = self.index.load(last_exit_ok, self.checkpoint.index_msg_timestamp)
            self.recovery_report.damage.extend(self.index.damage)
            self.dispatcher = Dispatcher(self.commitlog, self.queues, self.index, self.flags, self.settings)
            Recovery(
                self.commitlog,
                self.queues,
                self.index,
                self.checkpoint,
                self.dispatcher,
                self.settings,
                self.recovery_report,
                self.clock.now_ms,
            ).run(last_exit_ok, saved, page_cache_kept)
            trusted = saved is not None and saved.clean and last_exit_ok
            if not trusted:
                self.queues.sync_file_system()  # queue files a crashed run created: on disk before a state names them
            if saved is not None and (trusted or page_cache_kept):
                # the saved ends were taken as they are, and the files agree with them (plus what
                # re-dispatch writes again): a crash from here on may trust them at once
                abort_file.stamp(self.abort_path, self._identity_dirs())
                self._abort_stamped = True
            self._register_discovered_topics()
            self._start_services()
            self.state = "running"
        except BaseException as e:
            self.recovery_report.state = "failed"
            self.recovery_report.error = str(e)
            self.state = "failed"
            self._close_files()  # whatever was opened before the failure
            if created_abort:  # this start never opened the store: the last exit stays what it was
                try:
                    os.unlink(self.abort_path)
                except FileNotFoundError:
                    pass
            self._release_lock()
            raise
        return self

    def _queue_file_budget(self) -> int:
        """Descriptors the consume queues may hold: ``maxOpenQueueFiles``, within a quarter
        of the process's RLIMIT_NOFILE (connections, the commit log and the index need the rest)."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        cap = int(self.config.maxOpenQueueFiles)
        return cap if soft == resource.RLIM_INFINITY else max(16, min(cap, soft // 4))

    def _acquire_lock(self) -> None:
        path = self.layout.lock_path
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise _dir_error(self.root, e) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            finally:
                os.close(fd)
            raise StoreLockedError(
                f"store directory {self.root} is in use by another process" + (f" (pid {holder})" if holder else ""), holder
            ) from None
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
        abort_file.create(self.abort_path, self.root)
        self._abort_stamped = False

    def _identity_dirs(self) -> list[str]:
        """The directories whose files a crashed run wrote (they may be on several volumes)."""
        return [self.root, self.commitlog_dir, self.layout.consumequeue_dir]

    def _load_config(self) -> None:
        """Defaults ← settings persisted by earlier updates ← explicit start-up settings."""
        self.persisted_config = PersistedConfig(self.config_dir)
        self.persisted_config.load()
        self.generation = self.persisted_config.generation
        merged = dict(self.persisted_config.values)
        merged.update(self.explicit_settings)
        self.startup_overrides = overridden(self.persisted_config.values, self.explicit_settings)
        for key, (now, persisted) in self.startup_overrides.items():
            log.warning(
                "start-up setting %s=%s overrides %s=%s persisted by `admin config set` (generation %d); the start-up setting "
                "is in effect (drop it from --set/--config to keep the persisted one)",
                key,
                now,
                key,
                persisted,
                self.generation,
            )
        try:
            self.config = StoreConfig(merged)
        except ConfigError as e:
            log.error("ignoring persisted settings in %s: %s", self.persisted_config.path, e)
            self.config = StoreConfig(self.explicit_settings)
        self.layout = StoreLayout.of(self.root, self.config)  # storePath* may come from the persisted settings

    def _register_discovered_topics(self) -> None:
        """Queues on disk whose topic is missing from topics.json (lost metadata) are kept."""
        for topic, n in self.queues.topics().items():
            if self.topics.get(topic) is None:
                log.warning("topic %s has queues on disk but is missing from topics.json; registered", topic)
                n = max(n, self.config.defaultTopicQueueNums)
                self.topics.put(TopicConfig(topic, n, n))

    def _start_services(self) -> None:
        cfg = self.config
        cl, cp = self.commitlog, self.checkpoint
        if cfg.transientStorePoolEnable:
            self.committer = PacedService(
                "commit-commitlog",
                self._commit,
                lambda: (
                    self.config.commitIntervalCommitLog,
                    self.config.commitCommitLogLeastPages,
                    self.config.commitCommitLogThoroughInterval,
                ),
            )
            self._services.append(self.committer)
        if cfg.flushDiskType == "SYNC_FLUSH":
            self.flusher = GroupCommitService(cl, cp, self.flush_observers, self.dispatcher.wakeup, self._give_back_cache)
        else:
            self.flusher = PacedService(
                "flush-commitlog",
                self._flush_commitlog,
                lambda: (
                    self.config.flushIntervalCommitLog,
                    self.config.flushCommitLogLeastPages,
                    self.config.flushCommitLogThoroughInterval,
                ),
            )
        self.cq_flusher = PacedService(
            "flush-consumequeue",
            self._flush_consume_queues,
            lambda: (
                self.config.flushIntervalConsumeQueue,
                self.config.flushConsumeQueueLeastPages,
                self.config.flushConsumeQueueThoroughInterval,
            ),
        )
        self.disk = DiskUsage(self.layout, self.disk_probe, self.flags, self.settings)
        self.cleaner = CommitLogCleaner(cl, self.disk, self.settings, self.clock, self.retention_guard_offset)
        self.cq_cleaner = ConsumeQueueCleaner(cl, self.queues, self.index, self.settings, self.clock)
        self.disk_monitor = DiskMonitor(self.disk, self.settings)
        self.disk_monitor.check()
        cleaning = (lambda: self.config.cleanResourceInterval / 1000, lambda: self.config.cleanResourceInitialDelay / 1000)
        self._services += [
            self.flusher,
            self.dispatcher,
            self.cq_flusher,
            PeriodicService("clean-commitlog", self.cleaner.run_once, *cleaning),
            PeriodicService("clean-consumequeue", self.cq_cleaner.run_once, *cleaning),
            self.disk_monitor,
            PeriodicService("persist-offsets", self._persist_metadata, lambda: self.config.flushConsumerOffsetInterval / 1000),
        ]
        for s in self._services:
            s.start()

    def _commit(self, least_pages: int) -> None:
        if commit_all(self.commitlog, least_pages):
            self.dispatcher.wakeup()
            if self.flusher is not None:
                self.flusher.wakeup()
            self._announce()  # with a write buffer, only a commit makes an append readable

    def _announce(self) -> None:
        for listener in self.append_listeners:
            listener()

    def commit_soon(self, end: int) -> None:
        """With a write buffer (transientStorePoolEnable): commit it now, up to ``end`` at least,
        rather than at the committer's pace (every ``commitIntervalCommitLog`` ms, once
        ``commitCommitLogLeastPages`` are dirty or ``commitCommitLogThoroughInterval`` has
        passed). A SYNC master's followers read only committed bytes, so its acknowledgements
        waited for that pace: up to the thorough interval, 200 ms by default, per small send.
        Judged by where the committer has got to, not by the log's readable end: that is past
        ``end`` once a later append rolled to a segment of its own, while ``end``'s segment may
        still wait in its buffer."""
        if self.committer is not None and end > self.commitlog.committed_offset:
            self.committer.hurry()

    def _flush_commitlog(self, least_pages: int) -> bool:
        """ASYNC_FLUSH's pass: flush, then give back the page cache far behind (flush.drop_cached)."""
        moved = flush_commitlog(self.commitlog, self.checkpoint, self.flush_observers, least_pages)
        if moved:
            self._give_back_cache()
        return moved

    def _give_back_cache(self) -> None:
        drop_cached(self.commitlog, self.dispatcher.reput_from, self.config.cachedCommitLogBytes)

    def _flush_consume_queues(self, least_pages: int) -> None:
        """Flush the queues written since the last pass; every ``queueStateInterval`` (when any
        changed) also save their ends: the dispatch position first, the ends, the flush, then
        the file (queue_state.py says why in that order). A cut or a drop of queues meanwhile
        (``state_epoch``) or a failed flush cancels the save."""
        queues = self.queues
        now = time.monotonic()
        save = queues.changes != self._state_saved_changes and (now - self._state_saved_at) * 1000 >= self.config.queueStateInterval
        if save:
            epoch = queues.state_epoch
            flushed = self.commitlog.flushed_offset
            dispatched = self.dispatcher.reput_from
            changes = queues.changes
            records = queues.snapshot()
        ok = flush_consume_queues(queues, self.checkpoint, self.dispatcher.logics_timestamp, 0 if save else least_pages)
        if save and ok and self._save_queue_state(dispatched, flushed, records, clean=False, epoch=epoch):
            self._state_saved_changes, self._state_saved_at = changes, now

    def _save_queue_state(self, dispatched: int, flushed: int, records: list[QueueRecord], clean: bool, epoch: int | None = None) -> bool:
        """Write the state unless queues were cut or dropped since ``epoch``; True when written."""
        queues = self.queues
        try:
            queues.sync_new_dirs()
            with queues.state_lock:
                if epoch is not None and epoch != queues.state_epoch:
                    return False
                queue_state.save(self.layout.consumequeue_dir, QueueState(clean, dispatched, flushed, self.config.cq_file_size, records))
            if not clean and not self._abort_stamped:
                # this run's ends are on disk now: from here on a crash of the process alone
                # may trust them (abort_file.py); before, the next start checks them all
                abort_file.stamp(self.abort_path, self._identity_dirs())
                self._abort_stamped = True
            return True
        except OSError as e:  # (a full disk): the next start scans what it cannot trust
            log.warning("could not save the consume queues' state: %s", e)
            if clean:
                raise
            return False

    def _persist_metadata(self) -> None:
        """Consumer offsets and subscription groups every ``flushConsumerOffsetInterval``."""
        self.offsets.persist_if_dirty()
        self.groups.persist_if_dirty()

    def shutdown(self) -> None:
        """Clean shutdown: refuse new work, drain, flush everything, persist, remove ``abort``."""
        if self.state == "created":
            self._release_lock()  # locked by lock(), never started
            return
        if self.state == "shutdown":
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
                commit_all(self.commitlog, 0)
            assert self.flusher is not None
            self.flusher.stop()
            flush_commitlog(self.commitlog, self.checkpoint, self.flush_observers, 0)
            self.dispatcher.stop()
            self.dispatcher._dispatch_to(self.dispatcher.bound())
            self.cq_flusher.stop()
            self._flush_consume_queues(0)
            self._save_queue_state(self.dispatcher.reput_from, self.commitlog.flushed_offset, self.queues.snapshot(), clean=True)
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
        closers: list[Callable[[], object]] = [
            lambda: self.commitlog.close(),
            lambda: self.queues.close(),
            lambda: self.index.close(),
            lambda: self.checkpoint.close(),
        ]
        for closer in closers:
            try:
                closer()
            except Exception:
                pass

    def __enter__(self) -> MessageStore:
        if self.state == "created":
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def running(self) -> bool:
        return self.state == "running"

    # ================================================================== flags

    def mark_unavailable(self, reason: Unavailable) -> None:
        self.flags.mark(reason)

    def clear_unavailable(self, reason: Unavailable) -> None:
        self.flags.clear(reason)

    @property
    def disk_full(self) -> bool:
        return self.flags.disk_full

    def _write_refusal(self) -> Unavailable | None:
        if self.state != "running":
            return Unavailable.RECOVERING if self.state in ("created", "recovering") else Unavailable.SHUTDOWN
        if self.follower:
            return Unavailable.SLAVE
        return self.flags.refusal()

    # ================================================================== replication (ha/ drives these)

    @property
    def follower(self) -> bool:
        return self._follower

    @follower.setter
    def follower(self, value: bool) -> None:
        """A follower writes its master's bytes straight into the files: a replicated chunk goes
        at the log's write position, which a write buffer's committed end lags behind
        (transientStorePoolEnable is a master's; RocketMQ's slaves do not use it either)."""
        self._follower = value
        if self.commitlog is not None:
            self.commitlog.use_write_buffers(not value)

    def append_replicated(self, phy: int, data: bytes) -> int:
        """A follower writes its master's commit-log bytes at the master's offsets; its own
        dispatch then builds its consume queues and index. Returns the new end."""
        if self.state != "running":
            raise StoreStateError(f"the store is {self.state}")
        end = self.commitlog.append_raw(phy, data)
        self.dispatcher.wakeup()
        return end

    def _followed_metadata(self) -> tuple[tuple[str, Any], ...]:
        """The metadata files a follower takes from its master, by their snapshot names."""
        return (("topics", self.topics), ("offsets", self.offsets), ("groups", self.groups), ("users", self.users))

    def metadata_snapshot(self) -> dict[str, str]:
        """Topics, consumer offsets and subscription groups as their files hold them."""
        out = {}
        for name, f in self._followed_metadata():
            with f.lock:
                out[name] = json.dumps(f.encode(), sort_keys=True)
        return out

    def apply_metadata(self, snapshot: Mapping[str, str], deleted: Mapping[str, int] | None = None) -> None:
        """A follower takes its master's metadata files (and persists what changed). Consumer
        offsets are clamped to what this copy holds: after a failover a group must not be past
        messages the new master then gives new offsets to (they would never be consumed).
        Topics the master deleted (``deleted``) lose their queues here too (drop_deleted_topics)."""
        for name, f in self._followed_metadata():
            raw = snapshot.get(name)
            if not raw:
                continue
            if name == "offsets":
                self._applied_offsets = raw
                self._apply_offsets(raw)
                continue
            with f.lock:
                if json.dumps(f.encode(), sort_keys=True) == raw:
                    continue
                f.decode(json.loads(raw))
                f.changed()
            f.persist()
        if deleted:
            dropped = self.drop_deleted_topics(deleted)
            if dropped:
                log.info("dropped the queues of topics the master deleted: %s", ", ".join(dropped))

    def _apply_offsets(self, raw: str) -> None:
        offsets = ConsumerOffsets(self.layout.config_dir)
        offsets.decode(json.loads(raw))
        for key, queues in offsets.table.items():
            topic = key.partition("@")[0]
            for qid, off in queues.items():
                cq = self.queues.get(topic, qid)
                queues[qid] = min(off, cq.max_offset if cq is not None else 0)
        with self.offsets.lock:
            if offsets.table == self.offsets.table:
                return
            self.offsets.table = offsets.table
            self.offsets.changed()
        self.offsets.persist()

    def take_writes(self, opening: Callable[[int], None], timeout: float = 30.0) -> None:
        """A follower becomes master: dispatch everything it copied, then continue every queue
        from its consume queue's end (a follower never assigned queue offsets itself; RocketMQ
        recovers its topicQueueTable the same way when a slave takes over). ``opening`` gets the
        log's end before the first put can land (the new term's epoch starts there).

        The copy may end inside a record (its master died mid-chunk, or a record longer than a
        chunk was still arriving): that partial record is cut first, as RocketMQ's
        truncateInvalidMsg does, so dispatch reaches the end and the first put lands right after
        the last whole record. Appends still running were awaited by the follower's stop."""
        self.dispatcher.limit = None  # a master of its own now: everything it holds is the group's
        deadline = time.monotonic() + timeout
        while True:
            end = self.commitlog.max_offset
            if self.config.flushDiskType == "SYNC_FLUSH":
                req = self.request_flush(end)
                if req is not None:
                    req.event.wait(max(0.0, deadline - time.monotonic()))
            if self.dispatcher.wait_dispatched(end, 0.2):
                break
            at = self.dispatcher.reput_from
            if at < end and self.commitlog.partial_record_at(at):
                log.warning("cutting a partial record at %d (%d bytes to the log's end): its master never sent the rest", at, end - at)
                self.truncate_to(at)
                continue
            if time.monotonic() > deadline:
                raise StoreStateError(f"dispatch did not catch up with the copied log within {timeout:.0f} s (at {at} of {end})")
        with self.commitlog.lock:
            self.queues.rebuild_offsets()
            if self._applied_offsets:
                self._apply_offsets(self._applied_offsets)  # every queue's end is final now
            opening(self.commitlog.max_offset)
            self._follower = False
        self.commitlog.use_write_buffers(True)

    def start_over(self) -> None:
        """Forget the whole copy (commit log, consume queues, index): a follower whose log ends
        below what its master still keeps takes the master's log again from its first segment."""
        self.queues.invalidate_state()
        with self.dispatcher.paused(), self.commitlog.lock:
            truncate_all(self.commitlog, self.queues, self.index, self.dispatcher, 0)
            self.commitlog.segments.destroy_all()
            self.queues.drop_all()
            self.dispatcher.reput_from = 0
        self.queues.invalidate_state()

    def truncate_to(self, offset: int) -> int:
        """Cut the commit log back to ``offset`` (zeroing the stale tail), with its consume
        queues and index: a rejoining member drops what its new master never had."""
        self.queues.invalidate_state()  # the saved ends may lie past the cut
        try:
            with self.dispatcher.paused(), self.commitlog.lock:
                return truncate_all(self.commitlog, self.queues, self.index, self.dispatcher, offset)
        finally:
            self.queues.invalidate_state()  # and a save whose snapshot raced with the cut is not written

    @property
    def disk_ratio(self) -> float | None:
        disk = getattr(self, "disk", None)
        return disk.ratio if disk is not None else None

    def disk_usage(self) -> float | None:
        return self.disk.read()

    def apply_disk_usage(self, ratio: float) -> None:
        self.disk.apply(ratio)

    # ================================================================== queues

    def consume_queue(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None:
        return self.queues.get(topic, queue_id, create)

    def consume_queues(self) -> list[ConsumeQueue]:
        return self.queues.all()

    def queues_of(self, topic: str) -> list[int]:
        return self.queues.queues_of(topic)

    def _index_file_full(self, end_ts: int) -> None:
        self.checkpoint.index_msg_timestamp = end_ts
        try:
            self.checkpoint.flush()
        except OSError:
            log.exception("checkpoint flush failed")

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        """``listener(topic, queue_id, max_offset)`` runs on the dispatcher thread after new
        units land (long polling hangs off this)."""
        self.dispatcher.listeners.append(listener)

    # ================================================================== topics

    def create_topic(self, topic: str, queues: int | None = None, perm: int | None = None, message_type: str | None = None) -> TopicConfig:
        """Create a topic, or change an existing one's queues (None: unchanged), permissions
        and ``message.type`` (None: unchanged)."""
        err = codec.topic_error(topic)
        if err:
            raise ValueError(err)
        existing = self.topics.get(topic)
        n = queues or (existing.write_queue_nums if existing is not None else self.config.defaultTopicQueueNums)
        if not 1 <= n <= 1024:
            raise ValueError("queues must be between 1 and 1024")
        if perm is not None and perm not in (PERM_READ | PERM_WRITE, PERM_READ, PERM_WRITE):
            raise ValueError(f"perm must be 6 (read and write), 4 (read only) or 2 (write only), got {perm}")
        if message_type == "UNSPECIFIED":  # (RocketMQ's TopicMessageType.UNSPECIFIED: the attribute removed)
            message_type = ""
        elif message_type and message_type not in MESSAGE_TYPES:
            raise ValueError(f"message_type must be one of {', '.join(MESSAGE_TYPES)} or UNSPECIFIED, got {message_type[:40]!r}")
        if existing is None or n > existing.write_queue_nums:
            self.limits.check_new_queues(topic, n - (existing.write_queue_nums if existing else 0))  # ResourceLimit
        want = existing if existing is not None else TopicConfig(topic, n, n)
        want = replace(want, read_queue_nums=n, write_queue_nums=n)  # (what RocketMQ wrote in it stays)
        if perm is not None:
            want = replace(want, perm=perm)
        if message_type is not None and message_type != want.message_type:
            want = want.with_message_type(message_type)
        if want == existing:
            return existing
        return self.topics.put(want)

    def topic_messages(self, topic: str) -> int:
        """Messages the topic's queues on this node hold (not yet expired)."""
        held = 0
        for qid in self.queues.queues_of(topic):
            cq = self.queues.get(topic, qid)
            if cq is not None:
                held += max(0, cq.max_offset - cq.min_offset)
        return held

    def delete_topic(self, topic: str, force: bool = False, dry_run: bool = False, wait_s: float = 10.0) -> tuple[bool, int]:
        """(deleted, messages held). Its entry, queues and the groups' offsets in it go; refused
        (TopicNotEmpty) while it holds messages, unless ``force``; ``dry_run``: only count.

        Appends to the topic are refused while it is deleted, those under way are waited for,
        and everything in the commit log is dispatched before the count, so a message
        acknowledged just before is counted (and dropped only with ``force``), and no unit of
        the topic is dispatched into a queue after it was dropped (StoreStateError when the
        dispatcher does not catch up within ``wait_s``)."""
        with self._inflight_cond:
            self._deleting.add(topic)
        try:
            with self._inflight_cond:
                if not self._inflight_cond.wait_for(lambda: not self._inflight_topics.get(topic), timeout=wait_s):
                    raise StoreStateError(f"topic {topic}: appends to it did not finish within {wait_s:g}s: try again")
            if not self.dispatcher.wait_dispatched(self.commitlog.max_offset, wait_s):
                raise StoreStateError(
                    f"topic {topic}: the commit log is not all dispatched yet (behind by {self.dispatcher.behind_bytes} bytes): try again"
                )
            with self.dispatcher.paused():
                held = self.topic_messages(topic)
                if dry_run:
                    return False, held
                if held and not force:
                    raise TopicNotEmpty(topic, held)
                gone = self.topics.delete(topic)
                for qid in self.queues.queues_of(topic):
                    self.queues.drop(topic, qid)
                self.deleted_topics[topic] = self.commitlog.max_offset  # (for followers: RECENT_DELETIONS kept)
                while len(self.deleted_topics) > RECENT_DELETIONS:
                    del self.deleted_topics[next(iter(self.deleted_topics))]
        finally:
            with self._inflight_cond:
                self._deleting.discard(topic)
        self.drop_topic_offsets(topic)
        self._state_saved_at = 0.0  # the queues' state without it, at the queue flusher's next pass
        flusher = getattr(self, "cq_flusher", None)  # (none before start)
        if flusher is not None:
            flusher.wakeup()
        return gone, held

    def drop_topic_offsets(self, topic: str) -> None:
        """The groups' positions in a deleted topic, durable on return (a topic of the name made
        later starts at 0: an old position would skip its messages)."""
        self.offsets.drop_topic(topic)
        self.offsets.persist()

    def drop_deleted_topics(self, deleted: Mapping[str, int]) -> list[str]:
        """A follower: drop the queues of topics its master deleted (topic → the master's log end
        when it did: every unit of the topic lies below) once its own dispatch has passed that
        end, and only queues holding nothing from past it (a topic made again since keeps its
        queues: their old units are then served until they expire, as the master's are not)."""
        due = []
        for topic, end in deleted.items():
            if self.dispatcher.reput_from < end or self.topics.get(topic) is not None:
                continue
            queues = [self.queues.get(topic, qid) for qid in self.queues.queues_of(topic)]
            if queues and all(cq is not None and cq.max_phy_offset <= end for cq in queues):
                due.append(topic)
        if not due:
            return []
        with self.dispatcher.paused():
            for topic in sorted(due):
                for qid in self.queues.queues_of(topic):
                    self.queues.drop(topic, qid)
        return sorted(due)

    def topic_list(self) -> list[TopicConfig]:
        return sorted(self.topics.topics.values(), key=lambda t: t.name)

    # ================================================================== write path

    def put_message(self, msg: codec.Message) -> PutResult:
        return self.put_messages(msg.topic, msg.queue_id, [msg])

    def put_messages(self, topic: str, queue_id: int, msgs: Sequence[codec.Message]) -> PutResult:
        """Append a batch for one queue: consecutive records, one store time, consecutive
        queue offsets (docs/store-format.md §4)."""
        refusal = self._write_refusal()
        if refusal is not None:
            return failed(PutStatus.SERVICE_NOT_AVAILABLE, self.flags.text(refusal), refusal)
        checked = self.check_destination(topic, queue_id, len(msgs))
        if checked is not None:
            return checked
        try:
            batch = codec.prepare_batch(
                topic, queue_id, msgs, self.commitlog.store_host_bytes, self.clock.now_ms(), self.config.maxMessageSize
            )
        except codec.BatchError as e:
            self.stats["put_failures"] += 1
            reason = e.reason if len(msgs) == 1 else f"message {e.index}: {e.reason}"
            return failed(PutStatus[e.status], reason)
        result = self.put_prepared(batch)
        if result.status.stored:  # (the broker's own puts, an embedding program's: nobody else dispatches them)
            self.dispatcher.wakeup()
        return result

    def check_destination(self, topic: str, queue_id: int, count: int) -> PutResult | None:
        """Topic name, queue range (auto-creating the topic) and a non-empty batch."""
        err = codec.topic_error(topic)
        if err:
            return failed(PutStatus.MESSAGE_ILLEGAL, err)
        if count == 0:
            return failed(PutStatus.MESSAGE_ILLEGAL, "a batch needs at least one message")
        if topic in self._deleting:
            return failed(PutStatus.MESSAGE_ILLEGAL, f"topic {topic} is being deleted")
        tc = self.topics.get(topic)
        if tc is None:
            if not self.config.autoCreateTopicEnable:
                return failed(PutStatus.MESSAGE_ILLEGAL, f"topic {topic} does not exist")
            try:
                tc = self.create_topic(topic)
            except ResourceLimit as e:
                return failed(PutStatus.SERVICE_NOT_AVAILABLE, str(e), Unavailable.RESOURCE_LIMIT)
        if not tc.perm & PERM_WRITE:
            return failed(PutStatus.MESSAGE_ILLEGAL, f"topic {topic} is read only (perm {tc.perm}): sending to it is forbidden")
        if not 0 <= queue_id < tc.write_queue_nums:
            return failed(PutStatus.MESSAGE_ILLEGAL, f"queue id {queue_id} is out of range: topic {topic} has {tc.write_queue_nums} queues")
        return None

    def put_prepared(self, batch: codec.Batch, defer_flush: bool = False) -> PutResult:
        """Append a batch already prepared (validated and encoded) for one queue; the API
        prepares every queue's batch of a request before appending any of them.

        ``defer_flush``: under SYNC_FLUSH, return once appended; the caller then waits for
        :meth:`request_flush` itself (the gRPC server awaits it on its event loop).

        The caller dispatches what it appended or wakes the dispatcher (the send paths do
        one or the other after their answer; :meth:`put_messages` wakes it): the dispatcher
        polls only every ``dispatch.POLL_INTERVAL`` for appends that woke nobody."""
        refusal = self._write_refusal()
        if refusal is not None:
            return failed(PutStatus.SERVICE_NOT_AVAILABLE, self.flags.text(refusal), refusal)
        topic = batch.topic
        with self._inflight_cond:
            if topic in self._deleting:
                return failed(PutStatus.MESSAGE_ILLEGAL, f"topic {topic} is being deleted")
            self._inflight += 1
            self._inflight_topics[topic] = self._inflight_topics.get(topic, 0) + 1
        try:
            result = self._append(batch, defer_flush)
        finally:
            with self._inflight_cond:
                self._inflight -= 1
                left = self._inflight_topics.pop(topic) - 1
                if left:
                    self._inflight_topics[topic] = left
                if self._inflight == 0 or (not left and self._deleting):
                    self._inflight_cond.notify_all()
        if result.status.stored:
            self.stats["put_messages"] += len(batch)
            self.stats["put_bytes"] += batch.total
            self._announce()
        else:
            self.stats["put_failures"] += 1
        return result

    def group_commits(self) -> tuple[int, int] | None:
        """(flushes that answered waiting sends, sends they answered) under SYNC_FLUSH."""
        f = self.flusher
        return (f.commits, f.requests_answered) if isinstance(f, GroupCommitService) else None

    def request_flush(self, end_offset: int) -> FlushRequest | None:
        """A group-commit request for everything below ``end_offset`` (None under ASYNC_FLUSH)."""
        if isinstance(self.flusher, GroupCommitService):
            return self.flusher.request(end_offset)
        return None

    def _append(self, batch: codec.Batch, defer_flush: bool = False) -> PutResult:
        cl = self.commitlog
        topic, queue_id = batch.topic, batch.queue_id
        key = (topic, queue_id)
        with self.queues.append_lock(key):
            qoff = self.queues.next_offset(key)
            try:
                app = cl.append(
                    batch,
                    qoff,
                    self.config.osPageCacheBusyTimeOutMills / 1000,
                    on_appended=lambda phy, end, ts: self.dispatcher.add_hint(
                        Hint(
                            phy,
                            end,
                            topic,
                            queue_id,
                            qoff,
                            ts,
                            batch.sizes,
                            batch.tags_codes,
                            batch.key_hashes,
                            batch.key_owner,
                            batch.sys_flags,
                            batch.takes_offset,
                        )
                    ),
                )
            except AppendError as e:
                return failed(PutStatus[e.status], e.reason)
            self.queues.advance(key, qoff + batch.count_offsets)
        status = PutStatus.PUT_OK
        # The dispatcher is not woken here, under the put: it took the GIL while this thread sat
        # in pwrite, and the producer then waited out whole switch intervals (half the
        # throughput). The caller wakes it, or dispatches itself, afterwards (put_prepared).
        if isinstance(self.flusher, GroupCommitService) and batch.wait_flush and not defer_flush:
            req = self.flusher.request(app.end_offset)
            if not req.wait(self.config.syncFlushTimeout / 1000):
                status = PutStatus.FLUSH_DISK_TIMEOUT
        return PutResult(
            status,
            "",
            app.phy_offset,
            qoff,
            batch.sizes,
            app.store_timestamp,
            cl.store_host_bytes,
            batch.takes_offset if batch.count_offsets != len(batch) else None,
        )

    # ================================================================== read path

    def _corrected(self, offset: int, suggested: int) -> int:
        """Where a pull past the end of a queue (or of a queue not there) should go on from: the
        queue's word on a master, the caller's own offset on a follower (RocketMQ's
        ``nextOffsetCorrection`` with ``offsetCheckInSlave`` off). A follower that is behind its
        master, or has no consume queue yet, would otherwise send a consumer back to the queue's
        start (every message again)."""
        return offset if self._follower else suggested

    def get_message(
        self,
        group: str | None,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int = 32,
        max_bytes: int = 4 * 1024 * 1024,
        tag_filter: Iterable[str] | str | Selector | None = None,
    ) -> GetResult:
        """Pull from one queue (docs/store-format.md §7). Release the result when done with its views.

        ``tag_filter``: a tag expression (``"a || b"``, matched by the units' tag hashes, then
        the records' tags), or a compiled SQL92 selector (matched by each record's properties)."""
        cq = self.consume_queue(topic, queue_id)
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, self._corrected(offset, 0), 0, 0)
        min_off, max_off = cq.min_offset, cq.max_offset
        if max_off == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, self._corrected(offset, 0), min_off, max_off)
        if offset < min_off:
            # (moved on even on a follower, unlike the reference: what lies below a follower's first
            # message was cleaned on its master too, and keeping the offset stalls the consumer)
            return GetResult(GetStatus.OFFSET_TOO_SMALL, min_off, min_off, max_off)
        if offset == max_off:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_off, max_off)
        if offset > max_off:
            # as the reference: a queue that never lost a message (min 0) sends a runaway offset
            # back to its start, so a consumer re-reads instead of skipping what is there
            return GetResult(
                GetStatus.OFFSET_OVERFLOW_BADLY, self._corrected(offset, min_off if min_off == 0 else max_off), min_off, max_off
            )
        selector: Selector | None = None
        tags: frozenset[str] | None = None
        if isinstance(tag_filter, Selector):
            selector = tag_filter
        else:
            tags = _tag_set(tag_filter)
        codes = {codec.tags_code(t) for t in tags} if tags else None
        result = GetResult(GetStatus.NO_MATCHED_MESSAGE, offset, min_off, max_off)
        removing = False
        reader = self.commitlog.reader(result)
        next_offset = offset
        scanned = 0
        limit = max(MAX_SCAN_UNITS, max_msgs)
        done = False
        repaired: set[int] = set()  # offsets a repair was tried at (once per read)
        while not done and next_offset < max_off and scanned < limit:
            units = cq.units(next_offset, min(limit - scanned, 256))
            if not units:
                if next_offset not in repaired:  # a segment file cut short or gone: its units are written again
                    repaired.add(next_offset)
                    if self.repairs.repair(cq, next_offset, cq.segment_range(next_offset)[1]):
                        continue
                break
            for phy, size, tag in units:
                if len(result) >= max_msgs or (result.buffer_total and result.buffer_total + size > max_bytes):
                    done = True
                    break
                unit_offset = next_offset
                if is_filler(phy, size):
                    scanned += 1
                    next_offset += 1
                    continue
                if codes is not None and tag not in codes:
                    scanned += 1
                    next_offset += 1
                    continue
                view = reader.record(phy, size) if size > 0 else ReadMiss.NOT_A_RECORD  # (a unit is never all zeros)
                if view is ReadMiss.GONE and phy + size <= self.commitlog.min_offset:  # deleted by retention
                    scanned += 1
                    next_offset += 1
                    if not result.buffer_total:
                        removing = True
                    continue
                if not isinstance(view, memoryview) or not record_matches(view, size, cq.queue_id, unit_offset):
                    # a damaged unit (it points at no record, or at another): written again from
                    # the commit log, then read again; what cannot be found is skipped, never
                    # served as bytes that are not its record
                    if isinstance(view, memoryview):
                        view.release()
                    if unit_offset not in repaired:
                        repaired.add(unit_offset)
                        if self.repairs.repair(cq, unit_offset, unit_offset + 1):
                            break  # units read again from here
                    self._bad_unit(cq, unit_offset, phy, size)
                    scanned += 1
                    next_offset += 1
                    continue
                scanned += 1
                next_offset += 1
                if tags is not None and _record_tags(view) not in tags:
                    view.release()
                    continue
                if selector is not None and not selector.matches(codec.decode(view, 0, with_body=False).properties):
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
            log.error(
                "consume queue %s/%d offset %d points at no record (commit-log offset %d, size %d); skipped "
                "(msgstore fsck lists such units)",
                cq.topic,
                cq.queue_id,
                offset,
                phy,
                size,
            )

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

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int, durable: bool = True) -> None:
        """A group's next offset for a queue, on disk before this returns (unless ``durable``
        is False: then within ``flushConsumerOffsetInterval``); concurrent commits share writes."""
        err = group_error(group) or codec.topic_error(topic)
        if err:
            raise ValueError(err)
        if offset < 0:
            raise ValueError("offset must be >= 0")
        self.groups.ensure(group)
        self.offsets.commit(group, topic, queue_id, offset, durable=durable)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        return self.offsets.query(group, topic, queue_id)

    def committed_groups(self) -> dict[str, set[str]]:
        """group → the topics it committed on here."""
        out: dict[str, set[str]] = {}
        for key in list(self.offsets.table):
            topic, _, group = key.partition("@")
            out.setdefault(group, set()).add(topic)
        return out

    def group_progress(self, group: str, topic: str, queue_ids: Iterable[int] | None = None) -> list[QueueProgress]:
        """Per queue of the topic here: the group's committed offset and its lag (a queue it
        never committed on counts from the queue's start). What ``msgstore groups``, the
        operator's scale-down guard and ``consumer_lag`` all read."""
        qmap = self.offsets.offsets_of_group(group).get(topic, {})
        out = []
        for qid in self.queues_of(topic) if queue_ids is None else queue_ids:
            cq = self.consume_queue(topic, qid)
            lo, hi = (cq.min_offset, cq.max_offset) if cq is not None else (0, 0)
            committed = qmap.get(qid, -1)
            out.append(QueueProgress(qid, committed, lo, hi, max(0, hi - max(committed, lo))))
        return out

    def consumer_lag(self) -> dict[str, int]:
        """Messages not yet consumed per group that committed here, over the topics it consumes."""
        return {
            group: sum(p.lag for topic in sorted(topics) for p in self.group_progress(group, topic))
            for group, topics in sorted(self.committed_groups().items())
        }

    def messages_held(self) -> int:
        """Messages still stored (between every queue's min and max offsets)."""
        return sum(max(0, cq.max_offset - cq.min_offset) for cq in self.consume_queues())

    def add_retention_holder(self, holder: Callable[[], int | None]) -> None:
        """``holder()`` names a commit-log offset whose segment and every later one the
        time-based cleaner keeps (a broker service's oldest pending message), None for none."""
        self._retention_holders.append(holder)

    def retention_guard_offset(self) -> int | None:
        """Lowest phy offset not yet consumed by a guarded group (§12.5) or held by a broker
        service (delayed messages not delivered yet), None if nothing is held."""
        held = [p for p in (h() for h in self._retention_holders) if p is not None]
        lowest: int | None = min(held) if held else None
        groups = self.config.guard_groups
        if not groups:
            return lowest
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
        for (topic, qid), cq in self.queues.items():
            if 0 <= cq.max_phy_offset <= cl_min and cq.max_phy_offset != -1 and cl_min > 0:
                self.queues.drop(topic, qid)
                gone.append(f"{topic}/{qid}")
        return gone

    def clean_unused_topics(self) -> list[str]:
        """Destroy the queues of topics that are not in topics.json."""
        gone = []
        for (topic, qid), _cq in self.queues.items():
            if self.topics.get(topic) is None:
                self.queues.drop(topic, qid)
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
            self._check_files_allow(StoreConfig(after_restart), restart)
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

    def _check_files_allow(self, after: StoreConfig, restart: Mapping[str, Any]) -> None:
        """Refuse a restart-only change the files on disk would refuse at the next start (a
        segment or index file of another size is never resized): accepted now, it would only
        fail later, with the store down."""
        cl = self.commitlog
        if "mappedFileSizeCommitLog" in restart and cl.segments.segments and after.mappedFileSizeCommitLog != cl.segment_size:
            raise ConfigError(
                "mappedFileSizeCommitLog",
                f"the commit log holds segments of {cl.segment_size} bytes, which a store with segments of "
                f"{after.mappedFileSizeCommitLog} bytes cannot open (a new size needs a new store)",
            )
        if "mappedFileSizeConsumeQueue" in restart and after.cq_file_size != self.config.cq_file_size:
            if any(cq.segments.segments for cq in self.queues.all()):
                raise ConfigError(
                    "mappedFileSizeConsumeQueue",
                    f"the consume queues hold files of {self.config.cq_file_size} bytes, which a store with "
                    f"{after.cq_file_size}-byte files cannot open (a new size needs a new store)",
                )
        for key in ("maxHashSlotNum", "maxIndexNum"):
            if key in restart and self.index.files and after.get(key) != self.config.get(key):
                raise ConfigError(
                    key,
                    f"the index files are {self.config.maxHashSlotNum} slots by {self.config.maxIndexNum} entries, "
                    "which a store with another geometry cannot open (delete the index directory to have it rebuilt)",
                )

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
            "unavailable": self.flags.names(),
            "disk_full": self.disk_full,
            "disk_usage": self.disk_ratio,
            "config_generation": self.generation,
            "pending_restart": dict(self.pending_restart),
            "startup_overrides": {k: {"start": v[0], "persisted": v[1]} for k, v in self.startup_overrides.items()},
            "stats": dict(self.stats),
        }
        if cl is not None and self.state in ("running", "shutting_down"):
            out.update(
                {
                    "min_phy_offset": cl.min_offset,
                    "max_phy_offset": cl.max_offset,
                    "flushed_phy_offset": cl.flushed_offset,
                    "dispatch_behind_bytes": self.dispatcher.behind_bytes,
                    "commitlog_segments": len(cl.segments.segments),
                    "consume_queues": len(self.queues),
                    "consume_queue_segments": sum(len(cq.segments.segments) for cq in self.consume_queues()),
                    "index_files": len(self.index.files),
                    "topics": len(self.topics.topics),
                    "checkpoint": self.checkpoint.as_dict(),
                    "messages_held": self.messages_held(),
                    "consumer_lag": self.consumer_lag(),
                }
            )
        return out


def overridden(persisted: Mapping[str, Any], explicit: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Keys set at start-up to another value than the one persisted by ``admin config set``."""
    from .config import KEYS, _coerce

    out = {}
    for key, value in explicit.items():
        if key in persisted and key in KEYS:
            try:
                now, before = _coerce(key, KEYS[key], value), _coerce(key, KEYS[key], persisted[key])
            except ConfigError:
                continue
            if now != before:
                out[key] = (now, before)
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


def _record_tags(view: memoryview) -> str | None:
    """TAGS of a record view, decoded only far enough to find the properties."""
    msg_props = codec.decode(view, 0, with_body=False).properties
    return msg_props.get(codec.PROP_TAGS)
