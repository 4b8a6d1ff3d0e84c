"""MessageStoreTopic resources: a store's topics kept in Git (Strimzi's KafkaTopic).

For each resource the topic is made on every node with its queues, permission and RocketMQ 5
message type, and put back when it differs there (a change made with the CLI: ``TopicDrift``).
A topic made with the CLI before its resource existed is taken over by it. When a resource is
deleted, its topic is deleted where it is empty; where it holds messages it is kept (a
``TopicKept`` Warning) unless the resource said ``deleteWithData: true``, and the operator stops
managing it. Queues never shrink (messages in the removed queues would be stranded).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from msgstore.broker.system_topics import is_store_topic
from msgstore.client import StoreError

from .declared import Declared
from .groups import _applied
from .pods import PodView
from .spec import SpecError

KIND = "MessageStoreTopic"
PLURAL = "messagestoretopics"
MANAGED = "managedTopics"  # MessageStore status: topic -> {"deleteWithData": bool}
PERMISSIONS = {"ReadWrite": 6, "ReadOnly": 4, "WriteOnly": 2}
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")
UNSPECIFIED = "UNSPECIFIED"  # what clears a topic's type (CreateTopic's "" leaves it)
TOPIC = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")


@dataclass(frozen=True)
class TopicSpec:
    name: str
    queues: int  # 0: the store's defaultTopicQueueNums (at creation)
    perm: int
    message_type: str  # "": unspecified (RocketMQ 5 clients may send every type)
    delete_with_data: bool


def parse_topic(body: Mapping[str, Any]) -> TopicSpec:
    meta, spec = body.get("metadata", {}), body.get("spec") or {}
    name = spec.get("topicName") or meta["name"]
    if not TOPIC.match(name):
        raise SpecError("spec.topicName", f"{name[:80]!r}: 1-127 characters of A-Z a-z 0-9 _ - % |")
    if is_store_topic(name):
        raise SpecError("spec.topicName", f"{name} is the store's own (system, retry or dead-letter topic)")
    queues = int(spec.get("queues") or 0)
    if not 0 <= queues <= 1024:
        raise SpecError("spec.queues", f"must be between 1 and 1024, got {queues}")
    permission = str(spec.get("permission", "ReadWrite"))
    if permission not in PERMISSIONS:
        raise SpecError("spec.permission", f"ReadWrite, ReadOnly or WriteOnly, got {permission[:40]!r}")
    message_type = str(spec.get("messageType") or "")
    if message_type and message_type not in MESSAGE_TYPES:
        raise SpecError("spec.messageType", f"one of {', '.join(MESSAGE_TYPES)}, got {message_type[:40]!r}")
    return TopicSpec(name, queues, PERMISSIONS[permission], message_type, bool(spec.get("deleteWithData", False)))


class Topics(Declared):
    """One pass over the topics of one store."""

    KIND = KIND

    def reconcile(self, pods: list[PodView], status: dict[str, Any]) -> None:
        resources = self.resources()
        managed: dict[str, Any] = dict(status.get(MANAGED) or {})
        if resources is None or (not resources and not managed):
            return
        addresses = self.unavailable(resources, pods, needs_token=False)
        if addresses is None:
            return
        with self.client(addresses) as client:
            try:
                live = client.topic_infos()
            except StoreError as e:
                for body in resources:
                    self.status(body, "StoreUnavailable", f"listing the store's topics failed: {e.code.name}: {e.details}")
                return
            with_data: dict[str, bool] = {}  # deleteWithData of the resources applied now

            def one(body: dict[str, Any], held: dict[str, str]) -> str | None:
                topic = self._one(client, body, live, held)
                if topic is None:
                    return None
                with_data[topic.name] = topic.delete_with_data
                return topic.name

            held = self.claimed(resources, managed, "topicName", one)
            kept = {t: {"deleteWithData": with_data[t]} if t in with_data else managed[t] for t in held}
            for gone in sorted(set(managed) - set(kept)):
                if not self._delete(client, gone, bool((managed[gone] or {}).get("deleteWithData"))):
                    kept[gone] = managed[gone]  # tried again next pass
        status[MANAGED] = kept

    def _one(self, client: Any, body: dict[str, Any], live: dict[str, dict[str, Any]], wanted: dict[str, str]) -> TopicSpec | None:
        try:
            topic = parse_topic(body)
        except SpecError as e:
            self.status(body, "InvalidSpec", str(e))
            return None
        if topic.name in wanted:
            self.status(body, "TopicTaken", f"spec.topicName: {topic.name} is {KIND} {wanted[topic.name]}'s")
            return None
        have = [nodes[topic.name] for nodes in live.values() if topic.name in nodes]
        most = max((t.write_queue_nums for t in have), default=0)
        shrink = bool(topic.queues and topic.queues < most)
        queues = 0 if shrink else topic.queues  # (refused below; its permission and type still apply)
        differs = len(have) < len(live) or any(
            (queues and t.write_queue_nums != queues) or (t.perm, t.message_type) != (topic.perm, topic.message_type) for t in have
        )
        if differs:
            client.create_topic(topic.name, queues, perm=topic.perm, message_type=topic.message_type or UNSPECIFIED)
            if len(have) == len(live) and _applied(body) and (body.get("status") or {}).get("topicName") == topic.name:
                self.event(body, "Warning", "TopicDrift", f"topic {topic.name} put back as the resource says (changed outside it)")
            else:
                self.event(body, "Normal", "TopicPut", f"topic {topic.name} made or updated on every node")
        if shrink:
            why = f"spec.queues: {topic.queues} is fewer than the topic's {most} (messages in the others would be stranded)"
            self.status(body, "QueuesCannotShrink", why, topicName=topic.name)
            return topic
        count = topic.queues or most or None
        self.status(body, "Ready", "", True, topicName=topic.name, **({"queues": count} if count else {}))
        return topic

    def _delete(self, client: Any, topic: str, with_data: bool) -> bool:
        """Whether the operator is done with ``topic`` (deleted everywhere, or kept because it
        holds data somewhere: then it is deleted nowhere)."""
        try:
            client.delete_topic(topic, force=with_data)
        except StoreError as e:
            if e.code == grpc.StatusCode.FAILED_PRECONDITION:
                self.events.append(
                    (
                        "Warning",
                        "TopicKept",
                        f"topic {topic} kept: its {KIND} is gone but {e.details}; set spec.deleteWithData: true "
                        "before deleting the resource to drop them, or delete it with the CLI",
                    )
                )
                return True
            self.events.append(("Warning", "TopicDeleteFailed", f"topic {topic}: {e.code.name}: {e.details}"))
            return False
        self.events.append(("Normal", "TopicDeleted", f"topic {topic} deleted (its {KIND} is gone)"))
        return True
