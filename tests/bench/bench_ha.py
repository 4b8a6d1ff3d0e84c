"""Replication (issue 13), on real server processes with the store's default settings:

- batched send of 1 KiB messages to an unreplicated node, and to a SYNC master with one follower
  (inSyncReplicas=2: every batch acknowledged once the follower holds it): the ratio (target ≥ 0.5);
- the replication lag an ASYNC follower shows under the same load (sampled from the master's
  GetRole every 50 ms), and how long it takes to catch up after the load stops;
- failover time with etcd as the arbiter (issue 29): a producer sends one message at a time to a
  3-member SYNC group started with ``--arbiter`` and ``--failover-after 3`` (so a 3 s lease, as
  the operator sizes it from failoverAfterSeconds); the master is SIGKILLed, and the members
  elect one of themselves once its lease has run out; measured from the kill to the producer's
  first acknowledged write (target ≤ failoverAfter + 5 s median);
- the same with the master paused (SIGSTOP: alive, silent), from the pause to the first write
  the new master acknowledges (the control-plane test measures the operator's own path);
- the arbiter's load: requests etcd handled per second for one idle 3-member group (its own
  ``grpc_server_handled_total``), and under the batched load above;
- a switchover under load (``admin promote`` of a follower while the master is healthy: fence,
  catch up, promote, repoint): the longest gap between two acknowledged writes (target ≤ 2 s).
"""

from __future__ import annotations

import itertools
import os
import pathlib
import signal
import tempfile
import threading
import time

from msgstore.client import Client, StoreError
from msgstore.client.failover import promote
from tests.ha.conftest import Group
from tests.support.etcd import EtcdServer
from tests.support.servers import SMALL_STORE, ServerProcess

from .bench_grpc import batched_send
from .common import REPEAT, Measure

SCALE = float(os.environ.get("BENCH_SCALE", "1"))
BATCH = 256
THREADS = 4
_GROUPS = itertools.count()


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


def _etcd_group(workdir: str, settings: list[str], etcd: EtcdServer, after: str = "3") -> Group:
    """A new group on the shared etcd: a name of its own (the last group's record, naming members
    called m0..m2 too, would otherwise be this one's)."""
    fast = ["haKeepaliveTimeout=1500"]
    name = f"g{next(_GROUPS)}"
    g = _defaults(
        Group(
            pathlib.Path(tempfile.mkdtemp(dir=workdir)),
            3,
            settings + fast,
            fast,
            name=name,
            peers=False,
            arbiter=etcd.url(),
            failover_after=after,
        )
    )
    for m in g.members:  # the lease as the operator sizes it: max(3, failoverAfterSeconds)
        i = m.extra.index("--arbiter-ttl")
        del m.extra[i : i + 2]
    return g.start()


def failover_times(workdir: str, etcd: EtcdServer, kills: int, pause: bool = False) -> list[float]:
    """SIGKILL (or SIGSTOP) the master of a SYNC group with etcd as its arbiter; the members elect
    by themselves; from the fault to the producer's first acknowledged write on another member."""
    g = _etcd_group(workdir, ["brokerRole=SYNC_MASTER", "inSyncReplicas=2"], etcd)
    harness = g.client(timeout=2)
    p = _Producer(Client([m.address for m in g.members], timeout=3, failover_timeout=30))
    p.start()
    times = []
    master = g.members[0]
    try:
        for _ in range(kills):
            p.wait_acks(50)
            if pause:
                os.kill(master.proc.pid, signal.SIGSTOP)
            else:
                master.kill()
            at = time.monotonic()
            while not any(t > at and a != master.address for t, a in p.acked[-50:]):
                time.sleep(0.005)
            times.append(next(t for t, a in p.acked if t > at and a != master.address) - at)
            new = next(m for m in g.members if m.address == p.acked[-1][1])
            if pause:
                os.kill(master.proc.pid, signal.SIGCONT)  # it reads the record and follows
            else:
                master.start(wait=False)  # its own command: it reads the record and follows
            master = new
    finally:
        p.stop.set()
        p.join(30)
        for m in g.members:
            if m.running:
                os.kill(m.proc.pid, signal.SIGCONT)
        harness.close()
        p.client.close()
        g.kill_all()
    return times


