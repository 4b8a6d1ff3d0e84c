"""apache.rocketmq.v2 calls made directly (a raw stub, as any language's client would): bad
requests answered with StatusCode.md's codes and a message naming the field (never INTERNAL,
never a failed call); the offset-based consumer's calls (PullMessage, GetOffset, UpdateOffset,
QueryOffset), which the Python client does not offer; routes, assignments and signatures."""

from __future__ import annotations

import datetime
import gzip
import hashlib
import hmac
import zlib

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import MessagingServiceStub, definition_pb2, service_pb2

from msgstore.client import Client, QueueRef
from msgstore.record.codec import FLAG_COMPRESSED
from msgstore.store import Message, MessageStore
from tests.support.servers import SMALL_STORE, ServerProcess, wait_until

d, s = definition_pb2, service_pb2
ID = "0102FC0000000147B90B193C1300000000"


@pytest.fixture
def stub(server):
    with grpc.insecure_channel(server.address) as channel:
        yield MessagingServiceStub(channel)


def res(name: str) -> d.Resource:
    return d.Resource(name=name)


def msg(topic: str = "t", body: bytes = b"x", **system) -> d.Message:
    m = d.Message(topic=res(topic), body=body)
    m.system_properties.message_id = system.pop("message_id", ID)
    m.system_properties.message_type = system.pop("message_type", d.NORMAL)
    for k, v in system.items():
        if hasattr(v, "CopyFrom"):
            getattr(m.system_properties, k).CopyFrom(v)
        else:
            setattr(m.system_properties, k, v)
    return m


def send(stub, *messages: d.Message) -> s.SendMessageResponse:
    return stub.SendMessage(s.SendMessageRequest(messages=messages), timeout=10)


def stream_status(responses) -> tuple[d.Status, list, int | None]:
    status, messages, next_offset = None, [], None
    for r in responses:
        kind = r.WhichOneof("content")
        if kind == "status":
            status = r.status
        elif kind == "message":
            messages.append(r.message)
        elif kind == "next_offset":
            next_offset = r.next_offset
    return status, messages, next_offset


def datetime_ts(days: int):
    from google.protobuf.timestamp_pb2 import Timestamp

    t = Timestamp()
    t.FromDatetime(datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=days))
    return t


