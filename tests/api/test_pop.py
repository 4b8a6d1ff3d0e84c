"""Message-level consumption (issue 22, part 2) against real server processes: receive with an
invisibility, ack, change invisibility, nack; a message not acknowledged coming back with its
attempt one higher after the group's backoff, and set aside in %DLQ%<group> after the maximum;
receivers of one group never sharing a delivery; a SIGKILL losing no delivery in flight; the
CLI's receive, ack and dlq."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

import grpc
import pytest

from msgstore.client import Client, QueueRef, StoreError
from msgstore.record.receipt import Receipt
from msgstore.v1 import msgstore_pb2 as pb
from msgstore.v1 import msgstore_pb2_grpc as pbg
from tests.support.servers import ROOT, wait_until


@pytest.fixture
def c(server):
    with Client(server.address, timeout=10) as client:
        client.create_topic("work", 2)
        yield client


def send(c: Client, n: int, prefix: str = "m") -> set[bytes]:
    bodies = {b"%s%d" % (prefix.encode(), i) for i in range(n)}
    for b in sorted(bodies):
        assert c.send("work", b, visible=True).ok
    return bodies


def test_receivers_get_different_messages_and_acked_ones_never_come_back(c):
    sent = send(c, 6)
    first = c.receive("g", "work", 4, invisible=2)  # (two receives and an ack inside it, on a loaded machine too)
    second = c.receive("g", "work", 4, invisible=2)
    assert len(first) == 4 and len(second) == 2
    assert {r.body for r in first} | {r.body for r in second} == sent
    assert all(r.attempt == 1 and r.topic == "work" for r in first + second)
    assert c.ack("g", "work", first + second) == [""] * 6
    time.sleep(2.5)  # an absence: past every invisibility
    assert c.receive("g", "work", 10) == []
    # acknowledged already: saying so again is no error, as in RocketMQ (an ack whose answer was
    # lost with a master that died is sent again by the node that passed it on)
    assert c.ack("g", "work", first[:1]) == [""]


def test_a_message_not_acked_comes_back_with_its_attempt_when_its_invisible_time_is_up(c):
    """Its invisible time is the wait (a SimpleConsumer's retry interval, as in RocketMQ 5): the
    group's backoff (60 s here) is not added after it, as it was."""
    c.update_group("g", backoff=[60])
    sent = send(c, 1)
    t0 = time.monotonic()  # (before the receive: its invisible time starts within the call)
    (got,) = c.receive("g", "work", 10, invisible=0.2)
    again = []
    wait_until(lambda: again.extend(c.receive("g", "work", 10, invisible=5)) or again, timeout=15, what="the redelivery")
    assert time.monotonic() - t0 >= 0.2  # (not before its time)
    (r,) = again
    assert (r.body, r.topic, r.attempt) == (got.body, "work", 2) and {r.body} == sent
    assert r.queue.queue_id == 0 and r.properties.get("RETRY_TOPIC") == "work"
    assert c.ack("g", "work", [got]) != [""]  # its first delivery is over: it came back (only acks are remembered)
    assert c.ack("g", "work", [r]) == [""]


def test_a_nack_waits_the_groups_backoff_once(c):
    c.update_group("g", backoff=[0.5])
    send(c, 1)
    (got,) = c.receive("g", "work", 10, invisible=30)
    t0 = time.monotonic()
    c.nack("g", "work", got)
    again = []
    wait_until(lambda: again.extend(c.receive("g", "work", 10, invisible=5)) or again, timeout=15, what="the redelivery")
    took = time.monotonic() - t0
    assert 0.45 <= took < 5, took  # the backoff, once (not twice, not none)
    assert again[0].attempt == 2


def test_a_changed_invisibility_is_the_only_wait_before_it_comes_back(c):
    """A push consumer's nack sets the invisibility to its client's backoff: that is the wait,
    the group's (60 s here) is not added after it (it was: it waited twice)."""
    c.update_group("g", backoff=[60])
    send(c, 1)
    (got,) = c.receive("g", "work", 10, invisible=30)
    t0 = time.monotonic()
    c.change_invisible("g", "work", got, 0.5)
    again: list = []
    wait_until(lambda: again.extend(c.receive("g", "work", 10, invisible=5)) or again, timeout=15, what="the redelivery")
    assert time.monotonic() - t0 >= 0.45 and again[0].attempt == 2


def test_a_nack_of_the_last_delivery_sets_it_aside_at_once(c):
    """Not after the group's backoff (60 s): nothing comes of that wait but the DLQ."""
    c.update_group("g", max_deliveries=1, backoff=[60])
    send(c, 1)
    (got,) = c.receive("g", "work", 10, invisible=30)
    c.nack("g", "work", got)
    dlq = "%DLQ%g"
    wait_until(
        lambda: dlq in c.topics() and c.pull(dlq, c.route(dlq, refresh=True).queues[0], 0).messages,
        timeout=15,
        what="the dead letter",
    )


def test_after_the_maximum_deliveries_it_is_a_dead_letter(c, server):
    c.update_group("g", max_deliveries=2, backoff=[0.1])
    send(c, 1, "doomed")
    (first,) = c.receive("g", "work", 1)
    c.nack("g", "work", first)
    second: list = []
    wait_until(lambda: second.extend(c.receive("g", "work", 1)) or second, timeout=15, what="the second delivery")
    assert second[0].attempt == 2
    c.nack("g", "work", second[0])
    wait_until(lambda: "%DLQ%g" in c.topics(), timeout=15, what="the DLQ topic")
    route = c.route("%DLQ%g", refresh=True)

    def dead() -> list:
        return c.pull("%DLQ%g", QueueRef(route.nodes[0].name, route.nodes[0].address, 0), 0).messages

    wait_until(dead, timeout=15, what="the dead letter")
    (d,) = dead()
    assert d.body == b"doomed0" and d.properties["DLQ_ORIGIN_TOPIC"] == "work" and d.reconsume_times == 2
    assert d.properties["DLQ_ORIGIN_MESSAGE_ID"]
    time.sleep(0.5)
    assert c.receive("g", "work", 5) == []  # set aside: not delivered again
    (info,) = [info for _node, info in c.describe_groups("g")]
    assert (info.inflight, info.dead_letters) == (0, 1)
    assert not [q for q in info.queues if q.topic.startswith(("%RETRY%", "%DLQ%"))]  # counted, not listed
    scraped = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).read().decode()
    assert "msgstore_pop_dead_lettered_total 1.0" in scraped and "msgstore_pop_redelivered_total 1.0" in scraped


