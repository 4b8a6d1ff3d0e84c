"""FIFO message groups for message-level consumption (RocketMQ 5's FIFO consumer groups): a
message group (a business key, the ``__SHARDINGKEY`` property, which also put all its messages
on one queue) is delivered one message at a time and in queue order: its next message only
after the previous one was acknowledged or finished its deliveries (set aside in the DLQ);
other message groups on the same queue go on meanwhile. Messages without a group are not
ordered.

Unlike an ordinary group, a FIFO group's position in a queue is its first message not yet
finished, and a message whose invisibility lapses comes back from the queue itself (at its
place, after the group's backoff, its delivery count kept with its checkpoint), never through
the retry topic, so nothing of its group can overtake it. After a restart (or a promotion) the
messages past the position that were finished are delivered again, in order (at-least-once);
what is in flight is known again from the revive log's checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..record.codec import StoredMessage
from ..store import GetStatus, MessageStore

PROP_MESSAGE_GROUP = "__SHARDINGKEY"  # RocketMQ's property for a FIFO message's group
SCAN_LIMIT = 4096  # queue offsets looked at per receive and queue (a group blocked far back costs no more)


def message_group(m: StoredMessage) -> str:
    return m.properties.get(PROP_MESSAGE_GROUP, "")


@dataclass
class FifoQueue:
    position: int  # the first offset not finished
    finished: set[int] = field(default_factory=set)  # finished offsets past the position
    inflight: dict[int, str] = field(default_factory=dict)  # offset → its message group
    attempts: dict[int, int] = field(default_factory=dict)  # offset → deliveries so far (not finished)
    not_before: dict[int, int] = field(default_factory=dict)  # a lapsed offset → when it may come back
    lapsed_group: dict[int, str] = field(default_factory=dict)  # a lapsed offset → its message group


class FifoQueues:
    """Every FIFO group's state in the queues it receives from (call with the pop lock held)."""

    def __init__(self, store: MessageStore):
        self.store = store
        self.queues: dict[tuple[str, str, int], FifoQueue] = {}

    def state(self, group: str, topic: str, queue_id: int) -> FifoQueue:
        key = (group, topic, queue_id)
        st = self.queues.get(key)
        if st is None:
            committed = self.store.query_offset(group, topic, queue_id)
            low = self.store.min_offset(topic, queue_id)
            st = self.queues[key] = FifoQueue(max(committed, low) if committed >= 0 else low)
        return st

    def pick(self, group: str, topic: str, queue_id: int, n: int, now_ms: int) -> list[tuple[StoredMessage, int]]:
        """Up to ``n`` messages (with their delivery number) that may go now: in queue order,
        one per message group, none of a group with an earlier message unfinished."""
        st = self.state(group, topic, queue_id)
        store = self.store
        busy = {g for g in st.inflight.values() if g}
        # where each group's message in flight (or waiting to come back) is: a message of the
        # group before it was necessarily finished (a restart forgot it): it never goes again
        held = {g: o for o, g in (*st.inflight.items(), *st.lapsed_group.items()) if g}
        blocked: set[str] = set()
        out: list[tuple[StoredMessage, int]] = []
        at, end = st.position, store.max_offset(topic, queue_id)
        limit = at + SCAN_LIMIT
        while len(out) < n and at < min(end, limit):
            res = store.get_message(None, topic, queue_id, at, max_msgs=min(256, limit - at))
            try:
                msgs = res.messages() if res.status is GetStatus.FOUND else []
                next_offset = res.next_offset
            finally:
                res.release()
            if not msgs:
                if next_offset <= at:
                    break
                for gone in range(at, next_offset):  # cleaned away: nothing to deliver there
                    self._finish(st, gone)
                at = next_offset
                continue
            for m in msgs:
                off, mg = m.queue_offset, message_group(m)
                if off in st.finished or off in st.inflight:
                    continue
                if mg and held.get(mg, off) > off:
                    self._finish(st, off)
                    continue
                if mg and (mg in busy or mg in blocked):
                    blocked.add(mg)  # an earlier message of its group is not finished
                    continue
                if st.not_before.get(off, 0) > now_ms:
                    if mg:
                        blocked.add(mg)  # it comes back first, after its backoff
                    continue
                out.append((m, st.attempts.get(off, 0) + 1))
                if mg:
                    busy.add(mg)
                if len(out) >= n:
                    break
            at = msgs[-1].queue_offset + 1
        return out

    def delivered(self, group: str, topic: str, queue_id: int, offset: int, mg: str, attempt: int) -> None:
        st = self.state(group, topic, queue_id)
        st.inflight[offset] = mg
        st.attempts[offset] = attempt
        st.not_before.pop(offset, None)
        st.lapsed_group.pop(offset, None)

    def finished(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Acknowledged, or set aside after its last delivery: its group's next may go."""
        st = self.state(group, topic, queue_id)
        before = st.position
        self._finish(st, offset)
        if st.position != before:
            self.store.commit_offset(group, topic, queue_id, st.position, durable=False)

    def _finish(self, st: FifoQueue, offset: int) -> None:
        st.inflight.pop(offset, None)
        st.attempts.pop(offset, None)
        st.not_before.pop(offset, None)
        st.lapsed_group.pop(offset, None)
        if offset >= st.position:
            st.finished.add(offset)
        while st.position in st.finished:
            st.finished.discard(st.position)
            st.position += 1

    def lapsed(self, group: str, topic: str, queue_id: int, offset: int, not_before_ms: int) -> None:
        """Not acknowledged in time: it comes back at its place once its backoff is over."""
        st = self.state(group, topic, queue_id)
        st.lapsed_group[offset] = st.inflight.pop(offset, "")
        st.not_before[offset] = not_before_ms

    def attempts(self, group: str, topic: str, queue_id: int, offset: int) -> int:
        return self.state(group, topic, queue_id).attempts.get(offset, 1)

    def next_due(self, now_ms: int) -> int | None:
        """ms until the earliest lapsed message may come back (its group's consumers wait on it)."""
        times = [t for st in self.queues.values() for t in st.not_before.values() if t > now_ms]  # (past ones: a receive takes them)
        return min(times) - now_ms if times else None
