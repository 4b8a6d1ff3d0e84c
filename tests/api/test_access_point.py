"""Issue 31: clients reach the store through one address. A plain TCP forwarder stands for a
Service or ``kubectl port-forward``: the nodes advertise addresses the client cannot reach (pod
IPs), and with ``serve --access-point`` routes name the address the client used, and whichever
node that address leads to forwards each call to the node that serves it."""

from __future__ import annotations

import asyncio
import collections

import grpc
import pytest
from rocketmq import Producer

from msgstore.client import AsyncClient, Client, Consumer, OutMessage, QueueRef, StoreError
from msgstore.client.client import decode_records
from msgstore.v1 import msgstore_pb2 as pb
from tests.api import test_cli as cli
from tests.rocketmq.conftest import config, started
from tests.rocketmq.test_official_client import message, receive_all, simple
from tests.support.servers import ServerProcess, free_port, wait_until
from tests.support.tcp_forwarder import TcpForwarder

UNREACHABLE = "--advertise"  # each node advertises a port nothing listens on: as a pod IP seen from a laptop


@pytest.fixture
def forwarders():
    made: list[TcpForwarder] = []

    def make(backend: str) -> TcpForwarder:
        made.append(TcpForwarder(backend))
        return made[-1]

    yield make
    for f in made:
        f.close()


def behind(servers, name: str, *args: str) -> ServerProcess:
    return servers(name, args=[UNREACHABLE, f"127.0.0.1:{free_port()}", *args])


def test_the_chart_notes_recipe_fails_without_an_access_point_and_works_with_one(servers, forwarders):
    direct = forwarders(behind(servers, "direct").address)
    out = cli.run("send", "demo", "hello", "--server", direct.address, check=False)
    assert out.returncode != 0 and "UNAVAILABLE" in out.stderr.decode()  # routes name the node's own (unreachable) address

    fwd = forwarders(behind(servers, "ap", "--access-point").address)
    s = ["--server", fwd.address]
    assert "PUT_OK" in cli.run("send", "demo", "hello", *s).stdout.decode()
    assert "hello" in cli.run("pull", "demo", *s).stdout.decode()
    with Client(fwd.address, timeout=10) as c:
        results = c.send_batch("demo", [OutMessage(b"m%d" % i) for i in range(20)])
        assert results.all_ok, results.statuses()
        consumer = Consumer(c, "readers", "demo")
        got = []
        while len(got) < 21 and (batch := consumer.poll(timeout=2)):
            got += [m.body for m in batch]
        assert sorted(got) == sorted([b"hello", *(b"m%d" % i for i in range(20))])

    async def through_asyncio() -> tuple[bool, int]:
        async with AsyncClient(fwd.address, timeout=10) as ac:
            results = await ac.send_batch("demo", [OutMessage(b"a%d" % i) for i in range(5)])
            return results.all_ok, len(results)

    assert asyncio.run(through_asyncio()) == (True, 5)


def test_the_official_client_sends_and_receives_through_one_address(servers, forwarders):
    fwd = forwarders(behind(servers, "ap", "--access-point").address)
    cfg = config(fwd.address)
    with started(Producer(cfg, ("orders",))) as producer:
        ids = {producer.send(message("orders", b"o%d" % i)).message_id for i in range(10)}
    assert len(ids) == 10
    with started(simple(cfg, "billing", "orders", 2)) as consumer:
        got = receive_all(consumer, 10)
        for m in got:
            consumer.ack(m)
    assert sorted(m.body for m in got) == sorted(b"o%d" % i for i in range(10))
    assert fwd.connections >= 1


def with_access_point(cluster) -> list[ServerProcess]:
    """The cluster fixture's three nodes (each its own replica group), started again with --access-point."""
    for n in cluster:
        n.kill()
    for n in cluster:
        n.extra += ["--access-point"]
        n.start(wait=False)
    for n in cluster:
        n.wait_serving()
    return cluster


