"""Shared helpers for benchmarks: repetition with median and range, results on disk."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
REPEAT = int(os.environ.get("BENCH_REPEAT", "3"))


@dataclass
class Measure:
    scenario: str
    unit: str
    values: list[float]
    target: str = ""
    notes: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def line(self) -> str:
        lo, hi = min(self.values), max(self.values)
        return f"{self.scenario:<58} {self.median:>12,.1f} {self.unit:<8} (min {lo:,.1f}, max {hi:,.1f}) {self.target}"


def repeat(fn: Callable[[], float], n: int = REPEAT) -> list[float]:
    return [fn() for _ in range(n)]


def machine() -> dict:
    info = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
        "machine": platform.machine(),
    }
    try:
        info["cpu"] = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        mem = next(line for line in open("/proc/meminfo") if line.startswith("MemTotal"))
        info["memory_gib"] = round(int(mem.split()[1]) / 1024 / 1024, 1)
    except (OSError, StopIteration):
        pass
    return info


def dd_write_rate(directory: str, mib: int = 512) -> float:
    """The disk's sequential write rate (MB/s) as ``dd ... conv=fdatasync`` reports it."""
    path = os.path.join(directory, "dd.bench")
    t = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mib}", "conv=fdatasync"], check=True, capture_output=True)
    dt = time.perf_counter() - t
    os.unlink(path)
    return mib * 1024 * 1024 / dt / 1e6


def save(name: str, measures: list[Measure], extra: dict | None = None) -> str:
    os.makedirs(RESULTS, exist_ok=True)
    data = {"machine": machine(), "measures": [asdict(m) | {"median": m.median} for m in measures], **(extra or {})}
    path = os.path.join(RESULTS, f"{name}.json")
    with open(path, "w") as f:
        json.dump(data, f, indent=2)
    return path
