"""Node-wide limits a new topic or queue could push over: open descriptors (RLIMIT_NOFILE),
mapped regions (vm.max_map_count) and the disk (space, inodes).

Existing queues need none of these to go on working (their files are reached through a bounded
pool), so when one is near, what is refused is the *new* queue, with RESOURCE_EXHAUSTED naming
the limit: never a write to a queue that exists (issue 21). Reading /proc is cheap next to a
topic's creation, which writes topics.json anyway.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable
from dataclasses import dataclass

NEAR = 0.9  # a limit counts as near at 90 % of it
MIN_FREE_INODES = 1_000


class ResourceLimit(RuntimeError):
    """A new topic or queue is refused: ``limit`` names what is near."""

    def __init__(self, limit: str, message: str):
        super().__init__(message)
        self.limit = limit


def _count(path: str) -> int:
    try:
        return len(os.listdir(path))
    except OSError:
        return 0


def _max_map_count() -> int:
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 65_530


def _mapped_regions() -> int:
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


@dataclass
class Usage:
    fds: int
    fd_limit: int
    maps: int
    map_limit: int
    free_inodes: int


def current_usage(root: str) -> Usage:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        st = os.statvfs(root)
        inodes = st.f_favail if st.f_files else 1 << 30  # a file system without inode counts (tmpfs may say 0)
    except OSError:
        inodes = 1 << 30
    return Usage(
        _count("/proc/self/fd"),
        soft if soft != resource.RLIM_INFINITY else 1 << 30,
        _mapped_regions(),
        _max_map_count(),
        inodes,
    )


class ResourceGuard:
    """Checks a new topic's queues against the node's limits before they are created."""

    def __init__(self, root: str, disk_full: Callable[[], bool], usage: Callable[[str], Usage] = current_usage):
        self.root = root
        self.disk_full = disk_full
        self.usage = usage

    def check_new_queues(self, topic: str, queues: int) -> None:
        u = self.usage(self.root)
        if u.fds >= NEAR * u.fd_limit:
            raise ResourceLimit(
                "open files",
                f"topic {topic} refused: the node has {u.fds} of its {u.fd_limit} open files (RLIMIT_NOFILE) in use; "
                "existing queues keep working",
            )
        if u.maps >= NEAR * u.map_limit:
            raise ResourceLimit(
                "mapped regions",
                f"topic {topic} refused: the node has {u.maps} of {u.map_limit} mapped regions (vm.max_map_count) in use",
            )
        if self.disk_full():
            raise ResourceLimit("disk", f"topic {topic} refused: the disk is over diskSpaceWarningLevelRatio")
        if u.free_inodes < MIN_FREE_INODES + queues:
            raise ResourceLimit("inodes", f"topic {topic} refused: {u.free_inodes} inodes left on the store's file system")
