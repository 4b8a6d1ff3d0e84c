"""The send side of delayed delivery: a message asking for a delay is stored in a system topic
instead of its own, as RocketMQ stores it, and a recall handle names a timer message so that
it can be cancelled before its time (RocketMQ 5.3's recall).

- ``DELAY`` = level n (RocketMQ 4): queue n-1 of ``SCHEDULE_TOPIC_XXXX``, delivered
  ``messageDelayLevel[n-1]`` after it was stored (a level above the last is the last, as in
  RocketMQ; 0 or less is no delay).
- ``TIMER_DELIVER_MS`` (epoch ms), or ``TIMER_DELAY_SEC`` / ``TIMER_DELAY_MS`` (from now on
  the node's clock), RocketMQ 5's timer: queue 0 of ``rmq_sys_wheel_timer``. A time already
  past is no delay; one more than ``timerMaxDelaySec`` away is refused.

Either way the real topic and queue travel in ``REAL_TOPIC`` / ``REAL_QID``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace

from ..record.codec import Message
from ..record.recall_handle import RecallHandle
from ..store.config import StoreConfig
from .system_topics import (
    PROP_DELAY,
    PROP_REAL_QID,
    PROP_REAL_TOPIC,
    PROP_TIMER_DEL_UNIQKEY,
    PROP_TIMER_DELAY_MS,
    PROP_TIMER_DELAY_SEC,
    PROP_TIMER_DELIVER_MS,
    PROP_UNIQ_KEY,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    is_system_topic,
)

_TIMER_PROPS = (PROP_TIMER_DELIVER_MS, PROP_TIMER_DELAY_SEC, PROP_TIMER_DELAY_MS)
_ASKS = (PROP_DELAY, *_TIMER_PROPS, PROP_TIMER_DEL_UNIQKEY)
SCHEDULE_PROPERTIES = _ASKS  # what makes a message the scheduler's (the send path's compiled check uses these)


class DelayRefused(ValueError):
    """A delay that cannot be honoured; ``field`` names what was wrong (a property, or the topic)."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def _int_property(props: dict[str, str], name: str) -> int:
    try:
        return int(props[name])
    except ValueError:
        raise DelayRefused(name, f"must be an integer, got {props[name]!r}") from None


class Scheduler:
    def __init__(self, settings: Callable[[], StoreConfig], now_ms: Callable[[], int]):
        self.settings = settings
        self.now_ms = now_ms

    @staticmethod
    def wants(msg: Message) -> bool:
        """The message asks for a delay (or names a system topic, which a client may not)."""
        props = msg.properties
        return any(k in props for k in _ASKS) or is_system_topic(msg.topic)

    def prepare(self, msg: Message) -> tuple[Message, RecallHandle | None]:
        """The message as it is stored (in a system topic when delayed) and, for a timer
        message, the handle that recalls it. Raises DelayRefused."""
        if is_system_topic(msg.topic):
            raise DelayRefused("topic", f"{msg.topic} is a system topic: send with a delay instead of to it")
        if PROP_TIMER_DEL_UNIQKEY in msg.properties:
            raise DelayRefused(PROP_TIMER_DEL_UNIQKEY, "is the store's own (a recall marker): recall with the send's recall handle")
        props = dict(msg.properties)
        if PROP_DELAY in props and _int_property(props, PROP_DELAY) > 0:  # a level wins over a timer (HookUtils.checkIfTimerMessage)
            for k in _TIMER_PROPS:
                props.pop(k, None)
            return self._level(msg, props), None
        if any(k in props for k in _TIMER_PROPS):
            return self._timer(msg, props)
        if PROP_DELAY in props:
            return self._level(msg, props), None
        return msg, None

    def _timer(self, msg: Message, props: dict[str, str]) -> tuple[Message, RecallHandle | None]:
        now = self.now_ms()
        if PROP_TIMER_DELIVER_MS in props:
            name = PROP_TIMER_DELIVER_MS
            deliver = _int_property(props, name)
        elif PROP_TIMER_DELAY_MS in props:
            name = PROP_TIMER_DELAY_MS
            deliver = now + _int_property(props, name)
        else:
            name = PROP_TIMER_DELAY_SEC
            deliver = now + _int_property(props, name) * 1000
        for k in (*_TIMER_PROPS, PROP_DELAY):
            props.pop(k, None)
        if deliver <= now:  # its time has come: an ordinary message
            return replace(msg, properties=props), None
        limit = self.settings().timerMaxDelaySec
        if deliver - now > limit * 1000:
            raise DelayRefused(name, f"asks for delivery {(deliver - now) / 1000:.0f} s from now; timerMaxDelaySec allows {limit} s")
        uniq = props.get(PROP_UNIQ_KEY) or uuid.uuid4().hex.upper()
        props.update(
            {PROP_UNIQ_KEY: uniq, PROP_TIMER_DELIVER_MS: str(deliver), PROP_REAL_TOPIC: msg.topic, PROP_REAL_QID: str(msg.queue_id)}
        )
        return replace(msg, topic=TIMER_TOPIC, queue_id=0, properties=props), RecallHandle(msg.topic, deliver, uniq)

    def _level(self, msg: Message, props: dict[str, str]) -> Message:
        level = _int_property(props, PROP_DELAY)
        if level <= 0:
            del props[PROP_DELAY]
            return replace(msg, properties=props)
        levels = self.settings().delay_levels_ms
        level = min(level, len(levels))
        uniq = props.get(PROP_UNIQ_KEY) or uuid.uuid4().hex.upper()  # (the id its send result names)
        props.update({PROP_DELAY: str(level), PROP_REAL_TOPIC: msg.topic, PROP_REAL_QID: str(msg.queue_id), PROP_UNIQ_KEY: uniq})
        return replace(msg, topic=SCHEDULE_TOPIC, queue_id=level - 1, properties=props)
