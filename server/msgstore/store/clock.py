"""Time and disk-usage sources, injectable so cleanup decisions can be tested without waiting.

Every decision that depends on the hour of the day, a file's age or the disk's fullness goes
through a :class:`Clock` or a :class:`DiskProbe`. Background threads still pace themselves with
real waits; only the decisions use these.
"""

from __future__ import annotations

import math
import os
import threading
import time


class Clock:
    """Wall-clock time in milliseconds and the local hour (``deleteWhen`` is in local hours)."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def local_hour(self) -> int:
        return time.localtime(self.now_ms() / 1000).tm_hour

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class ManualClock(Clock):
    """A clock that only moves when told to; ``sleep`` advances it instead of waiting."""

    def __init__(self, now_ms: int | None = None, hour: int | None = None):
        self._now = int(time.time() * 1000) if now_ms is None else now_ms
        self._hour = hour
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        return self._now

    def local_hour(self) -> int:
        if self._hour is not None:
            return self._hour
        return super().local_hour()

    def set_hour(self, hour: int | None) -> None:
        self._hour = hour

    def advance(self, ms: int) -> None:
        with self._lock:
            self._now += ms

    def sleep(self, seconds: float) -> None:
        self.advance(int(seconds * 1000))


def usage_ratio(used: int, available: int) -> float:
    """used / (used + available), rounded up to a whole percent, as ``df`` shows it."""
    total = used + available
    if total <= 0:
        return 1.0
    return math.ceil(used * 100 / total) / 100


class DiskProbe:
    """Reads the usage ratio of the partition holding ``path``; None when it cannot be read."""

    def usage(self, path: str) -> float | None:
        try:
            st = os.statvfs(path)
        except OSError:
            return None
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        avail = st.f_bavail * st.f_frsize
        return usage_ratio(used, avail)


class FixedDiskProbe(DiskProbe):
    """A probe reporting a ratio set by the caller (None = unreadable)."""

    def __init__(self, ratio: float | None = 0.1):
        self.ratio = ratio

    def usage(self, path: str) -> float | None:
        return self.ratio
