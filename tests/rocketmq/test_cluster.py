"""The official Python client against several nodes: three nodes are three RocketMQ brokers
whose queues a producer spreads over and a consumer receives from; a replica group is one
broker named after the group, whose endpoint is its master's, and a failover moves it: a
producer already running follows on its next route refresh, a new one at once."""

from __future__ import annotations

import time

import pytest
from rocketmq import FilterExpression, Producer, SimpleConsumer

from msgstore.client import Client
from tests.ha.conftest import Group, caught_up, role
from tests.rocketmq.conftest import config, started
from tests.rocketmq.test_official_client import message, receive_all
from tests.support.servers import wait_until

FAST_FAILURE = ["haKeepaliveTimeout=1500"]


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
