"""Where everything of a store lives under its root (docs/store-format.md §1).

The one place that knows directory and file names, how segment and index files are named and
listed, an index file's geometry, and the ``storePath*`` settings that move the commit log,
the consume queues or the index elsewhere. The engine, the offline tools (``inspect``,
``fsck``) and the pipeline's file readers all ask it, so they cannot disagree.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from ..record import codec
from .config import StoreConfig

COMMITLOG = "commitlog"
CONSUMEQUEUE = "consumequeue"
INDEX = "index"
CONFIG = "config"
CHECKPOINT = "checkpoint"
ABORT = "abort"
LOCK = "lock"
DELAY_OFFSET = "delayOffset.json"  # under config/: the delay levels' cursors (broker/delay_levels.py)
TIMER_CHECK = "timercheck"  # under config/: the timer's progress (broker/timer.py)
POP_CHECKPOINT = "popCheckpoint"  # under config/: the revive log's progress (broker/pop.py)
TRANSACTION_CHECKPOINT = "transactionCheckpoint"  # under config/: resolved half messages (broker/transactions.py)
FOLLOWED_BROKER_FILES = (DELAY_OFFSET, TIMER_CHECK, POP_CHECKPOINT, TRANSACTION_CHECKPOINT)  # a follower copies these from its master
BROKER_STATE_END = "commitlogEnd"  # with them: the master's log end when they were taken (a follower waits to hold it)

CQ_UNIT_SIZE = 20  # [8 phy offset][4 size][8 tags code]
INDEX_HEADER_SIZE = 40  # begin/end timestamp, begin/end phy offset (longs), slot count, index count (ints)
INDEX_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20  # [4 key hash][8 phy offset][4 time diff][4 previous entry]
INDEX_ENTRIES_PER_SLOT = 4  # the reference's default ratio (20 000 000 entries for 5 000 000 slots)


def segment_name(offset: int) -> str:
    """A segment file's name: the zero-padded decimal offset of its first byte."""
    return f"{offset:020d}"


def index_file_name(ms: int) -> str:
    """An index file's name: its creation time as yyyyMMddHHmmssSSS (local time)."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms / 1000)) + f"{ms % 1000:03d}"


def segment_files(directory: str) -> list[str]:
    """The segment (or index) file names of a directory in order: digits only, regular files
    (sub-directories and strangers are not ours)."""
    if not os.path.isdir(directory):
        return []
    return sorted(n for n in os.listdir(directory) if n.isdigit() and os.path.isfile(os.path.join(directory, n)))


def first_file_size(directory: str) -> int | None:
    """The length of a directory's first non-empty segment file: offline tools take segment
    sizes from the files themselves before trusting a configuration."""
    for name in segment_files(directory):
        size = os.path.getsize(os.path.join(directory, name))
        if size:
            return size
    return None


def index_file_size(slots: int, entries: int) -> int:
    return INDEX_HEADER_SIZE + slots * INDEX_SLOT_SIZE + entries * INDEX_ENTRY_SIZE


def index_geometry(size: int, slots: int, entries: int) -> tuple[int, int] | None:
    """(slots, entries) of an index file of ``size`` bytes: the configured geometry when it
    fits, else the reference's 4 entries per slot, else None (not an index file of ours)."""
    if index_file_size(slots, entries) == size:
        return slots, entries
    per_slot = INDEX_SLOT_SIZE + INDEX_ENTRIES_PER_SLOT * INDEX_ENTRY_SIZE
    if size > INDEX_HEADER_SIZE and (size - INDEX_HEADER_SIZE) % per_slot == 0:
        s = (size - INDEX_HEADER_SIZE) // per_slot
        return s, INDEX_ENTRIES_PER_SLOT * s
    return None


@dataclass(frozen=True)
class StoreLayout:
    """The paths of one store root under a configuration."""

    root: str
    commitlog_dir: str
    consumequeue_dir: str
    index_dir: str

    @classmethod
    def of(cls, root: str, config: StoreConfig) -> StoreLayout:
        root = os.path.abspath(root)
        return cls(
            root,
            config.storePathCommitLog or os.path.join(root, COMMITLOG),
            config.storePathConsumeQueue or os.path.join(root, CONSUMEQUEUE),
            config.storePathIndex or os.path.join(root, INDEX),
        )

    @property
    def config_dir(self) -> str:
        return os.path.join(self.root, CONFIG)

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.root, CHECKPOINT)

    @property
    def abort_path(self) -> str:
        return os.path.join(self.root, ABORT)

    @property
    def lock_path(self) -> str:
        return os.path.join(self.root, LOCK)

    def config_file(self, name: str) -> str:
        return os.path.join(self.config_dir, name)

    def queue_dir(self, topic: str, queue_id: int) -> str:
        return os.path.join(self.consumequeue_dir, topic, str(queue_id))

    def queue_dirs(self) -> list[tuple[str, int, str]]:
        """Every consume queue on disk as (topic, queue id, directory), in name order; a
        directory whose name is no legal topic is not a queue (and is never read)."""
        base = self.consumequeue_dir
        out: list[tuple[str, int, str]] = []
        if not os.path.isdir(base):
            return out
        for topic in sorted(os.listdir(base)):
            tdir = os.path.join(base, topic)
            if not os.path.isdir(tdir) or codec.topic_error(topic):
                continue
            for q in sorted((q for q in os.listdir(tdir) if q.isdigit()), key=int):
                if os.path.isdir(os.path.join(tdir, q)):
                    out.append((topic, int(q), os.path.join(tdir, q)))
        return out

    def index_files(self) -> list[str]:
        return [os.path.join(self.index_dir, n) for n in segment_files(self.index_dir)]
