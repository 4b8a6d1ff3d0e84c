"""A receipt handle: what names one delivery of one message to a member of a consumer group
(RocketMQ 5's receipt handle), so that it can be acknowledged or have its invisibility
changed. It names the replica group (a lone node's name) whose master holds the delivery's
checkpoint, the queue and offset of the message, and the checkpoint's offset in the revive log."""

from __future__ import annotations

import base64
from dataclasses import dataclass


@dataclass(frozen=True)
class Receipt:
    group: str  # the consumer group
    topic: str  # the queue's topic (a retry topic for a redelivery)
    queue_id: int
    offset: int  # the message's queue offset
    checkpoint: int  # the delivery's checkpoint: its queue offset in the revive log
    attempt: int  # 1 for a first delivery
    node: str  # the replica group (or lone node) that delivered it

    def encode(self) -> str:
        parts = ("1", self.group, self.topic, str(self.queue_id), str(self.offset), str(self.checkpoint), str(self.attempt), self.node)
        return base64.urlsafe_b64encode("\x1f".join(parts).encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> Receipt:
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
            version, group, topic, qid, offset, ck, attempt, node = raw.split("\x1f")
            if version != "1" or not group or not topic:
                raise ValueError(raw)
            return cls(group, topic, int(qid), int(offset), int(ck), int(attempt), node)
        except (ValueError, UnicodeDecodeError):
            raise ValueError("not a receipt handle this store gave out") from None
