"""Deleting old data (docs/store-format.md §9, §12.4, §12.5).

The commit-log cleaner deletes expired segments when it is time (``deleteWhen``), when the disk
is fuller than ``diskMaxUsedSpaceRatio`` (or unreadable) or when a manual delete is pending;
above ``diskSpaceCleanForciblyRatio`` it deletes unexpired segments too, and above
``diskSpaceWarningLevelRatio`` the store refuses writes until usage drops. A separate cleaner
follows with consume queues and index files, and a disk monitor reads usage every second.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from .clock import Clock, DiskProbe
from .commitlog import CommitLog
from .config import StoreConfig
from .index import IndexService
from .layout import StoreLayout
from .queue_table import QueueTable
from .results import Unavailable
from .running_flags import RunningFlags
from .service import ServiceThread

log = logging.getLogger(__name__)

MANUAL_DELETE_RUNS = 20
Settings = Callable[[], StoreConfig]


@dataclass
class CleanRun:
    """What one cleaner run decided and did (exposed for status and tests)."""

    time_up: bool = False
    space_full: bool = False
    manual: bool = False
    forced: bool = False
    usage: float | None = None
    deleted: int = 0
    protected_from: int | None = None


class DiskUsage:
    """The store's disk usage: the commit log's partition, and the consume queues' when
    ``storePathConsumeQueue`` puts them on another; over the warning ratio the store's flags
    refuse writes."""

    def __init__(self, layout: StoreLayout, probe: DiskProbe, flags: RunningFlags, settings: Settings):
        self.layout = layout
        self.probe = probe
        self.flags = flags
        self.settings = settings
        self.ratio: float | None = None  # the last reading

    def read(self) -> float | None:
        cl_dir = self.layout.commitlog_dir
        ratio = self.probe.usage(cl_dir if os.path.isdir(cl_dir) else self.layout.root)
        cq_dir = self.layout.consumequeue_dir
        if ratio is not None and self.settings().storePathConsumeQueue and os.path.isdir(cq_dir):
            other = self.probe.usage(cq_dir)
            ratio = None if other is None else max(ratio, other)
        self.ratio = ratio
        return ratio

    def apply(self, ratio: float) -> None:
        if ratio > self.settings().diskSpaceWarningLevelRatio / 100:
            self.flags.mark(Unavailable.DISK_FULL)
        else:
            self.flags.clear(Unavailable.DISK_FULL)


class CommitLogCleaner:
    def __init__(self, commitlog: CommitLog, disk: DiskUsage, settings: Settings, clock: Clock, retention_guard: Callable[[], int | None]):
        self.commitlog = commitlog
        self.disk = disk
        self.settings = settings
        self.clock = clock
        self.retention_guard = retention_guard  # lowest phy offset a guarded group still needs (§12.5)
        self.manual_runs_left = 0
        self.clean_immediately = False
        self.last_run: CleanRun | None = None
        self.total_deleted = 0
        self.last_redelete_ms = 0
        # one run at a time: a manual delete (on an RPC thread) and the scheduled run would
        # otherwise walk the same segments, count deletions twice and share out the armed runs
        self._running = threading.Lock()
        # told the log's new first offset after segments were deleted (the replica trims its
        # epoch file's prefix there, as RocketMQ's truncateEpochFilePrefix)
        self.on_deleted: list[Callable[[int], None]] = []

    def arm_manual_delete(self) -> None:
        """Like ``mqadmin deleteExpiredCommitLog``: the next 20 runs delete expired segments."""
        with self._running:
            self.manual_runs_left = MANUAL_DELETE_RUNS

    def run_once(self) -> CleanRun:
        with self._running:
            run = self.delete_expired()
            self.redelete_hanged()
            self.last_run = run
            return run

    def delete_expired(self) -> CleanRun:
        cfg = self.settings()
        run = CleanRun()
        run.time_up = self.clock.local_hour() in cfg.delete_hours
        run.space_full = self._space_to_delete(run)
        run.manual = self.manual_runs_left > 0
        if not (run.time_up or run.space_full or run.manual):
            return run
        if run.manual:
            self.manual_runs_left -= 1
        run.forced = cfg.cleanFileForciblyEnable and self.clean_immediately
        run.protected_from = self.retention_guard()
        run.deleted = self.commitlog.delete_expired(
            cfg.fileReservedTime * 3600 * 1000,
            cfg.deleteCommitLogFilesInterval,
            cfg.destroyMapedFileIntervalForcibly,
            run.forced,
            cfg.deleteFileBatchMax,
            run.protected_from,
        )
        self.total_deleted += run.deleted
        if run.deleted:
            for listener in self.on_deleted:
                listener(self.commitlog.min_offset)
            log.info(
                "deleted %d commit-log segments (time_up=%s space_full=%s manual=%s forced=%s)",
                run.deleted,
                run.time_up,
                run.space_full,
                run.manual,
                run.forced,
            )
        elif run.space_full:
            log.warning("disk usage is high but no commit-log segment could be deleted")
        return run

    def _space_to_delete(self, run: CleanRun) -> bool:
        cfg = self.settings()
        self.clean_immediately = False
        ratio = self.disk.read()
        run.usage = ratio
        if ratio is None:
            return True
        self.disk.apply(ratio)
        if ratio > cfg.diskSpaceWarningLevelRatio / 100 or ratio > cfg.diskSpaceCleanForciblyRatio / 100:
            self.clean_immediately = True
        return bool(ratio > cfg.diskMaxUsedSpaceRatio / 100)

    def redelete_hanged(self) -> bool:
        """Every ``redeleteHangedFileInterval``, retry a first segment that readers kept from
        being deleted; it is forced once ``destroyMapedFileIntervalForcibly`` has passed."""
        cfg = self.settings()
        now = self.clock.now_ms()
        if now - self.last_redelete_ms < cfg.redeleteHangedFileInterval:
            return False
        self.last_redelete_ms = now
        return self.commitlog.segments.retry_delete_first(cfg.destroyMapedFileIntervalForcibly)


class ConsumeQueueCleaner:
    """Follows the commit log's min offset: consume-queue segments and index files below it go."""

    def __init__(self, commitlog: CommitLog, queues: QueueTable, index: IndexService, settings: Settings, clock: Clock):
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.settings = settings
        self.clock = clock
        self.last_physical_min = 0
        self._running = threading.Lock()

    def run_once(self) -> int:
        with self._running:
            return self._run()

    def _run(self) -> int:
        cl_min = self.commitlog.min_offset
        if cl_min <= self.last_physical_min:
            return 0
        self.last_physical_min = cl_min
        deleted = 0
        interval = self.settings().deleteConsumeQueueFilesInterval
        for cq in self.queues.all():
            n = cq.delete_expired(cl_min)
            cq.correct_min_offset(cl_min)
            deleted += n
            if n and interval > 0:
                self.clock.sleep(interval / 1000)
        deleted += self.index.delete_expired(cl_min)
        return deleted


class DiskMonitor(ServiceThread):
    """Reads disk usage at least once a second so DISK_FULL is set (and cleared) promptly
    instead of only inside the 10-second cleaner (§12.4)."""

    name = "disk-monitor"

    def __init__(self, disk: DiskUsage, settings: Settings):
        super().__init__()
        self.disk = disk
        self.settings = settings

    def cycle(self) -> None:
        self.check()
        self._stopped.wait(self.settings().diskMonitorInterval / 1000)

    def check(self) -> float | None:
        ratio = self.disk.read()
        if ratio is not None:
            self.disk.apply(ratio)
        return ratio


__all__ = ["CommitLogCleaner", "ConsumeQueueCleaner", "DiskMonitor", "DiskUsage", "CleanRun", "Unavailable"]
