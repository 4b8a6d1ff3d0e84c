"""Issue 31: a topic that does not exist, where a send would not create it
(autoCreateTopicEnable=false), is refused by name on every read and route, on both protocols,
as RocketMQ's proxy answers (TOPIC_NOT_FOUND), instead of answering like a quiet topic with
eight empty queues."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from rocketmq import FilterExpression, SimpleConsumer
from rocketmq.grpc_protocol import MessagingServiceStub, definition_pb2, service_pb2

from msgstore.client import Client
from msgstore.v1 import msgstore_pb2 as pb
from msgstore.v1 import msgstore_pb2_grpc as pbg
from tests.api import test_cli as cli
from tests.rocketmq.conftest import config, startup

d, s = definition_pb2, service_pb2
STRICT = ["autoCreateTopicEnable=false"]


@pytest.fixture
def strict(servers):
    return servers("strict", settings=STRICT)


def not_found(call) -> str:
    with pytest.raises(grpc.RpcError) as e:
        call()
    assert e.value.code() == grpc.StatusCode.NOT_FOUND, e.value
    return e.value.details()


def test_msgstore_v1_reads_and_routes_of_a_missing_topic_are_not_found(strict):
    with grpc.insecure_channel(strict.address) as channel:
        stub = pbg.MessageStoreStub(channel)
        for call in (
            lambda: stub.GetRoute(pb.GetRouteRequest(topic="missing"), timeout=10),
            lambda: stub.Pull(pb.PullRequest(topic="missing", queue_id=0, offset=0), timeout=10),
            lambda: list(stub.Subscribe(pb.SubscribeRequest(topic="missing", queue_id=0), timeout=10)),
            lambda: stub.Receive(pb.ReceiveRequest(group="g", topic="missing", wait_ms=0), timeout=10),
        ):
            assert "no topic missing" in not_found(call) and "autoCreateTopicEnable" in not_found(call)
        # once created, the same calls answer; a group's retry topic is the store's own and never refused
        Client(strict.address, timeout=10).create_topic("missing", 2)
        assert list(stub.GetRoute(pb.GetRouteRequest(topic="missing"), timeout=10).nodes[0].queue_ids) == [0, 1]
        pulled = stub.Pull(pb.PullRequest(topic="missing", queue_id=1, offset=0), timeout=10)
        assert pulled.status in (pb.NO_MATCHED_LOGIC_QUEUE, pb.OFFSET_OVERFLOW_ONE, pb.OFFSET_FOUND_NULL)
        assert not stub.Receive(pb.ReceiveRequest(group="g", topic="missing", invisible_ms=30_000, wait_ms=0), timeout=10).messages
        stub.Pull(pb.PullRequest(topic="%RETRY%g_missing", queue_id=0, offset=0), timeout=10)


def test_with_topics_created_on_first_send_a_route_still_lists_the_queues_a_send_would_make(server):
    with grpc.insecure_channel(server.address) as channel:
        route = pbg.MessageStoreStub(channel).GetRoute(pb.GetRouteRequest(topic="not-yet"), timeout=10)
    assert len(route.nodes[0].queue_ids) == 8


def test_the_cli_names_the_missing_topic(strict):
    out = cli.run("route", "missing", "--server", strict.address, check=False)
    err = out.stderr.decode()
    assert out.returncode != 0 and "no topic missing" in err and "Traceback" not in err, err


def test_rocketmq_v2_receive_pull_and_assignment_of_a_missing_topic_are_topic_not_found(strict):
    res = d.Resource
    with grpc.insecure_channel(strict.address) as channel:
        stub = MessagingServiceStub(channel)
        queue = d.MessageQueue(topic=res(name="missing"))
        receive = s.ReceiveMessageRequest(group=res(name="g"), message_queue=queue, batch_size=8, invisible_duration=Duration(seconds=30))
        answers = list(stub.ReceiveMessage(receive, timeout=10))
        assert [a.status.code for a in answers] == [d.TOPIC_NOT_FOUND] and "no topic missing" in answers[0].status.message
        pull = s.PullMessageRequest(group=res(name="g"), message_queue=d.MessageQueue(topic=res(name="missing"), id=0), batch_size=1)
        assert [a.status.code for a in stub.PullMessage(pull, timeout=10)] == [d.TOPIC_NOT_FOUND]
        assignment = stub.QueryAssignment(s.QueryAssignmentRequest(topic=res(name="missing"), group=res(name="g")), timeout=10)
        assert assignment.status.code == d.TOPIC_NOT_FOUND


def test_the_official_simple_consumer_of_a_missing_topic_is_told(strict, caplog):
    consumer = SimpleConsumer(config(strict.address), "g", {"missing": FilterExpression()}, 1)
    try:
        startup(consumer)
        with pytest.raises(Exception, match="failed to fetch topic:missing route"):
            consumer.receive(8, 30)
    finally:
        consumer.shutdown()
    # what the client logs is the server's status: TOPIC_NOT_FOUND (40402) with its reason
    assert "40402, topic.name: no topic missing" in caplog.text
