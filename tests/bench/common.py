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

from msgstore.store.clock import DiskProbe

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
REPEAT = int(os.environ.get("BENCH_REPEAT", "3"))
# The store starts deleting segments above 75 % disk use (diskMaxUsedSpaceRatio) and refuses
# writes above 90 %. Figures taken above the first are not comparable: on 2026-11-29 a disk 91 % full of
# old benchmark files had msgstore's writes cost 2-4x the kernel time per message of the same
# run after deleting them (which also freed their page cache; the two causes were not separated).
DISK_WARN_PCT = 75


def bench_dir() -> str:
    """Where benchmark data goes: BENCH_DIR, else results/tmp (the repository's disk)."""
    return os.environ.get("BENCH_DIR") or os.path.join(RESULTS, "tmp")


def disk_used_pct(path: str) -> float | None:
    """Used share of the filesystem holding ``path``, as the store's disk check counts it (used
    against used + available: blocks reserved for root count as neither, as with df)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):  # (BENCH_DIR before it is made: its nearest parent's disk)
        path = os.path.dirname(path)
    ratio = DiskProbe().usage(path)
    return None if ratio is None else round(100 * ratio, 1)


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
        "disk_used_pct": disk_used_pct(bench_dir()),
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