def _etcd_requests(etcd: EtcdServer) -> float:
    """Requests etcd has handled so far (grpc_server_handled_total, every method)."""
    import urllib.request

    with urllib.request.urlopen(f"http://{etcd.endpoint}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("grpc_server_handled_total{"))


def arbiter_load(workdir: str, etcd: EtcdServer, total: int) -> tuple[list[float], list[float], list[float], list[float]]:
    """etcd requests/s for one idle 3-member group, and with batched sends running; the same
    group's batched send rate, and an unreplicated node's, for the SYNC ratio with an arbiter."""
    idle, busy, rates, alone = [], [], [], []
    g = _etcd_group(workdir, ["brokerRole=SYNC_MASTER", "inSyncReplicas=2"], etcd)
    node = ServerProcess(tempfile.mkdtemp(dir=workdir), name="alone-etcd")
    node.settings = []
    node.start()
    c, c1 = g.client(timeout=30), Client(node.address, timeout=30)
    try:
        for run in range(REPEAT):
            before, t0 = _etcd_requests(etcd), time.monotonic()
            time.sleep(10)
            idle.append((_etcd_requests(etcd) - before) / (time.monotonic() - t0))
            alone.append(send_rate(c1, f"alone-etcd-{run}", total))
            before, t0 = _etcd_requests(etcd), time.monotonic()
            rates.append(send_rate(c, f"etcd-{run}", total))
            busy.append((_etcd_requests(etcd) - before) / (time.monotonic() - t0))
    finally:
        c.close()
        c1.close()
        node.kill()
        g.kill_all()
    return idle, busy, rates, alone


def _best_follower(harness: Client, g: Group, master: ServerProcess) -> ServerProcess:
    followers = [m for m in g.members if m is not master]
    roles = {m.name: _retrying(harness.admin(m.address).role_pb) for m in followers}
    return max(followers, key=lambda m: (m.name in roles[m.name].sync_state_set, roles[m.name].end_offset))


class _Producer(threading.Thread):
    """One message at a time, noting when each acknowledgement came and from where."""

    def __init__(self, client: Client):
        super().__init__(daemon=True)
        self.client = client
        self.acked: list[tuple[float, str]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                r = self.client.send("failover", b"x")
                if r.status == "PUT_OK":
                    self.acked.append((time.monotonic(), r.address))
            except StoreError:
                self.stop.wait(0.01)

    def wait_acks(self, n: int) -> None:
        target = len(self.acked) + n
        while len(self.acked) < target:
            time.sleep(0.01)


def _group3(workdir: str, settings: list[str]) -> Group:
    fast = ["haKeepaliveTimeout=1500"]
    g = _defaults(Group(pathlib.Path(tempfile.mkdtemp(dir=workdir)), 3, settings + fast, fast, peers=False))
    return g.start()


def switchover_stalls(workdir: str, rounds: int, mode: str) -> list[float]:
    g = _group3(workdir, ["brokerRole=SYNC_MASTER", "inSyncReplicas=2"] if mode == "SYNC" else ["brokerRole=ASYNC_MASTER"])
    harness = g.client(timeout=2)
    p = _Producer(Client([m.address for m in g.members], timeout=3, failover_timeout=30))
    p.start()
    stalls = []
    master = g.members[0]
    try:
        for _ in range(rounds):
            p.wait_acks(200)
            new = _best_follower(harness, g, master)
            before = len(p.acked)
            started = time.monotonic()
            promote(harness, new.address)
            p.wait_acks(200)
            window = [t for t, _ in p.acked[before - 1 :]]
            stalls.append(max(b - a for a, b in zip(window, window[1:])) if len(window) > 1 else time.monotonic() - started)
            master = new
    finally:
        p.stop.set()
        p.join(30)
        harness.close()
        p.client.close()
        g.kill_all()
    return stalls


def run(workdir: str) -> list[Measure]:
    total = max(20_000, int(200_000 * SCALE))
    alone, sync = throughput(workdir, total)
    peaks, catch_up = async_lag(workdir, total)
    etcd = EtcdServer(tempfile.mkdtemp(dir=workdir) + "/etcd").start()
    try:
        failover = failover_times(workdir, etcd, max(3, REPEAT * 2))
        paused = failover_times(workdir, etcd, max(3, REPEAT * 2), pause=True)
        idle, busy, with_arbiter, alone2 = arbiter_load(workdir, etcd, total)
    finally:
        etcd.stop()
    stall_sync = switchover_stalls(workdir, max(3, REPEAT * 2), "SYNC")
    stall_async = switchover_stalls(workdir, max(3, REPEAT * 2), "ASYNC")
    return [
        Measure("ha: batched send 1 KiB, unreplicated node", "msg/s", alone),
        Measure("ha: batched send 1 KiB, SYNC master + 1 follower", "msg/s", sync),
        Measure("ha: SYNC replication / unreplicated", "x", [b / a for a, b in zip(alone, sync)], "target ≥ 0.5"),
        Measure("ha: SYNC, 3 members, etcd arbiter / unreplicated", "x", [b / a for a, b in zip(alone2, with_arbiter)], "target ≥ 0.5"),
        Measure("ha: ASYNC follower's peak lag under that load", "KiB", peaks),
        Measure("ha: ASYNC follower catches up after the load", "s", catch_up),
        Measure("ha: etcd failover (after 3 s), master SIGKILL → first write", "s", failover, "target ≤ 8 (median)"),
        Measure("ha: etcd failover (after 3 s), master paused → first write", "s", paused, "target ≤ 8 (median)"),
        Measure("ha: etcd requests per group, idle (3 members)", "req/s", idle),
        Measure("ha: etcd requests per group, under batched sends", "req/s", busy),
        Measure("ha: switchover under load, longest stall (SYNC)", "s", stall_sync, "target ≤ 2"),
        Measure("ha: switchover under load, longest stall (ASYNC)", "s", stall_async, "target ≤ 2"),
    ]
