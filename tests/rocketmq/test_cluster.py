"""The official Python client against several nodes: three nodes are three RocketMQ brokers
whose queues a producer spreads over and a consumer receives from; a replica group is one
broker named after the group, whose endpoint is its master's, and a failover moves it: a
producer already running follows on its next route refresh, a new one at once."""

from __future__ import annotations

import subprocess
import sys
import time

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from rocketmq import FilterExpression, Producer, SimpleConsumer
from rocketmq.grpc_protocol import MessagingServiceStub, definition_pb2, service_pb2

from msgstore.client import Client
from tests.ha.conftest import Group, caught_up, role
from tests.rocketmq.conftest import config, started
from tests.rocketmq.test_official_client import message, receive_all
from tests.support.servers import ROOT, wait_until

d, s = definition_pb2, service_pb2

FAST_FAILURE = ["haKeepaliveTimeout=1500"]
INVISIBLE_S = 12  # a received job stays invisible this long (then, not acked, it would come back)
DUE_S = 16  # the delayed message's due time, from its send (a failover, a CLI start and a rejoin come before the recall)


def address(endpoints) -> str:
    """host:port of the client's endpoints ("ipv4:127.0.0.1:5000")."""
    return endpoints.facade.split(":", 1)[1]


@pytest.fixture
def group(tmp_path):
    g = Group(tmp_path, 2, FAST_FAILURE, FAST_FAILURE)
    yield g.start()
    g.kill_all()


def test_three_nodes_are_three_brokers_and_messages_spread_over_them(cluster):
    three = cluster
    cfg = config(three[0].address)  # one address: the route names the others
    with started(Producer(cfg, ("spread",))) as producer:
        ids = {producer.send(message("spread", b"m%d" % i)).message_id for i in range(24)}
    assert len(ids) == 24
    with started(SimpleConsumer(cfg, "all", {"spread": FilterExpression()}, 1)) as consumer:
        got = receive_all(consumer, 24)
        assert {m.message_id for m in got} == ids
        assert {address(m.endpoints) for m in got} == {n.address for n in three}  # received from every broker
        for m in got:
            consumer.ack(m)


def test_a_replica_group_is_one_broker_and_a_failover_moves_it(group):
    old, new = group.members
    cfg = config(f"{old.address};{new.address}")
    with started(Producer(cfg, ("orders",))) as producer:
        first = producer.send(message("orders", b"before"))
        assert address(first.message_queue.endpoints) == old.address
        with Client(new.address, timeout=10) as c:
            caught_up(c, new, old)  # (ASYNC: what the follower has not copied is lost with its master)
            old.kill()
            wait_until(lambda: not role(c, new).connected, timeout=15, what="the follower to notice its master is gone")
            assert c.admin(new.address).promote().role == "MASTER"
        # a producer started now is sent to the new master at once
        with started(Producer(config(new.address), ("orders",))) as fresh:
            assert address(fresh.send(message("orders", b"fresh")).message_queue.endpoints) == new.address
        # the one already running moves on its next route refresh (the client's 10 s, then every 30 s)
        t0 = time.monotonic()

        def moved() -> bool:
            try:
                return address(producer.send(message("orders", b"after")).message_queue.endpoints) == new.address
            except Exception:  # sends to the dead master fail until then
                return False

        wait_until(moved, timeout=45, what="the running producer to follow the failover")
        assert time.monotonic() - t0 < 45
    with started(SimpleConsumer(config(new.address), "readers", {"orders": FilterExpression()}, 1)) as consumer:
        got = receive_all(consumer, 3)
        assert {b"before", b"fresh", b"after"} <= {m.body for m in got}


