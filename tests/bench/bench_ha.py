"""Replication (issue 13), on real server processes with the store's default settings:

- batched send of 1 KiB messages to an unreplicated node, and to a SYNC master with one follower
  (inSyncReplicas=2: every batch acknowledged once the follower holds it): the ratio (target ≥ 0.5);
- the replication lag an ASYNC follower shows under the same load (sampled from the master's
  GetRole every 50 ms), and how long it takes to catch up after the load stops;
- failover time: a producer sends one message at a time to a 3-member SYNC group; the master is
  SIGKILLed; the harness (standing in for the operator, which waits failoverAfterSeconds first)
  notices within its 100 ms health poll, promotes the follower holding the most and repoints the
  other; measured from the kill to the producer's first acknowledged write (target ≤ 10 s median).
"""

from __future__ import annotations

import os
import pathlib
import tempfile
import threading
import time

from msgstore.client import Client, StoreError
from tests.ha.conftest import Group
from tests.support.servers import SMALL_STORE, ServerProcess

from .bench_grpc import batched_send
from .common import REPEAT, Measure

SCALE = float(os.environ.get("BENCH_SCALE", "1"))
BATCH = 256
THREADS = 4


def _defaults(g: Group) -> Group:
    for m in g.members:
        m.settings = m.settings[len(SMALL_STORE) :]  # the store's defaults, not the tests' small segments
    return g


def send_rate(client: Client, topic: str, total: int) -> float:
    """Batched send of 1 KiB messages from THREADS threads (the gRPC suite's loop)."""
    return batched_send(client, topic, THREADS, total, BATCH, os.urandom(1024), tags=None)[0]


def throughput(workdir: str, total: int) -> tuple[list[float], list[float]]:
    alone, sync = [], []
    node = ServerProcess(tempfile.mkdtemp(dir=workdir), name="alone")
    node.settings = []
    node.start()
    g = _defaults(Group(pathlib.Path(tempfile.mkdtemp(dir=workdir)), 2, ["brokerRole=SYNC_MASTER", "inSyncReplicas=2"], []))
    g.start()
    c1, c2 = Client(node.address, timeout=30), g.client(timeout=30)
    try:
        for run in range(REPEAT):
            alone.append(send_rate(c1, f"alone-{run}", total))
            sync.append(send_rate(c2, f"sync-{run}", total))
    finally:
        c1.close()
        c2.close()
        node.kill()
        g.kill_all()
    return alone, sync


def async_lag(workdir: str, total: int) -> tuple[list[float], list[float]]:
    peaks, catch_up = [], []
    g = _defaults(Group(pathlib.Path(tempfile.mkdtemp(dir=workdir)), 2, [], []))
    g.start()
    c = g.client(timeout=30)
    admin = c.admin(g.members[0].address)
    try:
        for run in range(REPEAT):
            peak = 0
            done = threading.Event()
            sender = threading.Thread(target=lambda r=run, d=done: (send_rate(c, f"async-{r}", total), d.set()))
            sender.start()
            while not done.is_set():
                followers = admin.role_pb().followers
                peak = max([peak, *(f.lag_bytes for f in followers)])
                done.wait(0.05)
            sender.join()
            t = time.perf_counter()
            while any(f.lag_bytes for f in admin.role_pb().followers):
                time.sleep(0.005)
            catch_up.append(time.perf_counter() - t)
            peaks.append(peak / 1024)
    finally:
        c.close()
        g.kill_all()
    return peaks, catch_up


def _retrying(call, timeout: float = 10.0):
    """A member that just restarted may still be in the channel's reconnect backoff."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except StoreError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def failover_times(workdir: str, kills: int) -> list[float]:
    g = _defaults(Group(pathlib.Path(tempfile.mkdtemp(dir=workdir)), 3, ["brokerRole=SYNC_MASTER", "inSyncReplicas=2"], []))
    g.start()
    harness = g.client(timeout=2)
    producer = g.client(timeout=10, failover_timeout=30)
    acked: list[float] = []
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            try:
                if producer.send("failover", b"x").status == "PUT_OK":
                    acked.append(time.monotonic())
            except StoreError:
                stop.wait(0.01)

    t = threading.Thread(target=produce)
    t.start()
    times = []
    master = g.members[0]
    try:
        for _ in range(kills):
            n = len(acked)
            while len(acked) < n + 50:
                time.sleep(0.01)
            master.kill()
            killed = time.monotonic()
            while master.health(timeout=0.1) is not None:  # the harness's health poll
                time.sleep(0.1)
            followers = [m for m in g.members if m is not master]
            ends = {m.name: _retrying(harness.admin(m.address).role_pb).end_offset for m in followers}
            new = max(followers, key=lambda m: ends[m.name])
            harness.admin(new.address).promote(mode="SYNC")
            for m in followers:
                if m is not new:
                    _retrying(lambda m=m, new=new: harness.admin(m.address).set_role(new.address))
            while not acked or acked[-1] <= killed:
                time.sleep(0.005)
            times.append(next(a for a in acked if a > killed) - killed)
            g.restart_as_follower(master, new)
            master = new
    finally:
        stop.set()
        t.join(30)
        harness.close()
        producer.close()
        g.kill_all()
    return times


def run(workdir: str) -> list[Measure]:
    total = max(20_000, int(200_000 * SCALE))
    alone, sync = throughput(workdir, total)
    peaks, catch_up = async_lag(workdir, total)
    failover = failover_times(workdir, max(3, REPEAT * 2))
    return [
        Measure("ha: batched send 1 KiB, unreplicated node", "msg/s", alone),
        Measure("ha: batched send 1 KiB, SYNC master + 1 follower", "msg/s", sync),
        Measure("ha: SYNC replication / unreplicated", "x", [b / a for a, b in zip(alone, sync)], "target ≥ 0.5"),
        Measure("ha: ASYNC follower's peak lag under that load", "KiB", peaks),
        Measure("ha: ASYNC follower catches up after the load", "s", catch_up),
        Measure("ha: failover, master SIGKILL → first accepted write", "s", failover, "target ≤ 10 (median)"),
    ]