def half_of(data: bytes) -> bytes:
    return data[: len(data) // 2]


BAD_SENDS = [
    (lambda: msg(topic="no spaces allowed"), d.ILLEGAL_TOPIC, "messages[0].topic.name"),
    (lambda: msg(body=b""), d.MESSAGE_BODY_EMPTY, "messages[0].body"),
    (lambda: msg(message_id="not hex!"), d.ILLEGAL_MESSAGE_ID, "messages[0].system_properties.message_id"),
    (lambda: msg(tag="a||b"), d.ILLEGAL_MESSAGE_TAG, "messages[0].system_properties.tag"),
    (lambda: msg(message_type=d.FIFO), d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "messages[0].system_properties"),
    (lambda: msg(message_type=d.TRANSACTION, message_group="g"), d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "messages[0].system_properties"),
    (
        lambda: msg(message_type=d.DELAY, delivery_timestamp=datetime_ts(days=3650)),
        d.ILLEGAL_DELIVERY_TIME,
        "messages[0].system_properties.delivery_timestamp",
    ),
    (lambda: msg(message_type=d.LITE), d.BAD_REQUEST, "messages[0].system_properties.message_type"),
    (lambda: msg(message_type=99), d.BAD_REQUEST, "messages[0].system_properties.message_type"),
    (lambda: msg(body=b"not gzip", body_encoding=d.GZIP), d.MESSAGE_CORRUPTED, "messages[0].body"),
    (lambda: msg(body=gzip.compress(b"x" * (5 << 20)), body_encoding=d.GZIP), d.MESSAGE_BODY_TOO_LARGE, "messages[0].body"),
    (lambda: msg(body=half_of(gzip.compress(bytes(range(256)) * 400)), body_encoding=d.GZIP), d.MESSAGE_CORRUPTED, "messages[0].body"),
    (lambda: msg(body=gzip.compress(b"a") + gzip.compress(b"b"), body_encoding=d.GZIP), d.MESSAGE_CORRUPTED, "messages[0].body"),
]


@pytest.mark.parametrize("make, code, field", BAD_SENDS, ids=[d.Code.Name(c) + f"-{i}" for i, (_m, c, _f) in enumerate(BAD_SENDS)])
def test_a_bad_send_gets_its_documented_code_naming_the_field(stub, make, code, field):
    resp = send(stub, make())
    assert resp.status.code == code, resp.status
    assert resp.status.message.startswith(field), resp.status.message


def test_a_reserved_user_property_is_refused(stub):
    m = msg()
    m.user_properties["UNIQ_KEY"] = "mine"
    resp = send(stub, m)
    assert resp.status.code == d.ILLEGAL_MESSAGE_PROPERTY_KEY and "UNIQ_KEY" in resp.status.message


def test_bad_receives_acks_and_transactions_get_their_codes(stub):
    assert send(stub, msg()).status.code == d.OK
    base = dict(group=res("g"), message_queue=d.MessageQueue(topic=res("t")), batch_size=1)

    def receive(**kw):
        return stream_status(stub.ReceiveMessage(s.ReceiveMessageRequest(**{**base, **kw}), timeout=10))[0]

    st = receive()  # neither an invisible duration nor auto_renew
    assert st.code == d.ILLEGAL_INVISIBLE_TIME and st.message.startswith("invisible_duration")
    st = receive(invisible_duration=Duration(seconds=1), filter_expression=d.FilterExpression(type=d.SQL, expression="a > 'x'"))
    assert st.code == d.ILLEGAL_FILTER_EXPRESSION and st.message.startswith("filter_expression.expression"), st
    assert "column 5" in st.message, st
    st = receive(invisible_duration=Duration(seconds=1), long_polling_timeout=Duration(seconds=3600))
    assert st.code == d.ILLEGAL_POLLING_TIME and st.message.startswith("long_polling_timeout")
    st = receive(group=res("bad group"), invisible_duration=Duration(seconds=1))
    assert st.code == d.ILLEGAL_CONSUMER_GROUP and st.message.startswith("group.name")
    ack = stub.AckMessage(
        s.AckMessageRequest(group=res("g"), topic=res("t"), entries=[s.AckMessageEntry(receipt_handle="garbage")]), timeout=10
    )
    assert ack.status.code == d.INVALID_RECEIPT_HANDLE and ack.status.message.startswith("entries[0]")
    end = stub.EndTransaction(s.EndTransactionRequest(topic=res("t"), transaction_id="nope", resolution=d.COMMIT), timeout=10)
    assert end.status.code == d.INVALID_TRANSACTION_ID and end.status.message.startswith("transaction_id")
    end = stub.EndTransaction(s.EndTransactionRequest(topic=res("t"), transaction_id="nope", resolution=7), timeout=10)
    assert end.status.code == d.BAD_REQUEST and end.status.message.startswith("resolution")
    fwd = stub.ForwardMessageToDeadLetterQueue(
        s.ForwardMessageToDeadLetterQueueRequest(group=res("g"), topic=res("t"), receipt_handle="garbage"), timeout=10
    )
    assert fwd.status.code == d.INVALID_RECEIPT_HANDLE and fwd.status.message.startswith("receipt_handle")
    recall = stub.RecallMessage(s.RecallMessageRequest(topic=res("t"), recall_handle="garbage"), timeout=10)
    assert recall.status.code == d.BAD_REQUEST and recall.status.message.startswith("recall_handle")
    lite = stub.SyncLiteSubscription(s.SyncLiteSubscriptionRequest(topic=res("t"), group=res("g")), timeout=10)
    assert lite.status.code == d.UNSUPPORTED


def test_an_acked_receipt_acked_again_is_ok_and_cannot_be_made_invisible(stub):
    """A second ack is OK, as RocketMQ's (its broker appends acks unchecked): an ack whose
    answer was lost with a master that died is sent again. A change of invisibility of an acked
    receipt is refused: it would bring the message back."""
    assert send(stub, msg()).status.code == d.OK
    req = s.ReceiveMessageRequest(
        group=res("g"), message_queue=d.MessageQueue(topic=res("t")), batch_size=1, invisible_duration=Duration(seconds=30)
    )
    st, got, _ = stream_status(stub.ReceiveMessage(req, timeout=10))
    assert st.code == d.OK and len(got) == 1 and got[0].system_properties.delivery_attempt == 1
    entry = s.AckMessageEntry(message_id=got[0].system_properties.message_id, receipt_handle=got[0].system_properties.receipt_handle)
    ack = s.AckMessageRequest(group=res("g"), topic=res("t"), entries=[entry])
    assert stub.AckMessage(ack, timeout=10).status.code == d.OK
    again = stub.AckMessage(ack, timeout=10)
    assert again.status.code == d.OK and again.entries[0].status.code == d.OK
    change = stub.ChangeInvisibleDuration(
        s.ChangeInvisibleDurationRequest(
            group=res("g"), topic=res("t"), receipt_handle=entry.receipt_handle, invisible_duration=Duration(seconds=1)
        ),
        timeout=10,
    )
    assert change.status.code == d.INVALID_RECEIPT_HANDLE, change.status


def test_a_change_of_invisibility_to_zero_makes_it_visible_now(stub):
    """As RocketMQ's: not after the group's backoff (10 s by default here; the test waits 5 s)."""
    assert send(stub, msg()).status.code == d.OK
    req = s.ReceiveMessageRequest(
        group=res("now"), message_queue=d.MessageQueue(topic=res("t")), batch_size=1, invisible_duration=Duration(seconds=30)
    )
    st, got, _ = stream_status(stub.ReceiveMessage(req, timeout=10))
    assert st.code == d.OK and len(got) == 1
    zero = s.ChangeInvisibleDurationRequest(
        group=res("now"), topic=res("t"), receipt_handle=got[0].system_properties.receipt_handle, invisible_duration=Duration()
    )
    assert stub.ChangeInvisibleDuration(zero, timeout=10).status.code == d.OK
    again: list = []
    wait_until(lambda: again.extend(stream_status(stub.ReceiveMessage(req, timeout=10))[1]) or again, timeout=5, what="it back now")
    assert again[0].system_properties.delivery_attempt == 2


def test_the_offset_based_consumer(stub, server):
    with Client(server.address, timeout=10) as ours:
        ours.create_topic("ledger", 1)
    for i in range(5):
        assert send(stub, msg("ledger", b"e%d" % i, message_id=f"{i + 1:034X}", tag="odd" if i % 2 else "even")).status.code == d.OK
    mq = d.MessageQueue(topic=res("ledger"), id=0)
    end_of = s.QueryOffsetRequest(message_queue=mq, query_offset_policy=d.END)
    wait_until(lambda: stub.QueryOffset(end_of, timeout=10).offset == 5, what="the five messages dispatched")
    begin = stub.QueryOffset(s.QueryOffsetRequest(message_queue=mq, query_offset_policy=d.BEGINNING), timeout=10)
    end = stub.QueryOffset(s.QueryOffsetRequest(message_queue=mq, query_offset_policy=d.END), timeout=10)
    assert (begin.status.code, begin.offset, end.offset) == (d.OK, 0, 5)
    st, got, nxt = stream_status(
        stub.PullMessage(s.PullMessageRequest(group=res("g"), message_queue=mq, offset=1, batch_size=10), timeout=10)
    )
    assert st.code == d.OK and [m.body for m in got] == [b"e1", b"e2", b"e3", b"e4"] and nxt == 5
    assert [m.system_properties.queue_offset for m in got] == [1, 2, 3, 4] and got[0].system_properties.message_id == f"{2:034X}"
    st, got, _ = stream_status(
        stub.PullMessage(
            s.PullMessageRequest(
                group=res("g"),
                message_queue=mq,
                offset=0,
                batch_size=10,
                filter_expression=d.FilterExpression(type=d.TAG, expression="odd"),
            ),
            timeout=10,
        )
    )
    assert [m.body for m in got] == [b"e1", b"e3"]
    st, got, nxt = stream_status(
        stub.PullMessage(s.PullMessageRequest(group=res("g"), message_queue=mq, offset=5, batch_size=10), timeout=10)
    )
    assert st.code == d.MESSAGE_NOT_FOUND and got == [] and nxt == 5
    st, _, nxt = stream_status(
        stub.PullMessage(s.PullMessageRequest(group=res("g"), message_queue=mq, offset=99, batch_size=10), timeout=10)
    )
    assert st.code == d.ILLEGAL_OFFSET and st.message.startswith("offset") and nxt == 0  # (RocketMQ's correction: the start)
    missing = stub.GetOffset(s.GetOffsetRequest(group=res("g"), message_queue=mq), timeout=10)
    assert missing.status.code == d.OFFSET_NOT_FOUND
    assert stub.UpdateOffset(s.UpdateOffsetRequest(group=res("g"), message_queue=mq, offset=3), timeout=10).status.code == d.OK
    assert stub.GetOffset(s.GetOffsetRequest(group=res("g"), message_queue=mq), timeout=10).offset == 3
    with Client(server.address, timeout=10) as ours:  # the same offset, seen through msgstore.v1
        node = ours.route("ledger").nodes[0]
        assert ours.committed("g", "ledger", QueueRef(node.name, node.address, 0)) == 3


def test_route_and_assignment_name_the_node_as_a_broker(stub, server):
    route = stub.QueryRoute(s.QueryRouteRequest(topic=res("orders")), timeout=10)
    assert route.status.code == d.OK and route.message_queues
    brokers = {(q.broker.name, q.broker.id) for q in route.message_queues}
    assert brokers == {(server.name, 0)}
    host, port = server.address.split(":")
    ep = route.message_queues[0].broker.endpoints
    assert ep.scheme == d.IPv4 and [(a.host, a.port) for a in ep.addresses] == [(host, int(port))]
    assert all(
        q.permission == d.READ_WRITE and set(q.accept_message_types) >= {d.NORMAL, d.FIFO, d.DELAY, d.TRANSACTION}
        for q in route.message_queues
    )
    assigned = stub.QueryAssignment(s.QueryAssignmentRequest(topic=res("orders"), group=res("g")), timeout=10)
    assert assigned.status.code == d.OK and [a.message_queue.broker.name for a in assigned.assignments] == [server.name]
    bad = stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="orders", resource_namespace="ns")), timeout=10)
    assert bad.status.code == d.BAD_REQUEST and "namespace" in bad.status.message


