"""Figures over time for the plots: a bounded series per name, sampled by the session's own
client, so a plot shows only what its viewer may read."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

KEEP = 720  # samples per series (an hour at the default 5 s)


class History:
    def __init__(self, clock: Callable[[], float] = time.time):
        self.clock = clock
        self.series: dict[str, deque[tuple[float, float]]] = {}

    def add(self, name: str, value: float, at: float | None = None) -> None:
        s = self.series.setdefault(name, deque(maxlen=KEEP))
        s.append((self.clock() if at is None else at, float(value)))

    def points(self, name: str) -> list[tuple[float, float]]:
        return list(self.series.get(name, ()))

    def rate(self, name: str) -> list[tuple[float, float]]:
        """Per-second increase between samples of a counter (a reset counts from zero)."""
        pts = self.points(name)
        out = []
        for (t0, v0), (t1, v1) in zip(pts, pts[1:]):
            if t1 > t0:
                out.append((t1, max(0.0, (v1 - v0 if v1 >= v0 else v1) / (t1 - t0))))
        return out
