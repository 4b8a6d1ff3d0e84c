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
    fifo: dict[int, tuple[str, int]] | None = None  # a FIFO group's: offset → (message group, delivery number)

    def record(self) -> Message:
        body: dict[str, object] = {"g": self.group, "t": self.topic, "q": self.queue_id, "o": self.offsets, "d": self.deadline}
        if self.fifo is not None:
            body["f"] = [[o, mg, n] for o, (mg, n) in sorted(self.fifo.items())]
        return Message(REVIVE_TOPIC, json.dumps(body, separators=(",", ":")).encode(), 0, properties={PROP_KIND: "ck"})


@dataclass
class AckRecord:
    acks: list[tuple[int, int]]  # (checkpoint offset, message offset)
    moved: bool = False  # the deliveries moved to a new checkpoint (ChangeInvisible), not finished


def ack_record(acks: list[tuple[int, int]], moved: bool = False) -> Message:
    """(checkpoint offset, message offset) pairs done with their checkpoints."""
    body: dict[str, object] = {"a": acks}
    if moved:
        body["m"] = 1
    return Message(REVIVE_TOPIC, json.dumps(body, separators=(",", ":")).encode(), 0, properties={PROP_KIND: "ack"})


def parse(kind: str | None, body: bytes) -> Checkpoint | AckRecord | None:
    """A checkpoint, an ack record, or None for a record that is neither."""
    try:
        doc = json.loads(body)
        if kind == "ck":
            offsets = [int(o) for o in doc["o"]]
            fifo = {int(o): (str(mg), int(n)) for o, mg, n in doc["f"]} if "f" in doc else None
            return Checkpoint(str(doc["g"]), str(doc["t"]), int(doc["q"]), offsets, int(doc["d"]), set(offsets), fifo)
        if kind == "ack":
            return AckRecord([(int(ck), int(o)) for ck, o in doc["a"]], bool(doc.get("m")))
    except (ValueError, KeyError, TypeError):
        return None
    return None