def signed(secret: str, when: datetime.datetime) -> list[tuple[str, str]]:
    stamp = when.strftime("%Y%m%dT%H%M%SZ")
    sig = hmac.new(secret.encode(), stamp.encode(), hashlib.sha1).hexdigest()
    return [("x-mq-date-time", stamp), ("authorization", f"MQv2-HMAC-SHA1 Credential=app, SignedHeaders=x-mq-date-time, Signature={sig}")]


def test_signatures_are_checked_when_a_data_token_is_set(servers, tmp_path):
    (tmp_path / "token").write_text("s3cret")
    node = servers("secured", args=["--token-file", str(tmp_path / "token")])
    now = datetime.datetime.now()
    req = s.QueryRouteRequest(topic=res("t"))
    with grpc.insecure_channel(node.address) as channel:
        stub = MessagingServiceStub(channel)
        assert stub.QueryRoute(req, metadata=signed("s3cret", now), timeout=10).status.code == d.OK
        # the signed time is not checked (RocketMQ checks none; clients sign local time as UTC)
        assert stub.QueryRoute(req, metadata=signed("s3cret", now - datetime.timedelta(hours=8)), timeout=10).status.code == d.OK
        for metadata, why in (
            ([], "checks who calls"),
            (signed("wrong", now), "does not match"),
            ([("x-mq-date-time", "yesterday"), signed("s3cret", now)[1]], "not a time"),
        ):
            st = stub.QueryRoute(req, metadata=metadata, timeout=10).status
            assert st.code == d.UNAUTHORIZED and why in st.message, st
        # the Telemetry stream says so too, and ends
        answers = list(stub.Telemetry(iter([s.TelemetryCommand(settings=d.Settings())]), metadata=[], timeout=10))
        assert [a.status.code for a in answers] == [d.UNAUTHORIZED]


