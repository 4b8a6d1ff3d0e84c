"""RocketMQ's names for the system topics and message properties the broker services use, so
that records stay byte-compatible with RocketMQ's (docs/store-format.md §15)."""

from __future__ import annotations

# SCHEDULE_TOPIC: one queue per delay level, queue id = level - 1 (its units hold due times)
from ..store.schedule_units import SCHEDULE_TOPIC as SCHEDULE_TOPIC

TIMER_TOPIC = "rmq_sys_wheel_timer"  # messages with a delivery time, one queue

PROP_DELAY = "DELAY"  # delay level, 1-based
PROP_REAL_TOPIC = "REAL_TOPIC"
PROP_REAL_QID = "REAL_QID"
PROP_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"  # epoch ms
PROP_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROP_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROP_TIMER_OUT_MS = "TIMER_OUT_MS"  # set on a timer message when it is delivered
PROP_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"  # a recall: the timer message with this UNIQ_KEY is not delivered
PROP_UNIQ_KEY = "UNIQ_KEY"

# what a delivered message no longer carries (it is an ordinary message of its real topic)
SCHEDULING_PROPERTIES = (
    PROP_DELAY,
    PROP_REAL_TOPIC,
    PROP_REAL_QID,
    PROP_TIMER_DELIVER_MS,
    PROP_TIMER_DELAY_SEC,
    PROP_TIMER_DELAY_MS,
)

REVIVE_TOPIC = "rmq_sys_REVIVE_LOG"  # pop consumption's checkpoints and acks (revive_log.py)
SYSTEM_TOPICS = (
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    REVIVE_TOPIC,
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
)


RETRY_PREFIX = "%RETRY%"  # a consumer group's redeliveries (pop.py)
DLQ_PREFIX = "%DLQ%"  # a consumer group's dead letters


def is_store_topic(topic: str) -> bool:
    """The store's own topics, its consumer groups' retries and dead letters included (what
    readers of everything, such as the Spark source, leave out unless asked)."""
    return is_system_topic(topic) or topic.startswith((RETRY_PREFIX, DLQ_PREFIX))


SYSTEM_TOPIC_PREFIXES = ("rmq_sys_", "RMQ_SYS_")


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIXES)
