"""The operator as replication controller (issue 13): one group of three members, real store
processes as pods, Kopf against kmock."""

import asyncio
import os
import signal

import kubernetes_validate
import pytest

from msgstore.client import Client, OutMessage
from msgstore.client.routing import QueueRef
from tests.operator.conftest import ApiServer
from tests.operator.test_operator import SMALL, ready

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=ApiServer)]

STS, CM = "apps/v1/statefulsets", "v1/configmaps"
REPLICATION = {"replicas": 3, "mode": "SYNC", "inSyncReplicas": 2, "failoverAfterSeconds": 2}


def group(env, name: str = "orders-g0") -> dict:
    return ((env.store().get("status") or {}).get("replication") or {}).get("groups", {}).get(name, {})


def followers_connected(env) -> bool:
    g = group(env)
    members = [m for m in g.get("members", []) if m["name"] != g.get("master")]
    return len(members) == 2 and all(m.get("role") == "SLAVE" and m.get("connected") and m.get("lagBytes") == 0 for m in members)


def client(env) -> Client:
    return Client(",".join(c.address for c in env.cluster.containers.values()), timeout=10, failover_timeout=30)


async def test_a_master_not_ready_is_failed_over_and_rejoins_as_a_follower(env):
    await env.create(replicas=1, store=SMALL, replication=REPLICATION)
    await env.until(lambda: ready(env) and followers_connected(env), timeout=90, what="Ready with both followers connected")
    sts = env.obj(STS, "orders")
    assert sts["spec"]["replicas"] == 3  # one node, three members
    kubernetes_validate.validate(sts, "1.30.0", strict=True)
    pod = sts["spec"]["template"]["spec"]
    assert "--roles-file" in pod["containers"][0]["args"] and "podAntiAffinity" in pod["affinity"]
    roles = env.obj(CM, "orders-roles")["data"]["roles.json"]
    assert '"master": "orders-0"' in roles and '"epoch": 1' in roles
    assert group(env)["address"] == env.cluster.containers["orders-0"].address

    c = client(env)
    route = await asyncio.to_thread(c.route, "orders", True)  # (blocking calls in threads: kmock serves from this loop)
    assert [n.name for n in route.nodes] == ["orders-g0"] and [m.name for m in route.nodes[0].members if m.role == "MASTER"] == ["orders-0"]
    assert route.nodes[0].address.endswith("#orders-g0")  # spec.access AccessPoint (the default): through the address asked
    acked: dict = {}

    def send(tag: bytes, batches: int) -> None:
        for i in range(batches):
            bodies = [b"%s-%d-%d" % (tag, i, k) for k in range(10)]
            for body, r in zip(bodies, c.send_batch("orders", [OutMessage(b) for b in bodies]), strict=True):
                assert r.status == "PUT_OK"  # SYNC: on the master and every in-sync follower
                acked[(r.queue_id, r.queue_offset)] = body

    await asyncio.to_thread(send, b"before", 20)
    old = env.cluster.containers["orders-0"].proc
    os.kill(old.pid, signal.SIGSTOP)  # alive but silent: not Ready
    try:
        await env.until(lambda: env.events("Failover"), timeout=60, what="a Failover event")
        g = group(env)
        assert g["master"] in ("orders-1", "orders-2") and g["epoch"] == 2 and g["lastFailover"]["from"] == "orders-0"
        assert "promoted" in env.events("Failover")[0]["message"]
        await env.until(lambda: f'"master": "{g["master"]}"' in env.obj(CM, "orders-roles")["data"]["roles.json"], what="roles file")
        await asyncio.to_thread(send, b"after", 10)  # writes continue on the new master (the other follower confirms)
    finally:
        os.kill(old.pid, signal.SIGCONT)
    # the old master, back, believes it is master at epoch 1: the operator makes it follow
    await env.until(
        lambda: (
            any(m["name"] == "orders-0" and m.get("role") == "SLAVE" for m in group(env).get("members", [])) and followers_connected(env)
        ),
        timeout=60,
        what="orders-0 following the new master",
    )
    new = env.cluster.containers[group(env)["master"]].address

    def read_back() -> None:
        for (qid, off), body in acked.items():
            got = c.pull("orders", QueueRef("orders-g0", new, qid), off, max_messages=1)
            assert [bytes(m.body) for m in got.messages] == [body], (qid, off)

    await asyncio.to_thread(read_back)
    st = env.store()["status"]
    assert [m["role"] for m in group(env)["members"]].count("MASTER") == 1
    assert next(x for x in st["conditions"] if x["type"] == "FailoverBlocked")["status"] == "False"
    c.close()


async def test_a_roll_restarts_followers_first_and_moves_mastership_before_the_master(env):
    await env.create(replicas=1, store=SMALL, replication=REPLICATION)
    await env.until(lambda: ready(env) and followers_connected(env), timeout=90, what="Ready with both followers connected")
    c = client(env)
    bodies = [b"m%d" % i for i in range(100)]
    sent = await asyncio.to_thread(c.send_batch, "orders", [OutMessage(b) for b in bodies])
    acked = [(b, r) for b, r in zip(bodies, sent, strict=True) if r.status == "PUT_OK"]
    assert len(acked) == 100
    env.cluster.history.clear()
    await env.patch(annotations={"msgstore.io/restart": "r1"})
    await env.until(lambda: env.events("RollFinished"), timeout=180, what="the roll to finish")
    await env.until(lambda: ready(env) and followers_connected(env), timeout=90, what="Ready again")
    stops = [p for e, p in env.cluster.history if e == "stopped"]
    assert stops[:2] == ["orders-2", "orders-1"] and stops[2] == "orders-0"  # the master (orders-0) last
    switch = env.events("Switchover")
    assert switch and "from orders-0" in switch[0]["message"]
    assert group(env)["master"] != "orders-0" or group(env)["epoch"] >= 3
    master = env.cluster.containers[group(env)["master"]].address
    for body, r in acked:
        got = await asyncio.to_thread(c.pull, "orders", QueueRef("orders-g0", master, r.queue_id), r.queue_offset, max_messages=1)
        assert [bytes(m.body) for m in got.messages] == [body], (r.queue_id, r.queue_offset)
    c.close()