def test_telemetry_answers_each_client_with_the_settings_it_holds(stub, server):
    with Client(server.address, timeout=10) as ours:
        ours.update_group("ledger", fifo=True, max_deliveries=5, backoff=[1, 2])
    consumer = d.Settings(client_type=d.PUSH_CONSUMER, subscription=d.Subscription(group=res("ledger")))
    producer = d.Settings(client_type=d.PRODUCER, publishing=d.Publishing(topics=[res("t")]))
    answers = list(stub.Telemetry(iter([s.TelemetryCommand(settings=consumer), s.TelemetryCommand(settings=producer)]), timeout=10))
    assert [a.status.code for a in answers] == [d.OK, d.OK]
    sub, pub = answers[0].settings, answers[1].settings
    assert sub.subscription.fifo and sub.backoff_policy.max_attempts == 5
    assert [x.seconds for x in sub.backoff_policy.customized_backoff.next] == [1, 2]
    assert sub.subscription.long_polling_timeout.seconds > 0 and sub.subscription.receive_batch_size > 0
    assert pub.publishing.max_body_size == 4 * 1024 * 1024 and pub.publishing.validate_message_type
    assert not sub.metric.on


def test_compressed_bodies_are_stored_and_delivered_plain(stub, server):
    """RocketMQ 5's Java client sends large bodies GZIP-encoded; RocketMQ 4's clients stored
    zlib-compressed records (sys flag COMPRESSED): consumers of either protocol read plain bytes."""
    body = b"compress me " * 1000
    huge_born = msg(body=gzip.compress(body), body_encoding=d.GZIP, message_id=f"{7:034X}")
    huge_born.system_properties.born_timestamp.seconds = 2**62  # (not a time: the store's own is kept)
    assert send(stub, huge_born).status.code == d.OK
    with Client(server.address, timeout=10) as ours:
        n = ours.route("t", refresh=True).nodes[0]
        stored: list = []
        wait_until(
            lambda: stored.extend(m for q in n.queue_ids for m in ours.pull("t", QueueRef(n.name, n.address, q), 0).messages) or stored,
            what="the message dispatched",
        )
        assert [m.body for m in stored] == [body] and not stored[0].sys_flag & FLAG_COMPRESSED
    req = s.ReceiveMessageRequest(
        group=res("g"), message_queue=d.MessageQueue(topic=res("t")), batch_size=8, invisible_duration=Duration(seconds=30)
    )
    st, got, _ = stream_status(stub.ReceiveMessage(req, timeout=10))
    assert [m.body for m in got] == [body] and got[0].system_properties.body_encoding == d.IDENTITY