def test_change_invisible_keeps_it_away_longer_and_retires_the_old_receipt(c):
    send(c, 1)
    (got,) = c.receive("g", "work", 1, invisible=1.0)
    new = c.change_invisible("g", "work", got, 5.0)
    time.sleep(1.5)  # an absence: past the first invisibility
    assert c.receive("g", "work", 5) == []
    assert c.ack("g", "work", [got.receipt]) != [""]
    assert c.ack("g", "work", [new]) == [""]


def test_concurrent_receivers_of_one_queue_never_share_a_delivery(c):
    c.create_topic("one", 1)
    bodies = {b"x%d" % i for i in range(200)}
    for b in sorted(bodies):
        c.send("one", b, visible=True)  # (the members stop at their first empty receive)
    seen: list[bytes] = []
    lock = threading.Lock()

    def member() -> None:
        with Client(c.route("one").nodes[0].address, timeout=10) as mine:
            while True:
                got = mine.receive("g", "one", 7, invisible=30)
                if not got:
                    return
                with lock:
                    seen.extend(r.body for r in got)
                mine.ack("g", "one", got)

    threads = [threading.Thread(target=member) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(seen) == sorted(bodies)  # each exactly once


def test_a_sigkill_loses_no_delivery_in_flight(servers):
    node = servers("pop-crash")
    with Client(node.address, timeout=10) as c:
        c.create_topic("work", 1)
        c.update_group("g", backoff=[0.1])
        sent = send(c, 10)
        got = c.receive("g", "work", 10, invisible=1.0)
        acked = {r.body for r in got[:4]}
        assert c.ack("g", "work", got[:4]) == [""] * 4
    node.kill()
    node.start()
    with Client(node.address, timeout=10) as c:
        back: list = []
        wait_until(
            lambda: back.extend(c.receive("g", "work", 10, invisible=30)) or {r.body for r in back} >= sent - acked,
            timeout=20,
            what="the unacknowledged messages after the restart",
        )
        assert {r.body for r in back} == sent - acked  # acked ones stay acked across the crash
        assert all(r.attempt == 2 for r in back)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"invisible": 13 * 3600}, "invisible_ms"),
        ({"max_messages": 5000}, "max_messages"),
        ({"invisible": 0}, "invisible: must be at least 1 ms"),  # (became 1 ms without a word)
        ({"invisible": -2}, "invisible: must be at least 1 ms"),
        ({"invisible": 0.0001}, "invisible: must be at least 1 ms"),
    ],
)
def test_bad_receives_are_invalid_argument_naming_the_field(c, kwargs, field):
    with pytest.raises(StoreError) as e:
        c.receive("g", "work", **kwargs)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and field in e.value.details


