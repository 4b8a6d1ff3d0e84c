"""``make bench``: every benchmark, printed and saved under tests/bench/results/.

BENCH_ONLY=store,grpc,pipeline,peers,groups,ha,scale,delays,rocketmq,latency,access,auth,console picks suites
(scale: BENCH_SCALE_QUEUES=10000,50000,100000; peers: the comparison with NATS JetStream and
Redis, written as results/peers.md and peers.png; BENCH_SCALE=0.1 for a quick look); BENCH_DIR chooses where data goes (default: a temporary
directory on the same disk as the repository).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

from . import (
    bench_access,
    bench_auth,
    bench_console,
    bench_delays,
    bench_groups,
    bench_grpc,
    bench_ha,
    bench_latency,
    bench_peers,
    bench_pipeline,
    bench_rocketmq,
    bench_scale,
    bench_store,
    report,
)
from .common import DISK_WARN_PCT, bench_dir, machine, save

SUITES = {
    "store": bench_store.run,
    "grpc": bench_grpc.run,
    "pipeline": bench_pipeline.run,
    "peers": bench_peers.run,
    "groups": bench_groups.run,
    "ha": bench_ha.run,
    "scale": bench_scale.run,
    "delays": bench_delays.run,
    "rocketmq": bench_rocketmq.run,
    "latency": bench_latency.run,
    "access": bench_access.run,
    "auth": bench_auth.run,
    "console": bench_console.run,
}


def main() -> int:
    only = [s for s in os.environ.get("BENCH_ONLY", "").split(",") if s] or list(SUITES)
    base = bench_dir()
    os.makedirs(base, exist_ok=True)
    info = machine()
    print(f"machine: {info}")
    used = info["disk_used_pct"]
    if used is None:
        print(f"WARNING: the disk use under {base} cannot be read: figures from a nearly full disk are not comparable")
    elif used > DISK_WARN_PCT:
        print(
            f"WARNING: the disk under {base} is {used} % full: the store cleans up above {DISK_WARN_PCT} % "
            "and refuses writes above 90 %, so these figures are not comparable with others"
        )
    for name in only:
        with tempfile.TemporaryDirectory(dir=base) as work:
            t = time.perf_counter()
            measures = SUITES[name](work)
            print(f"\n== {name} ({time.perf_counter() - t:.0f} s)")
            for m in measures:
                print(m.line())
            print(f"saved {save(name, measures)}")
            if name == "peers":
                print("report:", ", ".join(report.write(measures)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