def test_a_node_that_owns_none_of_the_queues_serves_them_all(cluster, forwarders, servers):
    """Three nodes, each its own replica group with its own queues of the topic; the address
    the clients use leads to store-2 only: what belongs to store-0 and store-1 is forwarded."""
    with_access_point(cluster)
    fwd = forwarders(cluster[2].address)
    with Client(fwd.address, timeout=10) as c:
        results = [c.send("spread", b"s%d" % i) for i in range(48)]  # round robin over every node's queues
        assert {r.status for r in results} == {"PUT_OK"}
        by_node = collections.Counter(r.node for r in results)
        assert set(by_node) == {"store-0", "store-1", "store-2"}
        assert all(a.startswith(f"{fwd.address}#") for a in c._channels if a != fwd.address)  # no node dialled directly
        # the messages are where the results say: read at each node's own address
        with Client(cluster[0].address, timeout=10) as direct:
            held = direct.pull("spread", QueueRef("store-0", cluster[0].address, 0), 0, max_messages=100).messages
        assert held and all(m.body.startswith(b"s") for m in held)
        # and everything reads back through the one address, with offsets committed on each owner
        consumer = Consumer(c, "all", "spread")
        got = []
        while len(got) < 48 and (batch := consumer.poll(timeout=2)):
            got += [m.body for m in batch]
            consumer.commit()
        assert sorted(got) == sorted(b"s%d" % i for i in range(48))
        # a subscription (a server stream) to one of store-0's queues streams through store-2
        q0 = next(q for q in c.route("spread").queues if q.node == "store-0" and q.queue_id == held[0].queue_id)
        first = next(iter(c.subscribe("spread", q0, offset=0)))
        assert [m.body for m in first.messages][:1] == [held[0].body]
    with Client(cluster[0].address, timeout=10) as direct:
        committed = sum(direct.committed("all", "spread", QueueRef("store-0", cluster[0].address, q)) for q in range(8))
    assert committed == by_node["store-0"]


def test_a_call_naming_a_group_the_store_does_not_have_is_refused(servers, forwarders):
    fwd = forwarders(behind(servers, "ap", "--access-point").address)
    with Client(f"{fwd.address}", timeout=10) as c:
        c.route("demo")
        with pytest.raises(StoreError) as e:
            c.pull("demo", QueueRef("nobody", f"{fwd.address}#nobody", 0), 0)
    assert "no replica group 'nobody'" in str(e.value)


def test_a_fifo_message_group_keeps_one_queue_whichever_node_the_address_leads_to(cluster, forwarders):
    """As RocketMQ's proxy: through an access point the queue of a message group is chosen over
    every replica group's queues, so producers whose connections reach different nodes (a
    Service balancing connections) still put one message group in one queue, in order."""
    with_access_point(cluster)
    fwd = forwarders(cluster[0].address)
    bodies = []
    for turn, node in enumerate(cluster):
        fwd.point_at(node.address)  # new connections reach another node
        with started(Producer(config(fwd.address), ("fifo",))) as producer:
            for i in range(5):
                m = message("fifo", b"k-%d-%d" % (turn, i))
                m.message_group = "customer-7"
                producer.send(m)
                bodies.append(m.body)
    with Client(cluster[0].address, timeout=10) as c:
        queues = c.route("fifo", refresh=True).queues

        def holding() -> list:
            found = [(q.node, q.queue_id, [m.body for m in c.pull("fifo", q, 0, max_messages=100).messages]) for q in queues]
            return [h for h in found if h[2]]

        def all_in() -> list | None:  # (the last send's ack means stored: its dispatch may come a moment later)
            held = holding()
            return held if sum(len(h[2]) for h in held) >= len(bodies) else None

        held = wait_until(all_in, timeout=10, what=lambda: f"every send read back: {holding()}")
    assert len(held) == 1 and held[0][2] == bodies, held


def test_a_route_listing_several_access_points_skips_one_that_does_not_answer(tmp_path, forwarders):
    """``--access-point A,B``: clients dial both as one gRPC target, and gRPC moves past a dead one."""
    dead = f"127.0.0.1:{free_port()}"
    node = ServerProcess(str(tmp_path / "two-points"), name="two-points")
    fwd = forwarders(node.address)  # (the node's port is chosen before it starts)
    node.extra = [UNREACHABLE, f"127.0.0.1:{free_port()}", "--access-point", f"{dead},{fwd.address}"]
    node.start()
    try:
        with Client(fwd.address, timeout=10) as c:
            assert c.send("demo", b"through the second").status == "PUT_OK"
            assert c.route("demo").nodes[0].address == f"ipv4:{dead},{fwd.address}#two-points"
    finally:
        node.kill()


