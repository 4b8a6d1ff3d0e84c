"""A recall handle: what names a message with a delivery time so that it can be cancelled
before that time (RocketMQ 5.3's recall handle names topic, broker, time and message id the
same way). Given out by the server in a send's result, decoded by the server's Recall and by
the client, which finds the replica group's master to ask."""

from __future__ import annotations

import base64
from dataclasses import dataclass


@dataclass(frozen=True)
class RecallHandle:
    """What names a timer message for a recall: its real topic, delivery time and UNIQ_KEY,
    and the replica group (a lone node's name) that stored it, whose master cancels it."""

    topic: str
    deliver_ms: int
    uniq_key: str
    group: str = ""

    def encode(self) -> str:
        raw = "\x1f".join(("1", self.topic, str(self.deliver_ms), self.uniq_key, self.group)).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> RecallHandle:
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
            version, topic, deliver, uniq, group = raw.split("\x1f")
            if version != "1" or not topic or not uniq:
                raise ValueError(raw)
            return cls(topic, int(deliver), uniq, group)
        except (ValueError, UnicodeDecodeError):
            raise ValueError("not a recall handle this store gave out") from None
