"""Topics and groups as a declarative tool sets them (issue 32): a topic's permissions and
RocketMQ 5 message type, a delete that refuses to drop messages unless forced, and a group's
settings forgotten. A real server process."""

import json
import os

import grpc
import pytest

from msgstore.client import Client, StoreError
from msgstore.v1 import msgstore_pb2 as pb


def refused(call, code, *words):
    with pytest.raises(StoreError) as e:
        call()
    assert e.value.code == code, e.value
    for w in words:
        assert w in e.value.details, e.value.details
    return e.value


def test_permissions_and_message_type_are_kept_listed_and_routed(server, client):
    from rocketmq.grpc_protocol import MessagingServiceStub, definition_pb2, service_pb2

    d, s = definition_pb2, service_pb2
    (info,) = client.create_topic("ordered", 4, message_type="FIFO")
    assert (info.write_queue_nums, info.perm, info.message_type) == (4, 6, "FIFO")
    (info,) = client.create_topic("ordered", perm=4)  # queues and type unchanged
    assert (info.write_queue_nums, info.perm, info.message_type) == (4, 4, "FIFO")
    listed = {t.name: t for t in client._call(server.address, "ListTopics", pb.ListTopicsRequest()).topics}
    assert listed["ordered"].message_type == "FIFO" and listed["ordered"].perm == 4
    with grpc.insecure_channel(server.address) as channel:
        route = MessagingServiceStub(channel).QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="ordered")), timeout=10)
    assert route.status.code == d.OK and len(route.message_queues) == 4
    assert all(q.permission == d.READ and list(q.accept_message_types) == [d.FIFO] for q in route.message_queues)
    (info,) = client.create_topic("ordered", message_type="")  # "" leaves it: unset only through a new topic
    assert info.message_type == "FIFO"
    # the type is RocketMQ's attribute in topics.json, beside what RocketMQ itself writes there
    with open(os.path.join(server.data_dir, "config", "topics.json")) as f:
        assert json.load(f)["topicConfigTable"]["ordered"]["attributes"] == {"message.type": "FIFO"}
    refused(lambda: client.create_topic("ordered", perm=5), grpc.StatusCode.INVALID_ARGUMENT, "perm")
    refused(lambda: client.create_topic("ordered", message_type="URGENT"), grpc.StatusCode.INVALID_ARGUMENT, "message_type")


def test_a_topic_holding_messages_is_deleted_only_when_forced(server, client):
    client.create_topic("keep", 1)
    sent = client.send("keep", b"precious")
    client.commit("readers", "keep", client.route("keep").queues[0], 1)
    refused(lambda: client.delete_topic("keep"), grpc.StatusCode.FAILED_PRECONDITION, "holds 1 messages", "force")
    assert client.pull("keep", client.route("keep", refresh=True).queues[0], sent.queue_offset, timeout_ms=2000).messages
    (gone,) = client.delete_topic("keep", force=True)
    assert gone.deleted and gone.messages == 1
    assert not os.path.exists(os.path.join(server.data_dir, "consumequeue", "keep"))
    (again,) = client.create_topic("keep", 1)  # a topic of that name starts empty, and nobody's position in it is left
    q = client.route("keep", refresh=True).queues[0]
    assert client.pull("keep", q, 0).messages == [] and client.committed("readers", "keep", q) == -1
    client.create_topic("empty", 1)
    (gone,) = client.delete_topic("empty")
    assert gone.deleted and gone.messages == 0
    (missing,) = client.delete_topic("never")
    assert not missing.deleted


def test_a_group_s_settings_are_forgotten(client):
    client.update_group("billing", fifo=True, max_deliveries=3)
    client.create_topic("bills", 1)
    client.commit("billing", "bills", client.route("bills").queues[0], 0)
    (policy,) = [g.policy for _, g in client.describe_groups("billing")]
    assert policy.fifo and policy.max_deliveries == 3
    assert client.delete_group("billing")
    policies = [g.policy for _, g in client.describe_groups("billing")]
    assert all(not p.fifo and p.max_deliveries != 3 for p in policies)
    assert client.committed("billing", "bills", client.route("bills").queues[0]) == 0  # positions kept...
    assert client.delete_group("billing", remove_offsets=True)
    assert client.committed("billing", "bills", client.route("bills").queues[0]) == -1  # ...unless asked
    assert not client.delete_group("billing")
    refused(lambda: client.delete_group("bad/name"), grpc.StatusCode.INVALID_ARGUMENT, "group")


def test_the_cli_creates_changes_and_deletes_topics(server):
    from tests.api.test_cli import run

    s = ["--server", server.address]
    out = json.loads(run("--json", "topics", "create", "jobs", "--queues", "2", "--message-type", "DELAY", "--perm", "w", *s).stdout)
    assert out == [{"topic": "jobs", "queues": 2, "perm": 2, "type": "DELAY"}]
    with Client(server.address, timeout=10) as c:
        c.send("jobs", b"x")  # (write only: sends pass)
    bad = run("topics", "delete", "jobs", *s, check=False)
    assert bad.returncode != 0 and b"force" in bad.stderr, bad.stderr
    out = json.loads(run("--json", "topics", "delete", "jobs", "--force", *s).stdout)
    assert out[0]["deleted"] is True
    assert run("topics", "delete", *s, check=False).returncode == 2


def test_a_message_acknowledged_just_before_a_delete_is_counted(client):
    """Appends to a topic being deleted are refused, those under way and everything in the log
    are dispatched before the count: no acknowledged message is dropped without force."""
    client.create_topic("busy", 1)
    for i in range(50):
        client.send("busy", b"m%d" % i)
        if i % 10 == 9:  # (right after an acknowledgement, before dispatch may have run)
            refused(lambda: client.delete_topic("busy"), grpc.StatusCode.FAILED_PRECONDITION, f"holds {i + 1} messages")


def test_the_store_s_own_topics_are_not_deleted_and_read_only_topics_refuse_sends(client):
    for topic in ("%RETRY%billing", "%DLQ%billing", "rmq_sys_REVIVE_LOG", "SCHEDULE_TOPIC_XXXX"):
        refused(lambda t=topic: client.delete_topic(t), grpc.StatusCode.INVALID_ARGUMENT, "the store's own")
    client.create_topic("archive", 1, perm=4)
    r = client.send("archive", b"x")  # (a refused message is a result, as any put that stored nothing)
    assert r.status == "MESSAGE_ILLEGAL" and "archive is read only" in r.error
    client.create_topic("archive", perm=6)
    assert client.send("archive", b"x").status == "PUT_OK"
    client.create_topic("typed", 1, message_type="FIFO")
    (info,) = client.create_topic("typed", message_type="UNSPECIFIED")  # (the attribute removed: every type)
    assert info.message_type == ""


def test_a_delete_over_several_nodes_is_all_or_nothing(cluster):
    with Client(",".join(n.address for n in cluster), timeout=10) as c:
        c.create_topic("spread", 1)
        node = c.send("spread", b"held").node
        e = refused(lambda: c.delete_topic("spread"), grpc.StatusCode.FAILED_PRECONDITION, f"{node} holds 1")
        assert "force" in e.details
        assert set(c.topic_infos()) == {"store-0", "store-1", "store-2"}
        assert all("spread" in topics for topics in c.topic_infos().values())  # deleted nowhere
        assert all(r.deleted for r in c.delete_topic("spread", force=True))
        assert not any("spread" in topics for topics in c.topic_infos().values())
        c.create_topic("half", 1)
        cluster[2].kill()
        refused(lambda: c.delete_topic("half"), grpc.StatusCode.UNAVAILABLE, "not deleted")
