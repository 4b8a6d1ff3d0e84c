"""How long a message not acknowledged waits before it comes back, and how many deliveries a
consumer group gets before a message is set aside (RocketMQ 5's group retry policy, kept in the
group's entry of ``subscriptionGroup.json``):

- ``retryMaxTimes`` (16): redeliveries at most, so 17 deliveries in all (RocketMQ's proxy:
  maxDeliveryAttempts = retryMaxTimes + 1); the message then goes to ``%DLQ%<group>``.
- ``groupRetryPolicy``: ``{"type": "CUSTOMIZED", "customizedRetryPolicy": {"next": [ms, ...]}}``
  (the wait after delivery k is next[k-1], the last repeating; the default is RocketMQ's retry
  levels from 10 s: ``10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h``) or
  ``{"type": "EXPONENTIAL", "exponentialRetryPolicy": {"initial": ms, "max": ms, "multiplier": m}}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_NEXT: tuple[int, ...] = (10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000, 480_000, 540_000)
DEFAULT_NEXT += (600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000)
DEFAULT_MAX = 16


@dataclass(frozen=True)
class RetryPolicy:
    max_deliveries: int = DEFAULT_MAX + 1
    next_ms: tuple[int, ...] = DEFAULT_NEXT  # customized
    initial_ms: int = 0  # exponential when > 0
    max_ms: int = 0
    multiplier: float = 2.0

    def backoff_ms(self, deliveries: int) -> int:
        """The wait before the message comes back after its ``deliveries``-th delivery."""
        k = max(1, deliveries)
        if self.initial_ms > 0:
            cap = self.max_ms or self.initial_ms
            return int(min(cap, self.initial_ms * self.multiplier ** min(k - 1, 64)))
        return self.next_ms[min(k, len(self.next_ms)) - 1]

    @classmethod
    def of_group(cls, entry: dict[str, Any] | None) -> RetryPolicy:
        if not entry:
            return cls()
        max_deliveries = int(entry.get("retryMaxTimes", DEFAULT_MAX)) + 1
        policy = entry.get("groupRetryPolicy") or {}
        if policy.get("type") == "EXPONENTIAL":
            e = policy.get("exponentialRetryPolicy") or {}
            initial = int(e.get("initial", 1_000))
            return cls(max_deliveries, DEFAULT_NEXT, max(1, initial), int(e.get("max", 7_200_000)), float(e.get("multiplier", 2)))
        nxt = tuple(int(x) for x in ((policy.get("customizedRetryPolicy") or {}).get("next") or DEFAULT_NEXT))
        return cls(max_deliveries, nxt or DEFAULT_NEXT)

    def as_entry(self) -> dict[str, Any]:
        """What the group's entry in subscriptionGroup.json holds (RocketMQ's field names)."""
        if self.initial_ms > 0:
            policy: dict[str, Any] = {
                "type": "EXPONENTIAL",
                "exponentialRetryPolicy": {"initial": self.initial_ms, "max": self.max_ms, "multiplier": self.multiplier},
            }
        else:
            policy = {"type": "CUSTOMIZED", "customizedRetryPolicy": {"next": list(self.next_ms)}}
        return {"retryMaxTimes": self.max_deliveries - 1, "groupRetryPolicy": policy}