def test_a_rocketmq_4_compressed_record_is_delivered_uncompressed(tmp_path):
    body = b"written by a RocketMQ 4 producer " * 200
    root = str(tmp_path / "store")
    store = MessageStore(root, dict(kv.split("=", 1) for kv in SMALL_STORE)).start()  # (as the server process runs)
    assert store.put_messages("old", 0, [Message("old", zlib.compress(body), sys_flag=FLAG_COMPRESSED)]).ok
    store.shutdown()
    node = ServerProcess(root, name="old-node").start()
    try:
        with grpc.insecure_channel(node.address) as channel:
            st, got, _ = stream_status(
                MessagingServiceStub(channel).PullMessage(
                    s.PullMessageRequest(group=res("g"), message_queue=d.MessageQueue(topic=res("old"), id=0), offset=0, batch_size=1),
                    timeout=10,
                )
            )
    finally:
        node.kill()
    assert st.code == d.OK and [m.body for m in got] == [body]
    assert got[0].system_properties.body_digest.checksum == f"{zlib.crc32(body):08X}"


def test_a_route_to_a_topic_that_does_not_exist_when_topics_are_not_created_on_first_use(servers):
    node = servers("strict", settings=["autoCreateTopicEnable=false"])
    with grpc.insecure_channel(node.address) as channel:
        route = MessagingServiceStub(channel).QueryRoute(s.QueryRouteRequest(topic=res("missing")), timeout=10)
    assert route.status.code == d.TOPIC_NOT_FOUND and route.status.message.startswith("topic.name")


def test_a_producer_publishing_too_many_topics_is_told(stub):
    settings = d.Settings(client_type=d.PRODUCER, publishing=d.Publishing(topics=[res(f"t{i}") for i in range(1025)]))
    answers = list(stub.Telemetry(iter([s.TelemetryCommand(settings=settings)]), timeout=10))
    assert [a.status.code for a in answers] == [d.BAD_REQUEST] and "at most 1024" in answers[0].status.message


def test_compressed_bodies_may_not_inflate_a_request_past_its_size_limit(stub):
    """4 KiB on the wire may be 4 MiB stored: a request's bodies together stay within the 64 MiB
    a request may hold, uncompressed."""
    small = gzip.compress(b"z" * (4 << 20))
    batch = [msg(body=small, body_encoding=d.GZIP, message_id=f"{i + 1:034X}") for i in range(17)]
    resp = send(stub, *batch)
    assert resp.status.code == d.MESSAGE_BODY_TOO_LARGE and resp.status.message.startswith("messages[16].body")


