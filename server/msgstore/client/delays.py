"""How a client asks for delayed delivery: RocketMQ's message properties, so that a message
sent here and one sent by a RocketMQ client are the same record (docs/store-format.md §15)."""

from __future__ import annotations

import datetime as _dt

import grpc

from .errors import StoreError


def delay_properties(
    delay: float | _dt.timedelta | None, deliver_at: float | _dt.datetime | None, delay_level: int | None
) -> dict[str, str]:
    """``delay``: seconds from when the node stores it (its clock, so client clock skew does
    not matter); ``deliver_at``: a time (epoch seconds, or an aware datetime); ``delay_level``:
    RocketMQ 4's level (1 = the first of ``messageDelayLevel``). At most one of them."""
    given = [n for n, v in (("delay", delay), ("deliver_at", deliver_at), ("delay_level", delay_level)) if v is not None]
    if len(given) > 1:
        raise StoreError(grpc.StatusCode.INVALID_ARGUMENT, f"{' and '.join(given)}: give one of them, not both")
    if delay is not None:
        seconds = delay.total_seconds() if isinstance(delay, _dt.timedelta) else float(delay)
        if seconds < 0:
            raise StoreError(grpc.StatusCode.INVALID_ARGUMENT, f"delay: must be >= 0, got {seconds:g} s")
        return {"TIMER_DELAY_MS": str(round(seconds * 1000))}
    if deliver_at is not None:
        if isinstance(deliver_at, _dt.datetime):
            if deliver_at.tzinfo is None:
                raise StoreError(grpc.StatusCode.INVALID_ARGUMENT, "deliver_at: give a time zone (an aware datetime)")
            deliver_at = deliver_at.timestamp()
        return {"TIMER_DELIVER_MS": str(round(float(deliver_at) * 1000))}
    if delay_level is not None:
        if delay_level < 1:
            raise StoreError(grpc.StatusCode.INVALID_ARGUMENT, f"delay_level: must be >= 1, got {delay_level}")
        return {"DELAY": str(delay_level)}
    return {}


def group_properties(message_group: str | None) -> dict[str, str]:
    """A FIFO message's group (RocketMQ's ``__SHARDINGKEY``): a FIFO consumer group receives a
    group's messages one at a time, in order; they all go to one queue."""
    if message_group is None:
        return {}
    if not message_group or any(c in message_group for c in "\x01\x02"):
        raise StoreError(grpc.StatusCode.INVALID_ARGUMENT, f"message_group: must be a non-empty text, got {message_group!r}")
    return {"__SHARDINGKEY": message_group}
