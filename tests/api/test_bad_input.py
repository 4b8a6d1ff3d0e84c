"""Bad input is INVALID_ARGUMENT naming the field, and the server stays healthy with its data."""

import grpc
import pytest
from grpc_health.v1 import health_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msgstore.client import OutMessage
from msgstore.v1 import msgstore_pb2 as pb
from msgstore.v1 import msgstore_pb2_grpc as pbg
from tests.support.servers import wait_until


@pytest.fixture
def stub(server, client):
    # something that must survive every bad request below
    q = next(q for q in client.route("keep").queues if q.queue_id == 0)
    client.send_batch("keep", [OutMessage(b"precious", key="k")], queue=q)
    client.pull("keep", q, 0, timeout_ms=5000)  # dispatched before the tests look
    return pbg.MessageStoreStub(client.channel(server.address))


def _code(call, request):
    with pytest.raises(grpc.RpcError) as e:
        call(request, timeout=10)
    return e.value.code(), e.value.details()


def _intact(server, stub):
    assert server.health() == health_pb2.HealthCheckResponse.SERVING
    res = stub.Pull(pb.PullRequest(topic="keep", queue_id=0, offset=0, timeout_ms=5000), timeout=10)
    assert [m.body for m in res.messages] == [b"precious"]


BAD_TOPICS = ["", "a/b", "..", "../../etc", "x" * 128, "with space", "ünicode", "a\x00b"]


