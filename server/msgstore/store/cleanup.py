"""Deleting old data (STORE_SPEC §9, §12.4, §12.5).

The commit-log cleaner deletes expired segments when it is time (``deleteWhen``), when the disk
is fuller than ``diskMaxUsedSpaceRatio`` (or unreadable) or when a manual delete is pending;
above ``diskSpaceCleanForciblyRatio`` it deletes unexpired segments too, and above
``diskSpaceWarningLevelRatio`` the store refuses writes until usage drops. A separate cleaner
follows with consume queues and index files, and a disk monitor reads usage every second.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .results import Unavailable
from .service import ServiceThread

if TYPE_CHECKING:
    from .store import MessageStore

log = logging.getLogger(__name__)

MANUAL_DELETE_RUNS = 20


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


class CommitLogCleaner:
    def __init__(self, store: "MessageStore"):
        self.store = store
        self.manual_runs_left = 0
        self.clean_immediately = False
        self.last_run: CleanRun | None = None
        self.total_deleted = 0
        self.last_redelete_ms = 0

    def arm_manual_delete(self) -> None:
        """Like ``mqadmin deleteExpiredCommitLog``: the next 20 runs delete expired segments."""
        self.manual_runs_left = MANUAL_DELETE_RUNS

    def run_once(self) -> CleanRun:
        run = self.delete_expired()
        self.redelete_hanged()
        self.last_run = run
        return run

    def delete_expired(self) -> CleanRun:
        store = self.store
        cfg = store.config
        run = CleanRun()
        run.time_up = store.clock.local_hour() in cfg.delete_hours
        run.space_full = self._space_to_delete(run)
        run.manual = self.manual_runs_left > 0
        if not (run.time_up or run.space_full or run.manual):
            return run
        if run.manual:
            self.manual_runs_left -= 1
        run.forced = cfg.cleanFileForciblyEnable and self.clean_immediately
        run.protected_from = store.retention_guard_offset()
        run.deleted = store.commitlog.delete_expired(
            cfg.fileReservedTime * 3600 * 1000, cfg.deleteCommitLogFilesInterval,
            cfg.destroyMapedFileIntervalForcibly, run.forced, cfg.deleteFileBatchMax, run.protected_from)
        self.total_deleted += run.deleted
        if run.deleted:
            log.info("deleted %d commit-log segments (time_up=%s space_full=%s manual=%s forced=%s)",
                     run.deleted, run.time_up, run.space_full, run.manual, run.forced)
        elif run.space_full:
            log.warning("disk usage is high but no commit-log segment could be deleted")
        return run

    def _space_to_delete(self, run: CleanRun) -> bool:
        store = self.store
        cfg = store.config
        self.clean_immediately = False
        ratio = store.disk_usage()
        run.usage = ratio
        if ratio is None:
            return True
        store.apply_disk_usage(ratio)
        if ratio > cfg.diskSpaceWarningLevelRatio / 100 or ratio > cfg.diskSpaceCleanForciblyRatio / 100:
            self.clean_immediately = True
        return ratio > cfg.diskMaxUsedSpaceRatio / 100

    def redelete_hanged(self) -> bool:
        """Every ``redeleteHangedFileInterval``, retry a first segment that readers kept from
        being deleted; it is forced once ``destroyMapedFileIntervalForcibly`` has passed."""
        cfg = self.store.config
        now = self.store.clock.now_ms()
        if now - self.last_redelete_ms < cfg.redeleteHangedFileInterval:
            return False
        self.last_redelete_ms = now
        return self.store.commitlog.segments.retry_delete_first(cfg.destroyMapedFileIntervalForcibly)


class ConsumeQueueCleaner:
    """Follows the commit log's min offset: consume-queue segments and index files below it go."""

    def __init__(self, store: "MessageStore"):
        self.store = store
        self.last_physical_min = 0

    def run_once(self) -> int:
        store = self.store
        cl_min = store.commitlog.min_offset
        if cl_min <= self.last_physical_min:
            return 0
        self.last_physical_min = cl_min
        deleted = 0
        interval = store.config.deleteConsumeQueueFilesInterval
        for cq in list(store.consume_queues()):
            n = cq.delete_expired(cl_min)
            cq.correct_min_offset(cl_min)
            deleted += n
            if n and interval > 0:
                store.clock.sleep(interval / 1000)
        deleted += store.index.delete_expired(cl_min)
        return deleted


class ScheduledRunner(ServiceThread):
    """Runs a cleaner every ``cleanResourceInterval`` after ``cleanResourceInitialDelay``."""

    def __init__(self, name: str, store: "MessageStore", fn):
        super().__init__()
        self.name = name
        self.store = store
        self.fn = fn
        self._first = True

    def cycle(self) -> None:
        cfg = self.store.config
        delay = cfg.cleanResourceInitialDelay if self._first else cfg.cleanResourceInterval
        self._first = False
        self._stopped.wait(delay / 1000)
        if not self.stopped:
            self.fn()


class DiskMonitor(ServiceThread):
    """Reads disk usage at least once a second so DISK_FULL is set (and cleared) promptly
    instead of only inside the 10-second cleaner (§12.4)."""

    name = "disk-monitor"

    def __init__(self, store: "MessageStore"):
        super().__init__()
        self.store = store

    def cycle(self) -> None:
        self.check()
        self._stopped.wait(self.store.config.diskMonitorInterval / 1000)

    def check(self) -> float | None:
        ratio = self.store.disk_usage()
        if ratio is not None:
            self.store.apply_disk_usage(ratio)
        return ratio


__all__ = ["CommitLogCleaner", "ConsumeQueueCleaner", "DiskMonitor", "ScheduledRunner", "CleanRun", "Unavailable"]
