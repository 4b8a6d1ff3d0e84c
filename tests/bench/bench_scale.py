"""Scale: one node holding many queues (issue 21).

For each size (``BENCH_SCALE_QUEUES``, default 10,000, 50,000 and 100,000 queues, as topics
of 8 queues): create the topics, send one 100-byte message to every queue, then restart the
node after a SIGTERM and after a SIGKILL, and print what a user would look at: time back to
SERVING, resident memory (not counting page cache: RssAnon), open descriptors, mapped regions,
the files on disk, and a pull from a queue nobody touched since the restart.
"""

from __future__ import annotations

import concurrent.futures
import os
import random
import signal
import statistics
import subprocess
import sys
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from msgstore.client import Client, OutMessage
from msgstore.client.routing import QueueRef
from tests.support.servers import ROOT, free_port

from .common import Measure

SIZES = [int(s) for s in os.environ.get("BENCH_SCALE_QUEUES", "10000,50000,100000").split(",") if s]
QUEUES_PER_TOPIC = 8


class Node:
    """``msgstore serve`` with the default settings (RocketMQ's file sizes), as a user runs it."""

    def __init__(self, data_dir: str):
        self.data_dir = data_dir
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.address = f"127.0.0.1:{self.port}"

    def start(self) -> float:
        """Start and wait for SERVING; returns the seconds it took."""
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server"))
        cmd = [sys.executable, "-m", "msgstore.cli", "serve", "--data-dir", self.data_dir, "--port", str(self.port)]
        cmd += ["--metrics-port", "-1", "--node-name", "scale", "--log-level", "warning"]
        t = time.monotonic()
        log = open(self.data_dir + ".log", "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        log.close()
        with grpc.insecure_channel(self.address) as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            deadline = t + 900
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the node exited with {self.proc.returncode}; see {self.data_dir}.log")
                try:
                    if stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == health_pb2.HealthCheckResponse.SERVING:
                        return time.monotonic() - t
                except grpc.RpcError:
                    pass
                time.sleep(0.05)
        raise TimeoutError("the node did not serve within 900 s")

    def stop(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(600)

    def resources(self) -> dict[str, float]:
        assert self.proc is not None
        pid = self.proc.pid
        status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status") if ":" in line)
        with open(f"/proc/{pid}/maps") as f:
            maps = sum(1 for _ in f)
        return {
            "rss_anon_mib": int(status["RssAnon"].split()[0]) / 1024,
            "rss_mib": int(status["VmRSS"].split()[0]) / 1024,
            "fds": len(os.listdir(f"/proc/{pid}/fd")),
            "maps": maps,
        }


def disk(data_dir: str) -> dict[str, float]:
    files = apparent = used = 0
    for root, _dirs, names in os.walk(data_dir):
        for n in names:
            st = os.stat(os.path.join(root, n))
            files += 1
            apparent += st.st_size
            used += st.st_blocks * 512
    return {"files": files, "apparent_gib": apparent / 2**30, "disk_gib": used / 2**30}


def fill(address: str, queues: int) -> float:
    """Create the topics and send one message to every queue; returns the seconds it took."""
    topics = [f"scale-{i:06d}" for i in range(queues // QUEUES_PER_TOPIC)]
    body = b"x" * 100
    t = time.monotonic()
    with Client(address, timeout=60) as c:
        node = c.route("", refresh=True).nodes[0].name

        def one(topic: str) -> None:
            c.create_topic(topic, QUEUES_PER_TOPIC)
            for q in range(QUEUES_PER_TOPIC):
                res = c.send_batch(topic, [OutMessage(body)], queue=QueueRef(node, address, q))
                assert res[0].ok, res[0]

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            for f in [pool.submit(one, t) for t in topics]:
                f.result()
    return time.monotonic() - t


def cold_pulls(address: str, queues: int, n: int = 50) -> list[float]:
    """Latency of a pull from queues nobody read since the restart (ms)."""
    rng = random.Random(7)
    out = []
    with Client(address, timeout=30) as c:
        node = c.route("", refresh=True).nodes[0].name
        for _ in range(n):
            topic = f"scale-{rng.randrange(queues // QUEUES_PER_TOPIC):06d}"
            q = QueueRef(node, address, rng.randrange(QUEUES_PER_TOPIC))
            t = time.perf_counter()
            got = c.pull(topic, q, 0, max_messages=1)
            out.append((time.perf_counter() - t) * 1000)
            assert len(got.messages) == 1, (topic, q)
    return out


def one_size(workdir: str, queues: int) -> list[Measure]:
    node = Node(os.path.join(workdir, f"scale-{queues}"))
    node.start()
    try:
        filled = fill(node.address, queues)
        running = node.resources()
        node.stop(signal.SIGTERM)
        clean = node.start()
        after_clean = node.resources()
        pulls = cold_pulls(node.address, queues)
        node.stop(signal.SIGKILL)
        crashed = node.start()
        after_kill = node.resources()
        pulls_after_kill = cold_pulls(node.address, queues)
        files = disk(node.data_dir)
    finally:
        if node.proc is not None and node.proc.poll() is None:
            node.proc.kill()
    label = f"scale: {queues:,} queues"
    return [
        Measure(f"{label}, create + 1 message each", "s", [filled]),
        Measure(f"{label}, restart to SERVING after SIGTERM", "s", [clean], "target ≤ 5"),
        Measure(f"{label}, restart to SERVING after SIGKILL", "s", [crashed], "target ≤ 15"),
        Measure(
            f"{label}, RSS (anon) running / after restart / after SIGKILL",
            "MiB",
            [running["rss_anon_mib"], after_clean["rss_anon_mib"], after_kill["rss_anon_mib"]],
            "target ≤ 512",
        ),
        Measure(
            f"{label}, open descriptors (running, after restarts)",
            "fds",
            [running["fds"], after_clean["fds"], after_kill["fds"]],
            "target ≤ 2,000",
        ),
        Measure(
            f"{label}, mapped regions (running, after restarts)",
            "maps",
            [running["maps"], after_clean["maps"], after_kill["maps"]],
            "target ≤ 10,000",
        ),
        Measure(
            f"{label}, cold pull (after SIGTERM, SIGKILL restarts)",
            "ms",
            [statistics.median(pulls), statistics.median(pulls_after_kill)],
            "target ≤ 10",
            extra={"p99": max(pulls + pulls_after_kill)},
        ),
        Measure(f"{label}, files on disk", "files", [files["files"]], extra=files),
    ]


def run(workdir: str) -> list[Measure]:
    out: list[Measure] = []
    for queues in SIZES:
        out += one_size(workdir, queues)
        for m in out[-8:]:
            print(m.line(), flush=True)
    return out
