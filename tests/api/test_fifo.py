"""FIFO message groups (issue 22, part 3) against real server processes: a FIFO consumer group
gets a message group's next message only after the previous one was acknowledged or finished
its deliveries, while other message groups on the same queue go on; concurrent consumers keep
each group's order; a lapse brings the same message back before its group's next; a SIGKILL
keeps a delivery in flight blocking its group."""

from __future__ import annotations

import threading
import time

import pytest

from msgstore.client import Client, QueueRef
from tests.support.servers import wait_until


@pytest.fixture
def c(server):
    with Client(server.address, timeout=10) as client:
        client.create_topic("orders", 2)
        client.update_group("fifo", fifo=True, backoff=[0.1])
        yield client


def send_groups(c: Client, groups: list[str], per_group: int) -> None:
    for i in range(per_group):
        for g in groups:  # interleaved: the queue holds the groups' messages mixed
            assert c.send("orders", f"{g}-{i}".encode(), message_group=g, visible=True).ok


def test_a_groups_next_message_waits_for_the_previous_while_other_groups_go_on(c):
    first = c.route("orders").nodes[0]
    q = QueueRef(first.name, first.address, 0)
    for body, group in ((b"a-0", "a"), (b"a-1", "a"), (b"b-0", "b"), (b"b-1", "b")):  # one queue, two groups
        assert c.send("orders", body, message_group=group, queue=q, visible=True).ok
    got = c.receive("fifo", "orders", 10, invisible=30)
    assert sorted(r.body for r in got) == [b"a-0", b"b-0"]  # one per group
    assert c.receive("fifo", "orders", 10, invisible=30) == []
    a0 = next(r for r in got if r.body == b"a-0")
    assert c.ack("fifo", "orders", [a0]) == [""]
    nxt = c.receive("fifo", "orders", 10, invisible=30)
    assert [r.body for r in nxt] == [b"a-1"]  # a's next; b still waits for b-0


def test_concurrent_consumers_keep_every_groups_order(c):
    groups = [f"g{i}" for i in range(6)]
    send_groups(c, groups, 8)
    processed: dict[str, list[int]] = {g: [] for g in groups}
    holding: dict[str, str] = {}
    lock = threading.Lock()
    errors: list[str] = []

    def consumer(name: str) -> None:
        with Client(c.route("orders").nodes[0].address, timeout=10) as mine:
            idle_since = time.monotonic()
            while time.monotonic() - idle_since < 1.0:
                got = mine.receive("fifo", "orders", 3, invisible=30)
                if not got:
                    time.sleep(0.02)
                    continue
                idle_since = time.monotonic()
                for r in got:
                    g, i = r.body.decode().split("-")
                    with lock:
                        if g in holding:
                            errors.append(f"{name} got {r.body!r} while {holding[g]} holds {g}")
                        holding[g] = name
                    time.sleep(0.002)  # processing
                    with lock:
                        processed[g].append(int(i))
                        del holding[g]
                    assert mine.ack("fifo", "orders", [r]) == [""]

    threads = [threading.Thread(target=consumer, args=(f"c{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert processed == {g: list(range(8)) for g in groups}


def test_a_lapsed_message_comes_back_before_its_groups_next_and_the_dlq_lets_the_group_on(c):
    c.update_group("fifo", max_deliveries=2)
    send_groups(c, ["a"], 2)
    (first,) = c.receive("fifo", "orders", 10, invisible=0.2)
    assert (first.body, first.attempt) == (b"a-0", 1)
    again: list = []
    wait_until(lambda: again.extend(c.receive("fifo", "orders", 10, invisible=0.2)) or again, timeout=15, what="a-0 again")
    assert [(r.body, r.attempt) for r in again] == [(b"a-0", 2)]  # not a-1: nothing of its group overtakes it
    after: list = []
    wait_until(lambda: after.extend(c.receive("fifo", "orders", 10, invisible=30)) or after, timeout=15, what="a-1 after the DLQ")
    assert [(r.body, r.attempt) for r in after] == [(b"a-1", 1)]
    # The DLQ's consume queue is dispatched from the commit log after the move is written, so the
    # count may trail the lock's release by a dispatch round.
    wait_until(lambda: c.describe_groups("fifo")[0][1].dead_letters == 1, timeout=15, what="one dead letter counted")


def test_a_delivery_in_flight_still_blocks_its_group_after_a_sigkill(servers):
    node = servers("fifo-crash")
    with Client(node.address, timeout=10) as c:
        c.create_topic("orders", 1)
        c.update_group("fifo", fifo=True)
        send_groups(c, ["a", "b"], 2)
        got = c.receive("fifo", "orders", 10, invisible=60)
        assert sorted(r.body for r in got) == [b"a-0", b"b-0"]
        b0 = next(r for r in got if r.body == b"b-0")
        assert c.ack("fifo", "orders", [b0]) == [""]
        a0 = next(r for r in got if r.body == b"a-0")
    node.kill()
    node.start()
    with Client(node.address, timeout=10) as c:
        nxt = c.receive("fifo", "orders", 10, invisible=60)
        assert [r.body for r in nxt] == [b"b-1"]  # a-1 waits: a-0 is still in flight
        assert c.ack("fifo", "orders", [a0]) == [""]  # its receipt holds across the restart
        assert [r.body for r in c.receive("fifo", "orders", 10, invisible=60)] == [b"a-1"]


def test_the_cli_sends_to_a_message_group(server, c):
    import os
    import subprocess
    import sys

    from tests.support.servers import ROOT

    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server"))
    for i in range(2):
        out = subprocess.run(
            [sys.executable, "-m", "msgstore.cli", "send", "orders", f"cli-{i}", "--message-group", "cli", "--server", server.address],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
    got = c.receive("fifo", "orders", 10, invisible=30)
    assert [(r.body, r.properties["__SHARDINGKEY"]) for r in got] == [(b"cli-0", "cli")]  # one at a time
