"""Delayed delivery (issue 22, part 1) against real server processes: RocketMQ 4's delay levels
(SCHEDULE_TOPIC_XXXX, config/delayOffset.json) and RocketMQ 5's timer (rmq_sys_wheel_timer,
config/timercheck) with recall; refusals naming the property; a SIGKILL with messages pending
loses none and delivers none more than once more; the CLI's --delay and recall."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import grpc
import pytest

from msgstore.client import Client, OutMessage, StoreError
from msgstore.client.routing import QueueRef
from msgstore.v1 import msgstore_pb2 as pb
from msgstore.v1 import msgstore_pb2_grpc as pbg
from tests.support.servers import ROOT, wait_until

LEVELS = "1s 2s"


def bodies(client: Client, topic: str, queue: int = 0) -> list[bytes]:
    node = client.route(topic, refresh=True).nodes[0]
    got = client.pull(topic, QueueRef(node.name, node.address, queue), 0, max_messages=1000)
    return [m.body for m in got.messages]


def pulled(client: Client, topic: str, queue: int = 0) -> list:
    node = client.route(topic, refresh=True).nodes[0]
    return client.pull(topic, QueueRef(node.name, node.address, queue), 0, max_messages=1000).messages


@pytest.fixture
def node(servers):
    return servers("delays", settings=[f"messageDelayLevel={LEVELS}"])


@pytest.fixture
def c(node):
    with Client(node.address, timeout=10) as client:
        client.create_topic("orders", 2)
        yield client


def test_a_timer_message_arrives_at_its_time_not_before_with_its_fields(c):
    sent = time.time()
    res = c.send("orders", b"later", tags="T", keys=["k1"], queue=None, delay=1.0, properties={"app": "x"})
    assert res.ok and res.recall_handle
    assert bodies(c, "orders", 0) + bodies(c, "orders", 1) == []  # stored in the timer topic, not yet in its own
    wait_until(lambda: b"later" in bodies(c, "orders", 0) + bodies(c, "orders", 1), timeout=15, what="the timer message")
    assert time.time() - sent >= 1.0
    (m,) = [m for q in (0, 1) for m in pulled(c, "orders", q)]
    assert (m.tags, m.user_keys, m.properties["app"]) == ("T", ["k1"], "x")
    assert m.properties["UNIQ_KEY"]  # given to a timer message (its recall handle names it), kept on delivery
    assert int(m.properties["TIMER_OUT_MS"]) >= int(sent * 1000) + 1000
    assert "REAL_TOPIC" not in m.properties and "TIMER_DELIVER_MS" not in m.properties
    assert c.query("orders", "k1")[0][1].body == b"later"  # indexed under its key once delivered


def test_messages_come_in_the_order_of_their_times_not_of_sending(c):
    now = time.time()
    first = c.route("orders").nodes[0]
    for i, at in enumerate([2.0, 0.5, 1.5, 1.0]):
        c.send("orders", b"%d" % i, queue=QueueRef(first.name, first.address, 1), deliver_at=now + at)
    wait_until(lambda: len(bodies(c, "orders", 1)) == 4, timeout=15, what="four timer messages")
    assert bodies(c, "orders", 1) == [b"1", b"3", b"2", b"0"]


def test_delay_levels_go_through_the_schedule_topic_and_clamp_to_the_last_level(c, node):
    sent = time.time()
    c.send("orders", b"level-1", delay_level=1)
    c.send("orders", b"level-9", delay_level=9)  # beyond the 2 configured levels: the last (2 s)
    assert c.topics()["SCHEDULE_TOPIC_XXXX"]
    wait_until(lambda: len(bodies(c, "orders", 0) + bodies(c, "orders", 1)) == 2, timeout=15, what="two level messages")
    assert time.time() - sent >= 2.0
    path = os.path.join(node.data_dir, "config", "delayOffset.json")  # RocketMQ's file, saved every second

    def saved() -> dict:
        with open(path) as f:
            return json.load(f)["offsetTable"]

    wait_until(lambda: os.path.exists(path) and saved() == {"1": 1, "2": 1}, timeout=5, what="delayOffset.json")


def test_a_delay_level_wins_over_timer_properties_as_in_rocketmq(c):
    """RocketMQ clears TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS when DELAY names a
    level (HookUtils.checkIfTimerMessage); here the timer won, the level ignored."""
    far = str(int(time.time() * 1000) + 3_600_000)  # an hour away: a timer win would never arrive in the test
    c.send("orders", b"level wins", delay_level=1, properties={"TIMER_DELIVER_MS": far, "TIMER_DELAY_SEC": "3600"})
    wait_until(lambda: b"level wins" in bodies(c, "orders", 0) + bodies(c, "orders", 1), timeout=15, what="the level-1 message")
    (m,) = [m for m in pulled(c, "orders", 0) + pulled(c, "orders", 1) if m.body == b"level wins"]
    assert "TIMER_DELIVER_MS" not in m.properties and "TIMER_DELAY_SEC" not in m.properties
    assert not c.topics().get("rmq_sys_wheel_timer")  # never went through the timer


def test_a_recalled_message_never_arrives_and_a_late_recall_is_refused(c):
    sent = time.time()
    keep = c.send("orders", b"keep", delay=0.5)
    drop = c.send("orders", b"drop", delay=2.0)
    c.recall(drop)
    wait_until(lambda: b"keep" in bodies(c, "orders", 0) + bodies(c, "orders", 1), timeout=15, what="the kept message")
    time.sleep(max(0.0, sent + 2.5 - time.time()))  # past the recalled one's time: it must stay away
    assert b"drop" not in bodies(c, "orders", 0) + bodies(c, "orders", 1)
    with pytest.raises(StoreError) as e:
        c.recall(keep)
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION and "too late" in e.value.details
    with pytest.raises(StoreError) as e:
        c.recall("not-a-handle")
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "recall_handle" in e.value.details
    # the client refuses that before any call: the store must too (a raw stub, as another client's)
    with pytest.raises(grpc.RpcError) as raw:
        pbg.MessageStoreStub(c.channel(c.endpoints[0])).Recall(pb.RecallRequest(recall_handle="not-a-handle"), timeout=10)
    assert raw.value.code() == grpc.StatusCode.INVALID_ARGUMENT and raw.value.details().startswith("recall_handle: ")


@pytest.mark.parametrize(
    "props, field",
    [
        ({"TIMER_DELAY_SEC": str(4 * 86400)}, "TIMER_DELAY_SEC"),  # timerMaxDelaySec is 3 days
        ({"TIMER_DELIVER_MS": "soon"}, "TIMER_DELIVER_MS"),
        ({"DELAY": "one"}, "DELAY"),
        ({"TIMER_DEL_UNIQKEY": "ABC"}, "TIMER_DEL_UNIQKEY"),  # a recall marker is the store's own
    ],
)
def test_a_delay_that_cannot_be_honoured_is_invalid_argument_naming_the_property(c, props, field):
    with pytest.raises(StoreError) as e:
        c.send("orders", b"x", properties=props)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert f"properties['{field}']" in e.value.details


def test_system_topics_cannot_be_sent_to_directly(c):
    for topic in ("SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer"):
        with pytest.raises(StoreError) as e:
            c.send(topic, b"x")
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "system topic" in e.value.details


def test_a_recall_cancels_its_topics_copies_only(c):
    """Keyed by topic and UNIQ_KEY, as RocketMQ's delete key: the same id on another topic is
    another message (it was cancelled instead), and both stored copies of a retried send are
    recalled (only one was)."""
    c.create_topic("other", 1)
    at = time.time() + 3  # (four sends and a recall before then, on a loaded machine too)
    a = c.send("orders", b"a", uniq_key="SAME-ID", deliver_at=at)
    c.send("other", b"b", uniq_key="SAME-ID", deliver_at=at)
    c.send("orders", b"a-copy", uniq_key="SAME-ID", deliver_at=at)  # a producer's retry: a second copy stored
    c.send("orders", b"sentinel", deliver_at=at + 0.3)
    c.recall(a)
    wait_until(lambda: b"sentinel" in bodies(c, "orders", 0) + bodies(c, "orders", 1), timeout=15, what="the sentinel, due after them")
    assert bodies(c, "other") == [b"b"]
    assert set(bodies(c, "orders", 0) + bodies(c, "orders", 1)) == {b"sentinel"}


def test_a_delayed_send_names_where_and_as_what_it_will_be_delivered(c, node):
    """It reported the system topic's queue, offset and offset id (a level past the last even
    showed queue 17 of a 2-queue topic), and querying that id found nothing (issue 33.10)."""
    level = c.send("orders", b"by-level", delay_level=99)
    timed = c.send("orders", b"by-time", delay=0.5)
    for r in (level, timed):
        assert r.ok and r.topic == "orders" and 0 <= r.queue_id < 2 and r.queue_offset == -1
        assert len(r.message_id) == 32  # the UNIQ_KEY it is delivered with
    assert timed.recall_handle and not level.recall_handle
    for r, body in ((level, b"by-level"), (timed, b"by-time")):
        wait_until(lambda r=r: c.query("orders", r.message_id), timeout=15, what=f"{body!r} delivered and found by its id")
        ((_node, found),) = c.query("orders", r.message_id)
        assert found.body == body and found.queue_id == r.queue_id
    out = subprocess.run(
        [sys.executable, "-m", "msgstore.cli", "--json", "send", "orders", "x", "--delay-level", "99", "--server", node.address],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server")),
    )
    row = json.loads(out.stdout)
    assert row["topic"] == "orders" and row["queue"] < 2 and "offset" not in row and len(row["message_id"]) == 32


def test_a_message_sent_again_after_its_recall_is_delivered(c):
    """A reschedule: recall, then send the same id for another time. The recall cancels what was
    stored before it only (it cancelled the new message too)."""
    first = c.send("orders", b"old time", uniq_key="RESCHEDULED", deliver_at=time.time() + 30)
    c.recall(first)
    c.send("orders", b"new time", uniq_key="RESCHEDULED", delay=0.3)
    wait_until(lambda: b"new time" in bodies(c, "orders", 0) + bodies(c, "orders", 1), timeout=15, what="the rescheduled message")


def test_a_recall_holds_across_a_restart(servers):
    node = servers("recall-restart")
    with Client(node.address, timeout=10) as c:
        c.create_topic("jobs", 1)
        gone = c.send("jobs", b"recalled", delay=2.5)
        c.send("jobs", b"kept", delay=2.5)
        c.recall(gone)
    node.kill()
    node.start()
    with Client(node.address, timeout=10) as c:
        wait_until(lambda: b"kept" in bodies(c, "jobs"), timeout=15, what="the kept message after the restart")
        assert bodies(c, "jobs") == [b"kept"]


def test_a_delay_to_a_topic_that_cannot_exist_is_refused_at_once(servers):
    node = servers("no-auto", settings=["autoCreateTopicEnable=false"])
    with Client(node.address, timeout=10) as c:
        with pytest.raises(StoreError) as e:  # the client's route lookup already says so (issue 31)
            c.send("nowhere", b"x", delay=5)
        assert e.value.code == grpc.StatusCode.NOT_FOUND and "no topic nowhere" in e.value.details
        with pytest.raises(StoreError) as e:  # and a Send naming it anyway is refused by the server, naming the field
            c.send_entries(node.address, [OutMessage(b"x", properties={"TIMER_DELAY_SEC": "5"}).entry("nowhere", 0)])
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "entries[0].topic" in e.value.details


def test_a_sigkill_with_messages_pending_loses_none_and_repeats_none_twice(servers):
    """Every message arrives, none before its time; one not yet due when the store was killed
    arrives exactly once, one delivered just before it at most once more (the progress is
    saved every second)."""
    node = servers("crash", settings=[f"messageDelayLevel={LEVELS}"])
    levels_s = [float(x.rstrip("s")) for x in LEVELS.split()]
    due: dict[bytes, float] = {}  # not before this (the send began then; the store's clock is ours)
    with Client(node.address, timeout=10) as c:
        c.create_topic("jobs", 1)
        for i in range(40):
            body = b"t%d" % i
            due[body] = time.time() + 0.2 + 0.05 * i
            c.send("jobs", body, delay=0.2 + 0.05 * i)
        for i in range(10):
            body = b"l%d" % i
            due[body] = time.time() + levels_s[i % 2]
            c.send("jobs", body, delay_level=1 + i % 2)
        due[b"sentinel"] = time.time() + 4  # still pending at the kill however fast the rest went
        c.send("jobs", b"sentinel", delay=4)
        wait_until(lambda: len(bodies(c, "jobs")) >= 15, timeout=15, what="some deliveries before the crash")
    # taken once the process is gone: its timer may deliver until then, and its progress (saved
    # every second) does not hold that delivery yet, so a message due just before may come twice
    node.kill()
    killed_at = time.time()
    node.start()
    with Client(node.address, timeout=10) as c:
        wait_until(lambda: set(bodies(c, "jobs")) == set(due), timeout=20, what="every pending message after the restart")
        got = pulled(c, "jobs")
    counts = {b: [m.body for m in got].count(b) for b in due}
    assert max(counts.values()) <= 2, counts  # at most once more after a crash
    later = [b for b, t in due.items() if t > killed_at]
    assert later and all(counts[b] == 1 for b in later), {b: counts[b] for b in later}  # not due at the crash: exactly once
    early = [(m.body, m.store_timestamp, due[m.body]) for m in got if m.store_timestamp < due[m.body] * 1000 - 5]
    assert not early, early  # none before its time (5 ms: the store's millisecond stamps)


def test_the_cli_sends_with_a_delay_and_recalls(node, c):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server"))

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "msgstore.cli", "--json", *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60
        )

    sent = time.time()
    out = cli("send", "orders", "via-cli", "--delay", "4000ms", "--server", node.address)  # (two CLI starts before it is due)
    assert out.returncode == 0, out.stderr
    handle = json.loads(out.stdout)["recall_handle"]
    assert cli("recall", handle, "--server", node.address).returncode == 0
    bad = cli("send", "orders", "x", "--delay", "soon", "--server", node.address)
    assert bad.returncode == 2 and "not a duration" in bad.stderr
    later = cli("send", "orders", "at-time", "--deliver-at", str(time.time() + 0.5), "--server", node.address)
    assert later.returncode == 0, later.stderr
    wait_until(lambda: b"at-time" in bodies(c, "orders", 0) + bodies(c, "orders", 1), timeout=15, what="the --deliver-at message")
    time.sleep(max(0.0, sent + 4.7 - time.time()))  # past the recalled message's time
    assert b"via-cli" not in bodies(c, "orders", 0) + bodies(c, "orders", 1)
