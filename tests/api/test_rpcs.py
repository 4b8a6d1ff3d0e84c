"""Every RPC of both services against a real server process."""

import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from msgstore.client import AsyncClient, Consumer, OutMessage, Producer, QueueRef, StoreError
from msgstore.v1 import admin_pb2 as apb
from msgstore.v1 import admin_pb2_grpc
from msgstore.v1 import msgstore_pb2 as pb
from msgstore.v1 import msgstore_pb2_grpc as pbg
from tests.api.test_send_stream import metric
from tests.support.servers import wait_until


def _q(client, topic, qid=0):
    return next(q for q in client.route(topic).queues if q.queue_id == qid)


def test_send_pull_decoded_and_raw(server, client):
    q = _q(client, "orders")
    results = client.send_batch("orders", [OutMessage(b"m%d" % i, key="k%d" % i, tags="new") for i in range(5)], queue=q)
    assert [r.status for r in results] == ["PUT_OK"] * 5
    assert [r.queue_offset for r in results] == [0, 1, 2, 3, 4]
    assert len({r.message_id for r in results}) == 5
    pulled = client.pull("orders", q, 0, max_messages=3, timeout_ms=5000)  # visible once dispatched
    assert pulled.status == "FOUND" and pulled.next_offset == 3
    assert [m.body for m in pulled.messages] == [b"m0", b"m1", b"m2"]
    assert pulled.messages[0].tags == "new" and pulled.messages[0].user_keys == ["k0"]
    stub = pbg.MessageStoreStub(client.channel(server.address))
    decoded = stub.Pull(pb.PullRequest(topic="orders", queue_id=0, offset=3, max_messages=10))
    assert [m.body for m in decoded.messages] == [b"m3", b"m4"] and decoded.records == b""
    assert decoded.messages[0].keys == ["k3"] and decoded.messages[0].msg_id == results[3].message_id
    assert decoded.messages[0].store_host == server.address
    assert pb.PullStatus.Name(stub.Pull(pb.PullRequest(topic="orders", queue_id=0, offset=5)).status) == "OFFSET_OVERFLOW_ONE"


def test_tag_filter_and_statuses(client):
    q = _q(client, "t")
    client.send_batch("t", [OutMessage(b"a", tags="Aa"), OutMessage(b"b", tags="BB"), OutMessage(b"c", tags="Aa")], queue=q)
    client.pull("t", q, 2, timeout_ms=5000)  # wait until all three are dispatched
    res = client.pull("t", q, 0, tag_filter="BB")
    assert [m.body for m in res.messages] == [b"b"] and res.next_offset == 3
    assert client.pull("t", q, 99).status == "OFFSET_OVERFLOW_BADLY"
    assert client.pull("t", _q(client, "t", 1), 0).status == "NO_MATCHED_LOGIC_QUEUE"


def test_query_get_message_offsets_and_time(client):
    t0 = int(time.time() * 1000) - 1
    r = client.send("q", b"payload", key="order-7", tags="x")
    assert r.ok
    node = client.nodes()[0]
    q = QueueRef(r.node, node.address, r.queue_id)
    client.pull("q", q, 0, timeout_ms=5000)  # indexed and queued once dispatched
    found = client.query("q", "order-7")
    assert [(n, m.body) for n, m in found] == [(r.node, b"payload")]
    assert client.get_message(r.message_id).body == b"payload"
    assert client.get_message(commitlog_offset=r.commitlog_offset, node=node).body == b"payload"
    offsets = client.queue_offsets("q")
    assert offsets[q] == (0, 1)
    assert client.offset_by_time("q", q, t0) == 0
    assert client.offset_by_time("q", q, int(time.time() * 1000) + 60_000) == 1


def test_get_message_not_found(server, client):
    stub = pbg.MessageStoreStub(client.channel(server.address))
    with pytest.raises(grpc.RpcError) as e:
        stub.GetMessage(pb.GetMessageRequest(commitlog_offset=123456))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_consumer_group_offsets(client):
    q = _q(client, "g")
    assert client.committed("grp", "g", q) == -1
    client.commit("grp", "g", q, 42)
    assert client.committed("grp", "g", q) == 42


def test_topics_and_route(server, client):
    infos = client.create_topic("fresh", 3)
    assert [(i.name, i.write_queue_nums) for i in infos] == [("fresh", 3)]
    assert client.topics()["fresh"] == {"node-0": 3}
    route = client.route("fresh", refresh=True)
    assert [(n.name, n.address, n.ready, n.queue_ids) for n in route.nodes] == [("node-0", server.address, True, (0, 1, 2))]
    with pytest.raises(StoreError) as e:
        client.send_batch("fresh", [OutMessage(b"x")], queue=QueueRef("node-0", server.address, 3))
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "out of range" in e.value.details


def test_subscribe_follows_a_queue(client):
    q = _q(client, "sub")
    got = []
    done = threading.Event()

    def follow():
        for res in client.subscribe("sub", q, 0):
            got.extend(m.body for m in res.messages)
            if len(got) >= 3:
                done.set()
                return

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    for i in range(3):
        client.send_batch("sub", [OutMessage(b"s%d" % i)], queue=q)
    assert done.wait(10)
    assert got == [b"s0", b"s1", b"s2"]