def test_rocketmq_v2_calls_on_a_queue_go_to_the_group_its_broker_names(cluster, forwarders):
    """Through an access point every broker of a route has the same endpoints, so a RocketMQ 5
    client's call on a queue may reach any node: the queue's broker (its replica group) decides
    where it is served. The official SimpleConsumer, connected to store-2 only, receives what
    every group holds; PullMessage, UpdateOffset, GetOffset and QueryOffset on store-0's queue
    answer with store-0's queue."""
    import grpc
    from rocketmq.grpc_protocol import MessagingServiceStub, definition_pb2, service_pb2

    d, s = definition_pb2, service_pb2
    with_access_point(cluster)
    fwd = forwarders(cluster[2].address)
    with Client(fwd.address, timeout=10) as c:
        assert {c.send("spread", b"v%d" % i).node for i in range(24)} == {"store-0", "store-1", "store-2"}
    with started(simple(config(fwd.address), "v2readers", "spread", 1)) as consumer:
        got = receive_all(consumer, 24)
        for m in got:
            consumer.ack(m)
    assert sorted(m.body for m in got) == sorted(b"v%d" % i for i in range(24))

    res = d.Resource
    with Client(cluster[0].address, timeout=10) as direct:
        q, (lo, hi) = next((q, span) for q, span in direct.queue_offsets("spread").items() if q.node == "store-0" and span[1] > 0)
    with grpc.insecure_channel(fwd.address) as channel:
        stub = MessagingServiceStub(channel)
        mq = d.MessageQueue(topic=res(name="spread"), id=q.queue_id, broker=d.Broker(name="store-0"))
        end = stub.QueryOffset(s.QueryOffsetRequest(message_queue=mq, query_offset_policy=d.END), timeout=10)
        assert (end.status.code, end.offset) == (d.OK, hi)
        pulled = list(stub.PullMessage(s.PullMessageRequest(group=res(name="p"), message_queue=mq, offset=lo, batch_size=32), timeout=10))
        bodies = [a.message.body for a in pulled if a.HasField("message")]
        assert len(bodies) == hi - lo and all(b.startswith(b"v") for b in bodies)
        update = s.UpdateOffsetRequest(group=res(name="p"), message_queue=mq, offset=hi)
        assert stub.UpdateOffset(update, timeout=10).status.code == d.OK
        assert stub.GetOffset(s.GetOffsetRequest(group=res(name="p"), message_queue=mq), timeout=10).offset == hi
        # and a queue id store-2 has too, named for store-2, is store-2's own
        mine = d.MessageQueue(topic=res(name="spread"), id=q.queue_id, broker=d.Broker(name="store-2"))
        assert stub.GetOffset(s.GetOffsetRequest(group=res(name="p"), message_queue=mine), timeout=10).status.code == d.OFFSET_NOT_FOUND
    with Client(cluster[0].address, timeout=10) as direct:
        assert direct.committed("p", "spread", QueueRef("store-0", cluster[0].address, q.queue_id)) == hi


def test_a_topic_on_some_groups_only_is_found_through_any_node(cluster, forwarders):
    """With autoCreateTopicEnable off, a topic created on store-0 alone (a team's own broker) is
    found, sent to and received through an address that leads to store-2, which does not have
    it, on both protocols; the groups without it are not asked for it."""
    import grpc
    from rocketmq.grpc_protocol import MessagingServiceStub, definition_pb2, service_pb2

    d, s = definition_pb2, service_pb2
    for n in cluster:
        n.settings.append("autoCreateTopicEnable=false")
    with_access_point(cluster)
    with Client(cluster[0].address, timeout=10) as direct:
        direct._call(cluster[0].address, "CreateTopic", pb.CreateTopicRequest(topic="team", queues=2))
    fwd = forwarders(cluster[2].address)
    with Client(fwd.address, timeout=10) as c:
        assert {q.node for q in c.route("team").queues} == {"store-0"}
        assert {c.send("team", b"t%d" % i).node for i in range(6)} == {"store-0"}
        got: list = []  # (an ack means stored: its dispatch may come a moment later)
        wait_until(lambda: got.extend(c.receive("readers", "team", 32)) or len(got) >= 6, timeout=10, what="six deliveries")
        assert sorted(r.body for r in got) == sorted(b"t%d" % i for i in range(6))
    with grpc.insecure_channel(fwd.address) as channel:
        stub = MessagingServiceStub(channel)
        route = stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="team")), timeout=10)
        assert route.status.code == d.OK and {q.broker.name for q in route.message_queues} == {"store-0"}
        assignment = stub.QueryAssignment(s.QueryAssignmentRequest(topic=d.Resource(name="team"), group=d.Resource(name="v2")), timeout=10)
        assert assignment.status.code == d.OK and {a.message_queue.broker.name for a in assignment.assignments} == {"store-0"}
    with started(Producer(config(fwd.address), ("team",))) as producer:
        producer.send(message("team", b"official"))
    with started(simple(config(fwd.address), "v2readers", "team", 1)) as consumer:
        got = receive_all(consumer, 7)
    assert b"official" in {m.body for m in got}