def test_a_receive_without_an_invisible_time_is_refused_not_made_30_s(server, c):
    stub = pbg.MessageStoreStub(c.channel(server.address))
    for bad in (0, -5):
        with pytest.raises(grpc.RpcError) as e:
            stub.Receive(pb.ReceiveRequest(group="g", topic="work", invisible_ms=bad), timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and e.value.details().startswith("invisible_ms: required")
    with pytest.raises(StoreError) as e:
        c.change_invisible("g", "work", "garbage", -1)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "invisible: must be at least 0 ms" in e.value.details


def test_each_receipt_gets_its_own_result_a_bad_one_fails_alone(server, c):
    """One bad receipt made the whole ack fail with INVALID_ARGUMENT, naming none, and
    acknowledged nothing; now it fails alone, and the others are acknowledged."""
    send(c, 2)
    good = c.receive("g", "work", 2, invisible=3)
    assert len(good) == 2
    foreign = dataclasses.replace(Receipt.decode(good[0].receipt), group="other").encode()  # well formed, another group's
    errors = c.ack("g", "work", [good[0], "garbage", good[1]])
    assert errors[0] == errors[2] == "" and errors[1].startswith("receipt_handle: ")
    stub = pbg.MessageStoreStub(c.channel(server.address))
    resp = stub.Ack(pb.AckRequest(group="g", topic="work", receipt_handles=["garbage", foreign]), timeout=10)
    assert [r.ok for r in resp.results] == [False, False]
    assert resp.results[0].error.startswith("receipt_handle: ") and "is a delivery to group other, not g" in resp.results[1].error
    assert not wait_until_nothing(c)  # the two acknowledged never come back
    with pytest.raises(StoreError) as e:  # a change of invisibility takes one receipt: a bad one fails the call
        c.change_invisible("g", "work", "garbage", 1)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "receipt_handle" in e.value.details


def wait_until_nothing(c) -> list:
    """What comes back in 4 s (past the invisible time of what was received, 3 s)."""
    deadline = time.monotonic() + 4
    got: list = []
    while time.monotonic() < deadline:
        got += c.receive("g", "work", 10, invisible=5, wait=0.3)
    return got


def test_the_cli_receives_acks_and_resends_dead_letters(server, c):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server"))

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "msgstore.cli", "--json", *args, "--server", server.address],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=60,
        )

    c.update_group("cli", max_deliveries=1)
    send(c, 2, "c")
    out = cli("receive", "cli", "work", "--max", "1", "--invisible", "20s")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    ack = cli("ack", "cli", "work", row["receipt"])
    assert ack.returncode == 0 and json.loads(ack.stdout)[0]["ok"]
    left = json.loads(cli("receive", "cli", "work", "--invisible", "100ms").stdout)
    assert len(left) == 1  # not acked, and one delivery is the maximum: a dead letter when it lapses
    wait_until(lambda: json.loads(cli("dlq", "cli").stdout or "[]"), timeout=15, what="the dead letter in the CLI")
    resend = cli("dlq", "cli", "--resend")
    assert resend.returncode == 0, resend.stderr
    again = json.loads(cli("receive", "cli", "work").stdout)
    assert [r["body"] for r in again] == [left[0]["body"]]  # back on its topic, a first delivery again
    assert json.loads(cli("dlq", "cli", "--resend").stdout) == []  # resent once only
    (listed,) = json.loads(cli("dlq", "cli").stdout)  # and still listed, marked as resent (it was not)
    assert listed["resent"] is True
    assert len(json.loads(cli("receive", "cli", "work", "--invisible", "30s").stdout)) == 0