def test_a_long_poll_is_answered_by_the_send_not_by_its_time(server, client):
    """A pull parked for 60 s is answered, with the message, once one is sent: an answer within
    the 10 s the test waits can only come from the arrival (make bench measures how soon)."""
    q = _q(client, "lp")
    client.send_batch("lp", [OutMessage(b"first")], queue=q)
    fut = client.pull_future("lp", q, 1, timeout_ms=60_000)
    wait_until(lambda: metric(server, "msgstore_long_polls_waiting") >= 1, timeout=10, what="the pull parked on the server")
    assert not fut.done()
    client.send_batch("lp", [OutMessage(b"second")], queue=q)
    resp = fut.result(timeout=10)
    assert resp.record_count == 1 and [bytes(m.body) for m in client.pull("lp", q, 1).messages] == [b"second"]
    wait_until(lambda: metric(server, "msgstore_long_polls_waiting") == 0, timeout=10, what="nothing parked any more")


def test_long_poll_times_out_empty(client):
    q = _q(client, "lp2")
    t0 = time.monotonic()
    res = client.pull("lp2", q, 0, timeout_ms=300)
    assert res.status == "NO_MATCHED_LOGIC_QUEUE" and 0.25 < time.monotonic() - t0 < 5


def test_producer_batches_single_sends(client):
    with Producer(client, linger_ms=5) as p:
        futures = [p.send("prod", b"n%d" % i, key=None if i % 2 else "same-key") for i in range(2000)]
        results = [f.result(timeout=30) for f in futures]
    assert all(r.ok for r in results)
    keyed = {(r.node, r.queue_id) for i, r in enumerate(results) if i % 2 == 0}
    assert len(keyed) == 1  # one key keeps one queue
    wait_until(lambda: sum(hi for (lo, hi) in client.queue_offsets("prod").values()) == 2000, what="all dispatched")


def test_consumer_reads_everything_and_resumes_from_commits(client):
    for i in range(50):
        client.send("cons", b"c%d" % i)
    c1 = Consumer(client, "readers", "cons")
    seen = []
    while len(seen) < 30:
        seen.extend(r.body for r in c1.poll(timeout=2))
    c1.commit()
    c1.close()  # leaves the group: its queues go to the next member at once
    c2 = Consumer(client, "readers", "cons")
    rest = []
    for _ in range(20):
        rest.extend(r.body for r in c2.poll(timeout=0.5))
        if len(seen) + len(rest) >= 50:
            break
    assert sorted(seen + rest) == sorted(b"c%d" % i for i in range(50))
    assert c2.lag() == 0


def test_async_client(server):
    import asyncio

    async def run():
        async with AsyncClient(server.address) as c:
            r = await c.send("aio", b"x", key="k")
            assert r.ok
            route = await c.route("aio")
            q = next(q for q in route.queues if q.queue_id == r.queue_id)
            res = await c.pull("aio", q, 0, timeout_ms=5000)
            assert [m.body for m in res.messages] == [b"x"]
            await c.commit("ga", "aio", q, 1)
            assert await c.committed("ga", "aio", q) == 1
            offsets = await c.queue_offsets("aio")
            assert offsets[q] == (0, 1)

    asyncio.run(run())


# ------------------------------------------------------------------------------------------- admin


def test_admin_status_config_and_maintenance(server, client):
    admin = client.admin()
    st = admin.status()
    assert st["state"] == "running" and st["recovery"]["mode"] == "normal" and st["node"] == "node-0"
    assert st["config"]["mappedFileSizeCommitLog"] == "262144" and st["disk_full"] is False
    dry = admin.update_config({"fileReservedTime": 1, "flushDiskType": "SYNC_FLUSH"}, dry_run=True)
    assert dict(dry.applied) == {"fileReservedTime": "1"} and dict(dry.restart_required) == {"flushDiskType": "SYNC_FLUSH"}
    assert admin.config()["fileReservedTime"] == "72"
    res = admin.update_config({"fileReservedTime": 1})
    assert res.generation == 1 and admin.config()["fileReservedTime"] == "1"
    with pytest.raises(StoreError) as e:
        admin.update_config({"diskSpaceWarningLevelRatio": 20})
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "diskSpaceWarningLevelRatio" in e.value.details
    with pytest.raises(StoreError) as e:
        admin.update_config({"bogus": 1})
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "bogus" in e.value.details
    md = admin.manual_delete()
    assert md.deleted_segments == 0 and md.runs_armed == 19
    assert admin.clean_expired_consume_queues() == []
    assert admin.clean_unused_topics() == []


def test_health_and_reflection(server):
    with grpc.insecure_channel(server.address) as ch:
        h = health_pb2_grpc.HealthStub(ch)
        for svc in ("", "msgstore.v1.MessageStore", "msgstore.v1.Admin"):
            assert h.Check(health_pb2.HealthCheckRequest(service=svc)).status == health_pb2.HealthCheckResponse.SERVING
        r = reflection_pb2_grpc.ServerReflectionStub(ch)
        resp = next(r.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
        names = {s.name for s in resp.list_services_response.service}
        assert {"msgstore.v1.MessageStore", "msgstore.v1.Admin", "grpc.health.v1.Health"} <= names


def test_metrics_endpoint(server, client):
    import urllib.request

    r = client.send("met", b"x")
    client.pull("met", next(q for q in client.route("met").queues if q.queue_id == r.queue_id), 0, timeout_ms=5000)
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5).read().decode()
    assert 'msgstore_put_messages_total{status="PUT_OK"} 1.0' in text
    assert "msgstore_disk_usage_ratio" in text and "msgstore_recovery_duration_seconds" in text
    assert "msgstore_queue_max_offset{queue=" in text and "msgstore_dispatch_behind_bytes" in text
    assert "msgstore_put_latency_seconds_bucket" in text


def test_admin_stub_directly(server):
    with grpc.insecure_channel(server.address) as ch:
        st = admin_pb2_grpc.AdminStub(ch).GetStatus(apb.GetStatusRequest())
        assert st.state == "running" and st.recovery.state == "done"
