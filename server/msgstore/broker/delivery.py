"""Putting a due message back on its real topic and queue (RocketMQ's ``messageTimeup`` and
the timer's ``convertMessage``): same body, flag, born time and host, keys, tags and UNIQ_KEY;
the scheduling properties gone, ``TIMER_OUT_MS`` added for a timer message."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..record.codec import Message, StoredMessage
from ..store import MessageStore, PutStatus
from .system_topics import PROP_REAL_QID, PROP_REAL_TOPIC, SCHEDULING_PROPERTIES

log = logging.getLogger(__name__)


def ensure_topic(store: MessageStore, topic: str, queues: int) -> None:
    """A system topic exists with at least ``queues`` queues (created on first use, so that a
    node that never delays a message lists none of them)."""
    tc = store.topics.get(topic)
    if tc is None or tc.write_queue_nums < queues:
        store.create_topic(topic, queues)


def restored(stored: StoredMessage, extra: dict[str, str] | None = None) -> Message | None:
    """The message as its producer meant it, None when it names no real topic (not ours)."""
    props = stored.properties
    topic = props.get(PROP_REAL_TOPIC)
    try:
        qid = int(props.get(PROP_REAL_QID, ""))
    except ValueError:
        return None
    if not topic:
        return None
    out = {k: v for k, v in props.items() if k not in SCHEDULING_PROPERTIES}
    if extra:
        out.update(extra)
    return Message(
        topic,
        bytes(stored.body),
        qid,
        stored.flag,
        out,
        stored.born_timestamp,
        stored.born_host,
        reconsume_times=stored.reconsume_times,
    )


def deliver(store: MessageStore, messages: Sequence[Message]) -> list[bool]:
    """Put every message on its real queue, one batch per queue; True for each one done. A
    message its queue refuses for good (topic deleted, queue out of range, too large) is logged
    and counted as done, so one bad message never stops the others; once the store refuses
    writes for now (full, fenced, stopping), that batch and every later one stay to do."""
    by_queue: dict[tuple[str, int], list[int]] = {}
    for i, m in enumerate(messages):
        by_queue.setdefault((m.topic, m.queue_id), []).append(i)
    done = [False] * len(messages)
    batches = list(by_queue.items())
    while batches:
        (topic, qid), idx = batches.pop(0)
        res = store.put_messages(topic, qid, [messages[i] for i in idx])
        if res.status.stored:
            pass
        elif res.status in (PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED) and len(idx) > 1:
            batches[:0] = [((topic, qid), [i]) for i in idx]  # one bad message refuses the batch: each on its own
            continue
        elif res.status in (PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED):
            log.error("%d delayed message(s) for %s/%d cannot be delivered and are dropped: %s", len(idx), topic, qid, res.reason)
        else:
            log.warning("delayed messages wait: %s/%d refused them (%s %s)", topic, qid, res.status.name, res.reason)
            break
        for i in idx:
            done[i] = True
    return done