def test_calls_reaching_a_deposed_master_or_another_member_go_on_to_the_master(group):
    """A RocketMQ 5 client acks where it received, ends a transaction where it sent and recalls
    at its access point: after a switchover those reach the old master, now a follower, which
    sends them on to the new one (where the replicated deliveries, halves and timers are). The
    invisibility and the due time are short, so a node that answered OK and forwarded nothing
    would show: the acked job would come back, the recalled message would arrive."""
    old, new = group.members
    with grpc.insecure_channel(old.address) as to_old:
        stub = MessagingServiceStub(to_old)
        t0 = time.time()
        sent = stub.SendMessage(
            s.SendMessageRequest(
                messages=[v2_message("jobs", b"job", "01" + "A" * 32), v2_message("jobs", b"later", "01" + "B" * 32, at=DUE_S)]
            ),
            timeout=10,
        )
        assert sent.status.code == d.OK, sent
        recall = sent.entries[1].recall_handle
        half = v2_message("jobs", b"half", "01" + "C" * 32)
        half.system_properties.message_type = d.TRANSACTION
        tx = stub.SendMessage(s.SendMessageRequest(messages=[half]), timeout=10).entries[0].transaction_id
        got = receive_one(stub, "workers", "jobs")
        received = time.time()
        with Client(new.address, timeout=10) as c:
            caught_up(c, new, old)
        promote = subprocess.run(
            [sys.executable, "-m", "msgstore.cli", "admin", "promote", "--server", new.address],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
        assert promote.returncode == 0, promote.stderr
        with Client(new.address, timeout=10) as c:
            wait_until(lambda: role(c, old).role == "SLAVE", timeout=20, what="the old master to follow")
        assert time.time() < received + INVISIBLE_S - 1, "the failover outlasted the job's invisibility: widen INVISIBLE_S"
        ack = stub.AckMessage(
            s.AckMessageRequest(
                group=d.Resource(name="workers"),
                topic=d.Resource(name="jobs"),
                entries=[
                    s.AckMessageEntry(message_id=got.system_properties.message_id, receipt_handle=got.system_properties.receipt_handle)
                ],
            ),
            timeout=10,
        )
        assert ack.status.code == d.OK, ack.status
        end = stub.EndTransaction(
            s.EndTransactionRequest(topic=d.Resource(name="jobs"), transaction_id=tx, resolution=d.COMMIT), timeout=10
        )
        assert end.status.code == d.OK, end.status
        rec = stub.RecallMessage(s.RecallMessageRequest(topic=d.Resource(name="jobs"), recall_handle=recall), timeout=10)
        assert rec.status.code == d.OK and rec.message_id == "01" + "B" * 32, rec.status
    with grpc.insecure_channel(new.address) as to_new:  # the committed half arrives; the acked job never comes back
        fresh = MessagingServiceStub(to_new)
        bodies: list[bytes] = []
        wait_until(lambda: bodies.extend(receive_and_ack(fresh, "workers", "jobs")) or bodies, timeout=20, what="the committed half")
        # past the recalled message's due time and the acked job's invisibility (no event says
        # "never arrives": the window is watched, bounded, by long polls)
        while time.time() < max(t0 + DUE_S, received + INVISIBLE_S) + 2:
            bodies.extend(receive_and_ack(fresh, "workers", "jobs"))
        assert bodies == [b"half"]


def v2_message(topic: str, body: bytes, message_id: str, at: int = 0):
    m = d.Message(topic=d.Resource(name=topic), body=body)
    m.system_properties.message_id = message_id
    m.system_properties.message_type = d.DELAY if at else d.NORMAL
    if at:
        m.system_properties.delivery_timestamp.seconds = int(time.time()) + at
    return m


def _receive(stub, group: str, topic: str, n: int) -> list:
    req = s.ReceiveMessageRequest(
        group=d.Resource(name=group),
        message_queue=d.MessageQueue(topic=d.Resource(name=topic)),
        batch_size=n,
        invisible_duration=Duration(seconds=INVISIBLE_S),
        long_polling_timeout=Duration(seconds=1),
    )
    return [r.message for r in stub.ReceiveMessage(req, timeout=10) if r.WhichOneof("content") == "message"]


def receive_one(stub, group: str, topic: str):
    got: list = []
    wait_until(lambda: got.extend(_receive(stub, group, topic, 1)) or got, timeout=20, what="a delivery")
    return got[0]


def receive_all_raw(stub, group: str, topic: str) -> list:
    return _receive(stub, group, topic, 32)


def receive_and_ack(stub, group: str, topic: str) -> list[bytes]:
    """Bodies received (each acked at once, so none comes back by itself)."""
    got = _receive(stub, group, topic, 32)
    for m in got:
        resp = stub.AckMessage(
            s.AckMessageRequest(
                group=d.Resource(name=group),
                topic=d.Resource(name=topic),
                entries=[s.AckMessageEntry(message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle)],
            ),
            timeout=10,
        )
        assert resp.status.code == d.OK, resp.status
    return [m.body for m in got]