def test_a_message_is_found_by_its_id_through_any_node(cluster, forwarders):
    """An offset message id names the member that stored it (an address the client may not
    reach): through an access point the lookup goes to that member's group."""
    with_access_point(cluster)
    fwd = forwarders(cluster[2].address)
    with Client(fwd.address, timeout=10) as c:
        sent = {}
        while not {"store-0", "store-1"} <= set(sent):
            r = c.send("ids", b"by id from %d" % len(sent))
            sent.setdefault(r.node, r)
        for node in ("store-0", "store-1"):
            got = c.get_message(sent[node].message_id)
            assert got.msg_id == sent[node].message_id and got.body.startswith(b"by id")


def test_a_pull_stream_through_an_access_point_is_served_by_its_group(cluster, forwarders):
    """A PullQueuesStream naming another replica group (x-msgstore-node) is passed on to that
    group's master request by request; a request that cannot be decoded ends it INVALID_ARGUMENT,
    as it would where it is served (it was passed on as CANCELLED, silently)."""
    with_access_point(cluster)
    fwd = forwarders(cluster[2].address)
    with Client(fwd.address, timeout=10) as c:
        c.create_topic("apstream", 2)
        far = next(q for q in c.route("apstream").queues if q.node == "store-0")
        c.send_batch("apstream", [OutMessage(b"far away")], queue=far)
        with grpc.insecure_channel(fwd.address) as channel:
            call = channel.stream_stream("/msgstore.v1.MessageStore/PullQueuesStream", request_serializer=None, response_deserializer=None)
            pull = pb.PullQueuesRequest(pulls=[pb.PullRequest(topic="apstream", queue_id=far.queue_id, raw=True)], timeout_ms=5000)
            answers = call(iter([pull.SerializeToString(), b"\xff\xff\xff"]), metadata=[("x-msgstore-node", "store-0")], timeout=30)
            first = pb.PullQueuesResponse.FromString(next(answers))
            assert [m.body for m in decode_records(first.results[0].records)] == [b"far away"]
            with pytest.raises(grpc.RpcError) as e:
                next(answers)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value


def test_a_fifo_message_to_a_topic_of_another_type_is_refused_through_an_access_point(cluster):
    """The message's type is checked against its topic's wherever the access point places it
    (a message group's queue is chosen over every group's): it was checked only where the send
    was stored in the node's own group."""
    from rocketmq.grpc_protocol import MessagingServiceStub, definition_pb2, service_pb2

    with_access_point(cluster)
    with Client(cluster[0].address, timeout=10) as c:
        c.create_topic("normal-only", 2, message_type="NORMAL")
    m = definition_pb2.Message(topic=definition_pb2.Resource(name="normal-only"), body=b"x")
    m.system_properties.message_id = "0102FC0000000147B90B193C1300000000"
    m.system_properties.message_type = definition_pb2.FIFO
    m.system_properties.message_group = "customer-7"
    with grpc.insecure_channel(cluster[0].address) as channel:
        resp = MessagingServiceStub(channel).SendMessage(service_pb2.SendMessageRequest(messages=[m]), timeout=10)
    assert resp.status.code == definition_pb2.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, resp.status