@pytest.mark.parametrize("topic", BAD_TOPICS)
def test_bad_topics_are_refused_everywhere(server, stub, topic):
    code, details = _code(stub.Send, pb.SendRequest(entries=[pb.SendEntry(topic=topic, body=b"x")]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "entries[0].topic" in details
    for call, req in (
        (stub.Pull, pb.PullRequest(topic=topic)),
        (stub.QueryByKey, pb.QueryByKeyRequest(topic=topic, key="k")),
        (stub.CreateTopic, pb.CreateTopicRequest(topic=topic)),
        (stub.GetQueueOffsets, pb.GetQueueOffsetsRequest(topic=topic)),
    ):
        code, details = _code(call, req)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("topic")
    _intact(server, stub)
    import os

    assert not os.path.exists(os.path.join(server.data_dir, "..", "etc"))


@pytest.mark.parametrize(
    "entry,field",
    [
        (dict(body=b"x" * (4 * 1024 * 1024 + 1)), "entries[0].body"),
        (dict(queue_id=-1), "entries[0].queue_id"),
        (dict(queue_id=8), "entries[0].queue_id"),
        (dict(keys=[""]), "entries[0].keys[0]"),
        (dict(keys=["a b"]), "entries[0].keys[0]"),
        (dict(tags="x\x01y"), "entries[0].tags"),
        (dict(tags="a||b"), "entries[0].tags"),  # no filter could match it (v2 refuses it too)
        (dict(properties={"": "v"}), "entries[0].properties"),
        (dict(properties={"p": "v\x02"}), "entries[0].properties['p']"),
        (dict(properties={"TAGS": "x"}), "entries[0].properties['TAGS']"),
        (dict(properties={"p": "v" * 33000}), "entries[0].properties"),
        (dict(born_timestamp=-5), "entries[0].born_timestamp"),
    ],
)
def test_bad_entries_name_the_field(server, stub, entry, field):
    req = pb.SendRequest(entries=[pb.SendEntry(topic="ok", body=b"fine"), pb.SendEntry(topic="ok", **{"body": b"b", **entry})])
    code, details = _code(stub.Send, req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith(field.replace("[0]", "[1]", 1)), details
    assert stub.GetQueueOffsets(pb.GetQueueOffsetsRequest(topic="ok", queue_id=0)).queues[0].max_offset == 0  # nothing stored
    _intact(server, stub)


def test_batch_length_limits(server, stub):
    code, details = _code(stub.Send, pb.SendRequest())
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("entries")
    code, details = _code(stub.Send, pb.SendRequest(entries=[pb.SendEntry(topic="ok", body=b"")] * 10_001))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "10000" in details
    big = pb.SendRequest(entries=[pb.SendEntry(topic="ok", body=b"x" * (4 * 1024 * 1024))] * 17)  # 68 MiB
    code, _ = _code(stub.Send, big)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED  # over the 64 MiB request limit
    _intact(server, stub)


@pytest.mark.parametrize(
    "req,field",
    [
        (pb.PullRequest(topic="keep", offset=-1), "offset"),
        (pb.PullRequest(topic="keep", queue_id=-3), "queue_id"),
        (pb.PullRequest(topic="keep", max_messages=5000), "max_messages"),
        (pb.PullRequest(topic="keep", max_bytes=-1), "max_bytes"),
        (pb.PullRequest(topic="keep", timeout_ms=600_000), "timeout_ms"),
        (pb.PullRequest(topic="keep", group="bad group"), "group"),
    ],
)
def test_bad_pulls(server, stub, req, field):
    code, details = _code(stub.Pull, req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(field)
    _intact(server, stub)


def test_huge_offsets_are_answered_not_failed(server, stub):
    res = stub.Pull(pb.PullRequest(topic="keep", queue_id=0, offset=2**62))
    assert pb.PullStatus.Name(res.status) == "OFFSET_OVERFLOW_BADLY" and res.next_offset == 0  # min 0: back to the start
    with pytest.raises(grpc.RpcError) as e:
        stub.GetMessage(pb.GetMessageRequest(commitlog_offset=2**62))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    code, details = _code(stub.GetMessage, pb.GetMessageRequest(msg_id="not-hex"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("msg_id")
    code, details = _code(stub.CommitOffset, pb.CommitOffsetRequest(group="g", topic="keep", offset=-1))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("offset")
    _intact(server, stub)


def _raw_call(channel, method: str, payload: bytes):
    call = channel.unary_unary(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as e:
        call(payload, timeout=10)
    return e.value.code(), e.value.details()


def test_invalid_utf8_names_the_field(server, client, stub):
    entry = pb.SendEntry(topic="ok", body=b"x", keys=["AAAA"]).SerializeToString().replace(b"AAAA", b"\xff\xfe\xfd\xfc")
    payload = pb.SendRequest(entries=[pb.SendEntry(topic="ok", body=b"y")]).SerializeToString()
    payload += b"\x0a" + bytes([len(entry)]) + entry  # a second entry, its key not UTF-8
    code, details = _raw_call(client.channel(server.address), "/msgstore.v1.MessageStore/Send", payload)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details == "entries[1].keys[0]: not valid UTF-8"
    bad_topic = pb.PullRequest(topic="QQ").SerializeToString().replace(b"QQ", b"\xc3\x28")
    code, details = _raw_call(client.channel(server.address), "/msgstore.v1.MessageStore/Pull", bad_topic)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details == "topic: not valid UTF-8"
    _intact(server, stub)


def test_a_queue_id_where_a_route_s_queue_is_expected_names_the_argument(server, client):
    """``queue=3`` (a queue id alone names no node: ids repeat on every node) failed inside
    the client as an AttributeError; both clients now refuse it as INVALID_ARGUMENT naming
    the argument, before anything is sent."""
    import asyncio

    from msgstore.client import StoreError
    from msgstore.client.aio import AsyncClient

    client.create_topic("queues", 2)
    real = client.route("queues").queues[1]
    calls = {
        "queue": lambda: client.send_batch("queues", [OutMessage(b"x")], queue=3),
        "prefer": lambda: client.send_batch("queues", [OutMessage(b"x")], prefer=(real.node, 1)),
        "pull": lambda: client.pull("queues", 1, 0),
        "commit": lambda: client.commit("g", "queues", "q1", 0),
    }
    for name, call in calls.items():
        with pytest.raises(StoreError) as e:
            call()
        field = "prefer" if name == "prefer" else "queue"
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and e.value.details.startswith(f"{field}: must be one of"), name

    async def aio() -> list[str]:
        async with AsyncClient(server.address, timeout=10) as c:
            out = []
            for call in (lambda: c.send_batch("queues", [OutMessage(b"x")], queue=1), lambda: c.pull("queues", 1, 0)):
                with pytest.raises(StoreError) as e:
                    await call()
                out.append(f"{e.value.code.name} {e.value.details.partition(':')[0]}")
            return out

    assert asyncio.run(aio()) == ["INVALID_ARGUMENT queue", "INVALID_ARGUMENT queue"]
    assert client.send_batch("queues", [OutMessage(b"x")], queue=real).all_ok  # a route's queue still goes
    # an ack means stored, not yet dispatched (the dispatcher follows the log, as RocketMQ's reput)
    wait_until(lambda: client.queue_offsets("queues")[real][1] == 1, timeout=10, what="the send dispatched")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300))
def test_random_bytes_never_hurt_the_server(server, client, stub, data):
    for method in ("Send", "Pull", "QueryByKey", "GetRoute"):
        call = client.channel(server.address).unary_unary(
            f"/msgstore.v1.MessageStore/{method}", request_serializer=lambda b: b, response_deserializer=lambda b: b
        )
        try:
            call(data, timeout=10)
        except grpc.RpcError as e:
            assert e.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND), (method, e.code(), e.details())
    _intact(server, stub)
