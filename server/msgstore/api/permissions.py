"""What each call needs (docs/store-format.md §20.2): the resource and action a msgstore.v1 or
apache.rocketmq.v2 request names, checked against the caller's entries before it runs.

Follows RocketMQ 5.3's ACL 2.0 where it has the same call: sending is ``pub`` on the topic;
receiving, pulling, acknowledging and committing are ``sub`` on the topic and on the group;
lookups by key or id are ``get`` on the topic; creating a topic is ``create``, changing a group
``update``; a route is ``pub`` or ``sub`` (RocketMQ's ``Any``). A send's topics, a lookup by id's
topic and a transaction's topic are known only once the request is read, so those handlers
check there (:data:`~msgstore.acl.identity.CALLER`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..acl.identity import Denied, Identity

Need = tuple[str, str, str]  # (kind, name, action)


def _topic_and_group(action: str) -> Callable[[Any], Iterable[Need]]:
    def needs(r: Any) -> Iterable[Need]:
        yield "topic", r.topic, action
        if getattr(r, "group", ""):
            yield "group", r.group, "sub"

    return needs


def _pull_queues(r: Any) -> Iterable[Need]:
    for p in r.pulls:
        yield "topic", p.topic, "sub"
        if p.group:
            yield "group", p.group, "sub"


def _heartbeat(r: Any) -> Iterable[Need]:
    yield "group", r.group, "sub"
    for t in r.topics:
        yield "topic", t, "sub"


def _route(r: Any) -> Iterable[Need]:
    if r.topic:  # (no topic: the nodes only, which every signed-in caller may learn)
        yield "topic", r.topic, "any"


def _group_action(action: str) -> Callable[[Any], Iterable[Need]]:
    def needs(r: Any) -> Iterable[Need]:
        yield ("group", r.group, action) if r.group else ("cluster", "", "get")

    return needs


def _none(_r: Any) -> Iterable[Need]:
    return ()


# msgstore.v1 MessageStore: what a request needs before it runs. Every method is listed (a test
# checks it), so a new one cannot run unchecked by being forgotten here.
V1: dict[str, Callable[[Any], Iterable[Need]]] = {
    "Send": _none,  # its topics are checked as its entries are read (servicer._accept)
    "SendStream": _none,  # likewise, per request
    "Pull": _topic_and_group("sub"),
    "PullQueues": _pull_queues,
    "PullQueuesStream": _none,  # each request as a PullQueues (pull_queues.PullQueuesStream)
    "Subscribe": _topic_and_group("sub"),
    "QueryByKey": lambda r: [("topic", r.topic, "get")],
    "GetMessage": _none,  # the topic of the message found (servicer.GetMessage)
    "GetQueueOffsets": lambda r: [("topic", r.topic, "sub")],
    "GetOffsetByTime": lambda r: [("topic", r.topic, "sub")],
    "CommitOffset": _topic_and_group("sub"),
    "GetCommittedOffset": _topic_and_group("sub"),
    "CreateTopic": lambda r: [("topic", r.topic, "create")],
    "DeleteTopic": lambda r: [("topic", r.topic, "delete")],
    "ListTopics": _none,  # answers the topics the caller may use (servicer.ListTopics)
    "GetRoute": _route,
    "Heartbeat": _heartbeat,
    "Unregister": lambda r: [("group", r.group, "sub")],
    "DescribeGroups": _group_action("get"),
    "Recall": _none,  # the topic its handle names (servicer.Recall)
    "Receive": _topic_and_group("sub"),
    "Ack": _topic_and_group("sub"),
    "ChangeInvisible": _topic_and_group("sub"),
    "UpdateGroup": lambda r: [("group", r.group, "update")],
    "DeleteGroup": lambda r: [("group", r.group, "delete")],
    "EndTransaction": _none,  # the topic of its half message (transaction_service)
    "TransactionChecks": lambda r: [("group", r.producer_group, "pub")] if r.producer_group else [],
}


V2_PUBLISH = frozenset({"SendMessage", "EndTransaction", "RecallMessage"})


def v2_needs(method: str, r: Any) -> Iterable[Need]:
    """An apache.rocketmq.v2 request's needs, from its resource fields (RocketMQ's ACL 2.0:
    sending, ending a transaction and recalling are ``pub`` on the topic; a route is ``any``;
    every other call naming a topic or a group is ``sub`` on each; Telemetry only signs in)."""
    fields = r.DESCRIPTOR.fields_by_name
    action = "pub" if method in V2_PUBLISH else "any" if method == "QueryRoute" else "sub"
    if "messages" in fields:
        for m in r.messages:
            yield "topic", m.topic.name, "pub"
    if "topic" in fields and r.topic.name:
        yield "topic", r.topic.name, action
    if "message_queue" in fields and r.message_queue.topic.name:
        yield "topic", r.message_queue.topic.name, action
    if "group" in fields and r.group.name and method not in V2_PUBLISH:
        yield "group", r.group.name, "sub"


def require(identity: Identity, needs: Iterable[Need]) -> None:
    """Raise :class:`Denied` for the first need the caller lacks."""
    if identity.user is None:
        return
    for kind, name, action in needs:
        identity.require(kind, name, action)


__all__ = ["V1", "Denied", "Identity", "require", "v2_needs"]