def test_a_message_that_cannot_come_back_blocks_no_other(c):
    """A retry adds properties; one whose properties then exceed the limit is dropped (and
    says so in the log), and every other delivery still comes back."""
    c.update_group("g", backoff=[0.1])
    assert c.send("work", b"huge", properties={"p": "x" * 32_700}, visible=True).ok
    assert c.send("work", b"small", visible=True).ok
    assert len(c.receive("g", "work", 10, invisible=0.2)) == 2
    back: list = []
    wait_until(lambda: back.extend(c.receive("g", "work", 10, invisible=30)) or back, timeout=15, what="the small message back")
    assert [r.body for r in back] == [b"small"] and back[0].attempt == 2


def test_every_queue_gets_its_turn(c):
    first = c.route("work").nodes[0]
    for q in range(2):
        for i in range(10):
            c.send("work", b"q%d-%d" % (q, i), queue=QueueRef(first.name, first.address, q), visible=True)
    got = [r for _ in range(3) for r in c.receive("g", "work", 4, invisible=30)]
    assert {r.queue.queue_id for r in got} == {0, 1}


def test_groups_whose_retry_topics_share_a_name_get_only_their_own_retries(c):
    """%RETRY%a_b_c is group a_b's retry topic for topic c, and group a's for topic b_c."""
    c.create_topic("c", 1)
    c.create_topic("b_c", 1)
    for group, topic in (("a_b", "c"), ("a", "b_c")):
        c.update_group(group, backoff=[0.1])
        assert c.send(topic, f"{group}:{topic}".encode(), visible=True).ok
        assert len(c.receive(group, topic, 5, invisible=0.2)) == 1
    for group, topic in (("a_b", "c"), ("a", "b_c")):
        back: list = []
        wait_until(lambda g=group, t=topic, b=back: b.extend(c.receive(g, t, 5, invisible=30)) or b, timeout=15, what=f"{group}'s retry")
        assert [r.body for r in back] == [f"{group}:{topic}".encode()]


def test_a_group_whose_retry_topic_name_would_be_too_long_is_invalid_argument(c):
    with pytest.raises(StoreError) as e:
        c.receive("g" * 124, "work")
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and e.value.details.startswith("group")


def test_the_asyncio_client_receives_acks_nacks_and_delays(c, server):
    from msgstore.client import AsyncClient

    async def scenario() -> tuple[list, list, int]:
        ac = AsyncClient(server.address, timeout=10)
        try:
            await ac.update_group("ag", backoff=[0.1])
            sent = await ac.send("work", b"later", delay=0.3)
            assert sent.recall_handle
            t0 = time.monotonic()
            first = await ac.receive("ag", "work", 5, wait=30)  # long polling: woken when the timer delivers it
            assert time.monotonic() - t0 < 15, "the long poll was not woken by the arrival"
            await ac.nack("ag", "work", first[0])
            again: list = []
            while not again:
                again = await ac.receive("ag", "work", 5, wait=5)
            errors = await ac.ack("ag", "work", again)
            return first, again, len([e for e in errors if e])
        finally:
            await ac.close()

    first, again, failed = asyncio.run(scenario())
    assert [r.body for r in first] == [b"later"] and [(r.body, r.attempt) for r in again] == [(b"later", 2)] and failed == 0
