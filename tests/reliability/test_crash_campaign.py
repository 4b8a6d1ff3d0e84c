"""Crash campaign: a driver process sends through the real server while the server is
SIGKILLed at random moments and restarted; after every restart the store must still hold
every acknowledged message, at its acknowledged queue offset, with its body and key."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import grpc
import pytest

from msgstore.v1 import admin_pb2 as apb
from msgstore.v1 import admin_pb2_grpc as apbg
from msgstore.v1 import msgstore_pb2 as pb
from msgstore.v1 import msgstore_pb2_grpc as pbg
from tests.reliability.conftest import scale
from tests.reliability.driver import QUEUES, body
from tests.support.servers import ROOT, ServerProcess, wait_until

TOPIC = "campaign"
KILLS = scale(25, 200)


class Driver:
    """The driver process and the acknowledgements it printed, collected by a reader thread."""

    def __init__(self, address: str, seed: int, seconds: float, rate: float = 3000):
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server") + os.pathsep + ROOT)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.driver", address, TOPIC, str(seed), str(seconds), str(rate)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=ROOT,
            text=True,
        )
        self.acked: dict[int, tuple[int, int]] = {}  # message id -> (queue, offset)
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            rec = json.loads(line)
            with self.lock:
                for n, off in rec["acked"]:
                    self.acked[n] = (rec["q"], off)

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def alive(self) -> bool:
        """True while the driver runs (an AssertionError saying so when it has exited)."""
        code = self.proc.poll()
        assert code is None, f"the driver exited with {code}"
        return True

    def snapshot(self) -> dict[int, tuple[int, int]]:
        with self.lock:
            return dict(self.acked)

    def stop(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(20)
        self.thread.join(10)


@dataclass
class Tally:
    kills: int = 0
    acked: int = 0
    lost: int = 0
    unacked_stored: int = 0
    recoveries: list[str] = field(default_factory=list)


def read_everything(stub) -> dict[int, tuple[int, int]]:
    """Every message of every queue, checked as it is read: offsets contiguous from the queue's
    minimum, each record one the driver wrote (body matches its key), no id twice."""
    found: dict[int, tuple[int, int]] = {}
    for q in range(QUEUES):
        offset = None
        while True:
            req = pb.PullRequest(topic=TOPIC, queue_id=q, offset=offset or 0, max_messages=256)
            resp = stub.Pull(req, timeout=10)
            if offset is None:
                offset = resp.min_offset
                if resp.status != pb.FOUND:
                    resp = stub.Pull(pb.PullRequest(topic=TOPIC, queue_id=q, offset=offset, max_messages=256), timeout=10)
            if resp.status != pb.FOUND:
                assert resp.status in (pb.NO_MESSAGE_IN_QUEUE, pb.OFFSET_OVERFLOW_ONE, pb.NO_MATCHED_LOGIC_QUEUE), resp.status
                break
            for m in resp.messages:
                assert m.queue_offset == offset, f"queue {q}: offset {m.queue_offset} where {offset} was expected (gap or repeat)"
                (key,) = m.keys
                n = int(key[1:])
                assert m.body == body(n), f"queue {q} offset {offset}: corrupt record for {key}"
                assert n not in found, f"message {n} stored twice: {found[n]} and {(q, offset)}"
                found[n] = (q, offset)
                offset += 1
    return found


def status(address: str) -> apb.StoreStatus:
    with grpc.insecure_channel(address) as ch:
        return apbg.AdminStub(ch).GetStatus(apb.GetStatusRequest(), timeout=10)


def campaign(tmp_path, flush: str, seed: int) -> Tally:
    rnd = random.Random(seed)
    server = ServerProcess(
        str(tmp_path / "data"), settings=[f"flushDiskType={flush}", "mappedFileSizeCommitLog=65536", "mappedFileSizeConsumeQueue=2000"]
    ).start()
    driver = Driver(server.address, seed, seconds=float("inf"))  # (it runs until stopped, however long the kills take)
    tally = Tally()
    try:
        with grpc.insecure_channel(server.address) as ch:
            stub = pbg.MessageStoreStub(ch)
            for _ in range(KILLS):
                before = driver.count()
                wait_until(
                    lambda before=before: driver.alive() and driver.count() > before, timeout=30, what="the driver to get acknowledgements"
                )
                time.sleep(rnd.uniform(0.0, 0.3))  # a random moment under load (the killer's aim)
                server.kill()
                tally.kills += 1
                acked = driver.snapshot()  # nothing more can be acknowledged by this process
                server.start()
                rec = status(server.address).recovery
                tally.recoveries.append(rec.mode)
                assert rec.mode == "abnormal" and rec.state == "done", rec
                found = read_everything(stub)
                lost = [n for n in acked if n not in found]
                moved = {n: (acked[n], found[n]) for n in acked if n in found and found[n] != acked[n]}
                assert not moved, f"acknowledged messages at other offsets: {list(moved.items())[:5]}"
                if flush == "SYNC_FLUSH":
                    assert not lost, f"{len(lost)} acknowledged SYNC_FLUSH messages lost, e.g. {lost[:5]}"
                tally.lost = len(lost)  # cumulative: messages lost so far
                tally.acked = len(acked)
                tally.unacked_stored = len(set(found) - set(acked))
    finally:
        driver.stop()
        server.terminate()
    return tally


@pytest.mark.slow
@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_crash_campaign(tmp_path, flush):
    tally = campaign(tmp_path, flush, seed=7 if flush == "SYNC_FLUSH" else 11)
    print(
        f"\n{flush}: {tally.kills} kills, {tally.acked} acknowledged, {tally.lost} lost, "
        f"{tally.unacked_stored} stored without acknowledgement"
    )
    assert tally.kills == KILLS and set(tally.recoveries) == {"abnormal"}
    assert tally.acked > KILLS  # the driver really wrote between kills
    # a SIGKILL leaves written pages in the page cache: even ASYNC_FLUSH loses nothing here
    # (power loss is what costs the unflushed tail; see test_power_loss)
    assert tally.lost == 0
