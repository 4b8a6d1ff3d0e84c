"""MessageStoreTopic and MessageStoreGroup under the operator (kmock, real store processes):
made on every node, changes made outside them put back, a topic holding messages kept when its
resource goes, a group's settings forgotten when its resource goes."""

import pytest

from msgstore.client import Client
from tests.operator.conftest import GROUPS, NS, TOPICS, ApiServer
from tests.operator.test_users_resource import delete, post

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=ApiServer)]

SMALL = {"mappedFileSizeCommitLog": 65536, "mappedFileSizeConsumeQueue": 4000, "extra": {"maxHashSlotNum": "1024", "maxIndexNum": "4096"}}


def resource(kind: str, name: str, **spec) -> dict:
    return {
        "apiVersion": "msgstore.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "namespace": NS},
        "spec": {"store": "orders", **spec},
    }


def ready(env, plural: str, name: str) -> dict:
    obj = env.obj(plural, name) or {}
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == "Ready"), {})


async def patch(env, plural: str, name: str, spec: dict) -> None:
    """As kubectl patch: the generation moves with the spec (the API server's part; kmock's not)."""
    group_version, kind = plural.rsplit("/", 1)
    generation = int((env.obj(plural, name) or {}).get("metadata", {}).get("generation") or 1)
    async with env.http.patch(
        f"{env.url}/apis/{group_version}/namespaces/{NS}/{kind}/{name}",
        json={"metadata": {"generation": generation + 1}, "spec": spec},
        headers={"Content-Type": "application/merge-patch+json"},
    ) as r:
        r.raise_for_status()


async def test_topics_from_resources(env):
    await env.create(replicas=2, store=SMALL)
    await env.until(lambda: env.condition("Ready").get("status") == "True", what="Ready", timeout=90)
    c = Client(",".join(x.address for x in env.cluster.containers.values()), timeout=10)

    def settings(topic):
        return {
            node: (t[topic].write_queue_nums, t[topic].perm, t[topic].message_type) for node, t in c.topic_infos().items() if topic in t
        }

    await post(env, TOPICS, resource("MessageStoreTopic", "orders", queues=4, messageType="FIFO"))
    await env.until(lambda: settings("orders") == {"orders-0": (4, 6, "FIFO"), "orders-1": (4, 6, "FIFO")}, what="the topic on both nodes")
    await env.until(lambda: ready(env, TOPICS, "orders").get("status") == "True", what="Ready")
    assert env.obj(TOPICS, "orders")["status"]["queues"] == 4

    c.create_topic("orders", perm=4, message_type="NORMAL")  # the CLI's change...
    await env.until(lambda: env.events("TopicDrift"), what="TopicDrift")
    await env.until(lambda: settings("orders") == {"orders-0": (4, 6, "FIFO"), "orders-1": (4, 6, "FIFO")}, what="...put back")

    await patch(env, TOPICS, "orders", {"queues": 6})
    await env.until(lambda: set(settings("orders").values()) == {(6, 6, "FIFO")}, what="grown to 6 queues")
    await env.until(lambda: env.events("TopicPut") and len(env.events("TopicPut")) >= 2, what="the edit applied")
    assert len(env.events("TopicDrift")) == 1  # the resource's own edit is no drift
    await patch(env, TOPICS, "orders", {"queues": 2})
    await env.until(lambda: ready(env, TOPICS, "orders").get("reason") == "QueuesCannotShrink", what="the shrink refused")
    assert "spec.queues" in ready(env, TOPICS, "orders")["message"] and set(settings("orders").values()) == {(6, 6, "FIFO")}

    # deleted with a message in it: kept (deleteWithData is false); an empty one: deleted; the CLI's own: untouched
    c.send("orders", b"keep me")
    await post(env, TOPICS, resource("MessageStoreTopic", "scratch"))
    c.create_topic("cli-made", 1)
    await env.until(lambda: settings("scratch"), what="scratch made")
    await delete(env, TOPICS, "orders")
    await delete(env, TOPICS, "scratch")
    await env.until(lambda: env.events("TopicKept") and env.events("TopicDeleted"), what="TopicKept and TopicDeleted")
    assert settings("orders") and not settings("scratch") and settings("cli-made")
    await env.until(lambda: env.store()["status"].get("managedTopics") == {}, what="nothing managed")