def test_a_receipt_of_a_group_the_store_does_not_know_is_invalid(stub):
    from msgstore.record.receipt import Receipt

    stray = Receipt("g", "t", 0, 0, 0, 1, "no-such-group").encode()
    ack = stub.AckMessage(
        s.AckMessageRequest(group=res("g"), topic=res("t"), entries=[s.AckMessageEntry(receipt_handle=stray)]), timeout=10
    )
    assert ack.status.code == d.INVALID_RECEIPT_HANDLE and "no-such-group" in ack.status.message


# ---------------------------------------------------------------------- a trial with the official client


def test_a_send_to_a_topic_that_does_not_exist_is_topic_not_found(servers):
    """It was BAD_REQUEST ("MESSAGE_ILLEGAL: topic ... does not exist"), which the client retried."""
    node = servers("strict", settings=["autoCreateTopicEnable=false"])
    with grpc.insecure_channel(node.address) as channel:
        resp = send(MessagingServiceStub(channel), msg(topic="missing"))
    assert resp.status.code == d.TOPIC_NOT_FOUND and resp.status.message.startswith("messages[0].topic.name"), resp.status
    assert "MESSAGE_ILLEGAL" not in resp.status.message


def test_a_topic_with_a_message_type_takes_that_type_only(stub, server):
    """RocketMQ's proxy checks a send's type against its topic's (enableTopicMessageTypeCheck):
    every type was stored in any topic."""
    c = Client(server.address, timeout=10)
    c.create_topic("fifo-only", 2, message_type="FIFO")
    c.create_topic("mixed", 2, message_type="MIXED")
    c.create_topic("untyped", 2)
    normal = send(stub, msg("fifo-only"))
    assert normal.status.code == d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, normal.status
    assert normal.status.message.startswith("messages[0].system_properties.message_type") and "FIFO" in normal.status.message
    assert send(stub, msg("fifo-only", message_type=d.FIFO, message_group="g")).status.code == d.OK
    at = datetime_ts(days=1)
    for topic in ("mixed", "untyped"):
        assert send(stub, msg(topic)).status.code == d.OK
        assert send(stub, msg(topic, message_id="0A" * 17, message_type=d.DELAY, delivery_timestamp=at)).status.code == d.OK


def test_bad_properties_and_groups_are_told_for_what_they_are(stub):
    big = msg()
    big.user_properties["p"] = "v" * 40_000
    resp = send(stub, big)
    assert resp.status.code == d.MESSAGE_PROPERTIES_TOO_LARGE and resp.status.message.startswith("messages[0]: its properties"), resp.status
    value = msg()
    value.user_properties["pv"] = "a\x01b"
    resp = send(stub, value)
    assert resp.status.code == d.BAD_REQUEST and "the value" in resp.status.message and "reserved" not in resp.status.message
    resp = send(stub, msg(message_type=d.FIFO, message_group="g\x01"))
    assert resp.status.code == d.ILLEGAL_MESSAGE_GROUP and "\\x00-\\x02" in resp.status.message, resp.status
    resp = send(stub, msg(tag="t\x01x"))
    assert resp.status.code == d.ILLEGAL_MESSAGE_TAG and "\\x00-\\x02" in resp.status.message, resp.status
    ack = stub.AckMessage(
        s.AckMessageRequest(group=res("g"), topic=res("t"), entries=[s.AckMessageEntry(receipt_handle="bogus")]), timeout=10
    )
    assert ack.entries[0].status.code == d.INVALID_RECEIPT_HANDLE
    assert ack.entries[0].status.message.count("receipt_handle") == 1, ack.entries[0].status.message


def test_a_receipt_naming_a_group_with_control_bytes_is_told_printably(stub):
    from msgstore.record.receipt import Receipt

    stray = Receipt("g", "t", 0, 0, 0, 1, "vm-0\x00\x00").encode()
    ack = stub.AckMessage(
        s.AckMessageRequest(group=res("g"), topic=res("t"), entries=[s.AckMessageEntry(receipt_handle=stray)]), timeout=10
    )
    assert ack.status.code == d.INVALID_RECEIPT_HANDLE and "\x00" not in ack.status.message and "\\x00" in ack.status.message
