"""Consumer groups on a 3-node store (8 queues per node), members in processes of their own.

- rebalance after a member crash (SIGKILL): from the kill until the others hold every queue,
  with the default heartbeat (3 s) and expiry (10 s): bound by the expiry, by design;
- rebalance after a join: from the new member's first heartbeat until the queues are split again;
- consume throughput of 3 members against 1 (issue 12: ≥ 2×), 1 KiB messages, each member
  committing after every poll, timed from the first send until the group's lag is 0.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from msgstore.client import Client, OutMessage
from tests.support.servers import ROOT, ServerProcess, free_port

from .common import REPEAT, Measure

MEMBER = os.path.join(ROOT, "tests", "support", "group_member.py")
SCALE = float(os.environ.get("BENCH_SCALE", "1"))


def cluster(workdir: str) -> list[ServerProcess]:
    root = tempfile.mkdtemp(dir=workdir)
    ports = [free_port() for _ in range(3)]
    nodes = []
    for i, port in enumerate(ports):
        peers = ",".join(f"127.0.0.1:{p}" for p in ports if p != port)
        n = ServerProcess(os.path.join(root, f"store-{i}"), port=port, name=f"store-{i}", args=["--peers", peers])
        n.settings = []  # the store's defaults
        nodes.append(n.start(wait=False))
    for n in nodes:
        n.wait_serving()
    return nodes


class Members:
    def __init__(self, workdir: str, endpoints: str, group: str, topic: str, heartbeat: float, expiry: float):
        self.workdir, self.endpoints, self.group, self.topic = workdir, endpoints, group, topic
        self.heartbeat, self.expiry = heartbeat, expiry
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str) -> None:
        out = os.path.join(self.workdir, f"{self.group}-{name}.count")
        args = [sys.executable, MEMBER, self.endpoints, self.group, self.topic, out, "--quiet", "--max", "1024"]
        args += ["--heartbeat", str(self.heartbeat), "--expiry", str(self.expiry), "--client-id", name]
        self.procs[name] = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def holders(client: Client, group: str, topic: str) -> dict:
    return {(n.name, q.queue_id): q.holder for n, g in client.describe_groups(group) for q in g.queues if q.topic == topic}


def members_of(client: Client, group: str) -> set[str]:
    return {m.client_id for _, g in client.describe_groups(group) for m in g.members}


def wait_settled(client: Client, group: str, topic: str, names: set[str], timeout: float = 120) -> float:
    """Seconds until every queue is held by exactly ``names``, split evenly."""
    t = time.perf_counter()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        h = holders(client, group, topic)
        counts = collections.Counter(h.values())
        if len(h) == 24 and set(h.values()) == names and max(counts.values()) - min(counts.values()) <= 1:
            return time.perf_counter() - t
        time.sleep(0.02)
    raise TimeoutError(f"{group} did not settle on {sorted(names)}")


def lag(client: Client, group: str, topic: str) -> int:
    return sum(q.lag for _, g in client.describe_groups(group) for q in g.queues if q.topic == topic)


def rebalance_times(client: Client, workdir: str, endpoints: str, run: int) -> tuple[float, float]:
    topic, group = f"rb-{run}", f"rebalance-{run}"
    client.create_topic(topic, 8)
    m = Members(workdir, endpoints, group, topic, heartbeat=3.0, expiry=10.0)
    try:
        for name in ("a", "b", "c"):
            m.start(name)
        wait_settled(client, group, topic, {"a", "b", "c"})
        m.procs["a"].kill()
        crash = wait_settled(client, group, topic, {"b", "c"})
        m.start("d")
        deadline = time.monotonic() + 60
        while "d" not in members_of(client, group) and time.monotonic() < deadline:
            time.sleep(0.01)
        join = wait_settled(client, group, topic, {"b", "c", "d"})
    finally:
        m.stop_all()
    return crash, join


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def consume_rate(client: Client, workdir: str, endpoints: str, members: int, total: int, run: int) -> tuple[float, float]:
    """(msg/s, share of the machine's CPU busy meanwhile)."""
    topic, group = f"tp-{members}-{run}", f"throughput-{members}-{run}"
    client.create_topic(topic, 8)
    m = Members(workdir, endpoints, group, topic, heartbeat=1.0, expiry=5.0)
    names = {f"m{i}" for i in range(members)}
    body = os.urandom(1024)
    queues = client.route(topic, refresh=True).queues
    try:
        for name in sorted(names):
            m.start(name)
        wait_settled(client, group, topic, names)
        batch = [OutMessage(body) for _ in range(500)]
        per = total // len(queues) // 500 * 500
        busy0, all0 = cpu_ticks()
        t = time.perf_counter()

        def fill(part: list) -> None:
            for q in part:
                for _ in range(per // 500):
                    client.send_batch(topic, batch, queue=q)

        fillers = [threading.Thread(target=fill, args=(queues[k::3],)) for k in range(3)]
        for f in fillers:
            f.start()
        for f in fillers:
            f.join()
        sent = per * len(queues)
        while lag(client, group, topic) > 0:
            time.sleep(0.01)
        rate = sent / (time.perf_counter() - t)
        busy1, all1 = cpu_ticks()
        return rate, (busy1 - busy0) / max(1, all1 - all0)
    finally:
        m.stop_all()


def run(workdir: str) -> list[Measure]:
    nodes = cluster(workdir)
    endpoints = ",".join(n.address for n in nodes)
    client = Client(endpoints, timeout=30)
    try:
        crash, join = zip(*[rebalance_times(client, workdir, endpoints, i) for i in range(REPEAT)])
        total = max(24_000, int(300_000 * SCALE))
        one, one_cpu = zip(*[consume_rate(client, workdir, endpoints, 1, total, i) for i in range(REPEAT)])
        three, three_cpu = zip(*[consume_rate(client, workdir, endpoints, 3, total, i) for i in range(REPEAT)])
    finally:
        client.close()
        for n in nodes:
            n.terminate()
        shutil.rmtree(os.path.dirname(nodes[0].data_dir), ignore_errors=True)
    return [
        Measure("groups: rebalance after a member crash (heartbeat 3 s, expiry 10 s)", "s", list(crash), "target ≤ 20"),
        Measure("groups: rebalance after a join", "s", list(join)),
        Measure("groups: consume 1 KiB, 1 member (send and consume overlap)", "msg/s", list(one)),
        Measure("groups: consume 1 KiB, 3 members", "msg/s", list(three)),
        Measure("groups: 3 members / 1 member", "x", [b / a for a, b in zip(one, three)], "target ≥ 2"),
        Measure("groups: machine CPU busy meanwhile, 1 member", "%", [100 * x for x in one_cpu]),
        Measure("groups: machine CPU busy meanwhile, 3 members", "%", [100 * x for x in three_cpu]),
    ]