async def test_a_topic_resource_with_delete_with_data_drops_its_messages(env):
    await env.create(replicas=1, store=SMALL)
    await env.until(lambda: env.condition("Ready").get("status") == "True", what="Ready", timeout=90)
    c = Client(env.cluster.containers["orders-0"].address, timeout=10)
    await post(env, TOPICS, resource("MessageStoreTopic", "temp", queues=1, deleteWithData=True))
    await env.until(lambda: ready(env, TOPICS, "temp").get("status") == "True", what="Ready")
    c.send("temp", b"disposable")
    await delete(env, TOPICS, "temp")
    await env.until(lambda: "temp" not in c.topics(), what="the topic deleted with its message")


async def test_groups_from_resources(env):
    await env.create(replicas=2, store=SMALL)
    await env.until(lambda: env.condition("Ready").get("status") == "True", what="Ready", timeout=90)
    c = Client(",".join(x.address for x in env.cluster.containers.values()), timeout=10)

    def policies(group):
        return [
            (g.policy.fifo, g.policy.max_deliveries, list(g.policy.backoff_ms)) for _, g in c.describe_groups(group) if g.HasField("policy")
        ]

    await post(env, GROUPS, resource("MessageStoreGroup", "billing", fifo=True, maxDeliveries=3, retry={"backoffSeconds": [1, 2.5]}))
    await env.until(lambda: policies("billing") == [(True, 3, [1000, 2500])] * 2, what="the group on both nodes")
    await env.until(lambda: ready(env, GROUPS, "billing").get("status") == "True", what="Ready")
    c.update_group("billing", max_deliveries=9)  # the CLI's change...
    await env.until(lambda: env.events("GroupDrift"), what="GroupDrift")
    await env.until(lambda: policies("billing") == [(True, 3, [1000, 2500])] * 2, what="...put back")
    await patch(env, GROUPS, "billing", {"retry": {"backoffSeconds": None, "exponential": {"initialSeconds": 2, "maxSeconds": 60}}})
    await env.until(
        lambda: (
            [(g.policy.exponential_initial_ms, g.policy.exponential_max_ms) for _, g in c.describe_groups("billing")] == [(2000, 60000)] * 2
        ),
        what="exponential backoff",
    )
    await post(env, GROUPS, resource("MessageStoreGroup", "bad", retry={"backoffSeconds": [1], "exponential": {"initialSeconds": 1}}))
    await env.until(lambda: ready(env, GROUPS, "bad").get("reason") == "InvalidSpec", what="refused")
    assert "spec.retry" in ready(env, GROUPS, "bad")["message"]
    # a resource naming no retry keeps RocketMQ's default levels: a backoff set with the CLI is put back
    await post(env, GROUPS, resource("MessageStoreGroup", "plain"))
    await env.until(lambda: ready(env, GROUPS, "plain").get("status") == "True", what="plain Ready")
    default = policies("plain")
    assert len(default) == 2 and default[0][2][:2] == [10000, 30000]
    c.update_group("plain", backoff=[5])
    await env.until(lambda: len(env.events("GroupDrift")) >= 2, what="the CLI's backoff seen as drift")
    await env.until(lambda: policies("plain") == default, what="the default levels put back")
    await delete(env, GROUPS, "billing")
    await env.until(lambda: env.events("GroupDeleted"), what="GroupDeleted")
    assert all(not fifo and most != 3 for fifo, most, _ in policies("billing"))
    await env.until(lambda: env.store()["status"].get("managedGroups") == ["plain"], what="only plain managed")
