"""The revive log: RocketMQ 5 pop consumption's checkpoint and ack records, written to one queue
of a system topic, so that which deliveries are in flight replicates with the commit log and is
rebuilt after a restart or a promotion by reading the queue again.

- a checkpoint (``ck``): a delivery of some offsets of one queue to a consumer group, invisible
  to the group until ``deadline`` (epoch ms);
- an ack (``ack``): offsets of earlier checkpoints (by their queue offset in this log) that were
  acknowledged, or whose invisibility was changed (a new checkpoint follows in the same batch).

Bodies are JSON, as RocketMQ's PopCheckPoint and AckMsg bodies are (the fields are ours).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..record.codec import Message
from .system_topics import REVIVE_TOPIC

PROP_KIND = "TAGS"  # "ck" or "ack": readable in `msgstore pull rmq_sys_REVIVE_LOG`


@dataclass
class Checkpoint:
    group: str
    topic: str
    queue_id: int
    offsets: list[int]
    deadline: int
    pending: set[int] = field(default_factory=set)

    def record(self) -> Message:
        body = {"g": self.group, "t": self.topic, "q": self.queue_id, "o": self.offsets, "d": self.deadline}
        return Message(REVIVE_TOPIC, json.dumps(body, separators=(",", ":")).encode(), 0, properties={PROP_KIND: "ck"})


def ack_record(acks: list[tuple[int, int]]) -> Message:
    """(checkpoint offset, message offset) pairs done."""
    return Message(REVIVE_TOPIC, json.dumps({"a": acks}, separators=(",", ":")).encode(), 0, properties={PROP_KIND: "ack"})


def parse(kind: str | None, body: bytes) -> Checkpoint | list[tuple[int, int]] | None:
    """A checkpoint, the acks of an ack record, or None for a record that is neither."""
    try:
        doc = json.loads(body)
        if kind == "ck":
            offsets = [int(o) for o in doc["o"]]
            return Checkpoint(str(doc["g"]), str(doc["t"]), int(doc["q"]), offsets, int(doc["d"]), set(offsets))
        if kind == "ack":
            return [(int(ck), int(o)) for ck, o in doc["a"]]
    except (ValueError, KeyError, TypeError):
        return None
    return None
