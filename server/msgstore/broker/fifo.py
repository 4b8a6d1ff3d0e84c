"""FIFO message groups for message-level consumption (RocketMQ 5's FIFO consumer groups): a
message group (a business key, the ``__SHARDINGKEY`` property, which also put all its messages
on one queue) is delivered one message at a time and in queue order: its next message only
after the previous one was acknowledged or finished its deliveries (set aside in the DLQ);
other message groups on the same queue go on meanwhile, up to ``SCAN_LIMIT`` messages past
the group's position. Messages without a group are not ordered.

Unlike an ordinary group, a FIFO group's position in a queue is its first message not yet
finished, and a message whose invisibility lapses comes back from the queue itself (at its
place, after the group's backoff), never through the retry topic, so nothing of its group can
overtake it. What is finished past the position and what waits out a backoff (with its
delivery count) is saved with the pop progress (``config/popCheckpoint``, taken with it, so
both agree); what is in flight is known again from the revive log's checkpoints. A lapse of a
checkpoint that is no longer the message's latest delivery (replayed after a restart) changes
nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..record.codec import StoredMessage
from ..record.selector import Selector
from ..store import GetStatus, MessageStore

PROP_MESSAGE_GROUP = "__SHARDINGKEY"  # RocketMQ's property for a FIFO message's group
SCAN_LIMIT = 4096  # queue offsets looked at per receive and queue past the position


def message_group(m: StoredMessage) -> str:
    return m.properties.get(PROP_MESSAGE_GROUP, "")


@dataclass
class FifoQueue:
    position: int  # the first offset not finished
    finished: set[int] = field(default_factory=set)  # finished offsets past the position
    inflight: dict[int, tuple[str, int]] = field(default_factory=dict)  # offset → (message group, its checkpoint)
    attempts: dict[int, int] = field(default_factory=dict)  # offset → deliveries so far (not finished)
    not_before: dict[int, int] = field(default_factory=dict)  # a lapsed offset → when it may come back
    lapsed_group: dict[int, str] = field(default_factory=dict)  # a lapsed offset → its message group
    idle: tuple[int, int] | None = None  # (queue end, version) when a look found nothing to give
    version: int = 0  # moved by every change: a look that found nothing is worth repeating


class FifoQueues:
    """Every FIFO group's state in the queues it receives from (call with the pop lock held)."""

    def __init__(self, store: MessageStore, on_change: Callable[[str, int], None] = lambda topic, queue_id: None):
        """``on_change``: a queue's group may have something to give now (a finish, a lapse):
        long polls on it look again."""
        self.store = store
        self.on_change = on_change
        self.queues: dict[tuple[str, str, int], FifoQueue] = {}

    def state(self, group: str, topic: str, queue_id: int) -> FifoQueue:
        key = (group, topic, queue_id)
        st = self.queues.get(key)
        if st is None:
            committed = self.store.query_offset(group, topic, queue_id)
            low = self.store.min_offset(topic, queue_id)
            st = self.queues[key] = FifoQueue(max(committed, low) if committed >= 0 else low)
        return st

    def forget(self, group: str) -> None:
        """The group is no longer FIFO (or is again): its state starts over from its position."""
        for key in [k for k in self.queues if k[0] == group]:
            del self.queues[key]

    # ------------------------------------------------------------------ picking

    def pick(
        self, group: str, topic: str, queue_id: int, n: int, now_ms: int, tag_filter: str | Selector | None = None
    ) -> list[tuple[StoredMessage, int]]:
        """Up to ``n`` messages (with their delivery number) that may go now: in queue order,
        one per message group, none of a group with an earlier message unfinished. Offsets
        the store skips (filtered out by tags, filler units, records gone) are finished."""
        st = self.state(group, topic, queue_id)
        store = self.store
        end = store.max_offset(topic, queue_id)
        if st.idle == (end, st.version) and not any(t <= now_ms for t in st.not_before.values()):
            return []  # nothing changed since a look found nothing
        before = st.position
        busy = {g for g, _ck in st.inflight.values() if g}
        # where each group's message in flight (or waiting to come back) is: a message of the
        # group before it was necessarily finished (a restart forgot it): it never goes again
        held = {g: o for o, (g, _ck) in st.inflight.items() if g}
        held.update({g: o for o, g in st.lapsed_group.items() if g and o < held.get(g, o + 1)})
        # a group whose message waits out its backoff stays blocked even if the store no longer
        # returns that message (a tag filter now excludes it, or it was cleaned away)
        blocked = {g for o, g in st.lapsed_group.items() if g and st.not_before.get(o, 0) > now_ms}
        out: list[tuple[StoredMessage, int]] = []
        at = st.position
        limit = at + SCAN_LIMIT
        while len(out) < n and at < min(end, limit):
            res = store.get_message(None, topic, queue_id, at, max_msgs=min(256, limit - at), tag_filter=tag_filter)
            try:
                msgs = res.messages() if res.status is GetStatus.FOUND else []
                next_offset = res.next_offset
            finally:
                res.release()
            if next_offset <= at:
                break
            returned = {m.queue_offset for m in msgs}
            for gap in range(at, next_offset):  # skipped by the store: nothing to deliver there
                waiting = st.not_before.get(gap)
                if gap not in returned and gap not in st.inflight and (waiting is None or waiting <= now_ms):
                    self._finish(st, gap)  # (a lapsed one the store skips once its time has come: filtered out, or gone)
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
            at = next_offset if len(out) < n else (msgs[-1].queue_offset + 1 if msgs else next_offset)
        if st.position != before:
            self.store.commit_offset(group, topic, queue_id, st.position, durable=False)
        st.idle = (end, st.version) if not out else None
        return out

    # ------------------------------------------------------------------ what happens to a delivery

    def delivered(self, group: str, topic: str, queue_id: int, offset: int, mg: str, attempt: int, checkpoint: int) -> None:
        st = self.state(group, topic, queue_id)
        if offset < st.position or offset in st.finished:
            return  # (a replayed checkpoint of a message finished since)
        st.inflight[offset] = (mg, checkpoint)
        st.attempts[offset] = attempt
        st.not_before.pop(offset, None)
        st.lapsed_group.pop(offset, None)
        st.version += 1

    def finished(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Acknowledged, or set aside after its last delivery: its group's next may go."""
        st = self.state(group, topic, queue_id)
        before = st.position
        self._finish(st, offset)
        if st.position != before:
            self.store.commit_offset(group, topic, queue_id, st.position, durable=False)
        self.on_change(topic, queue_id)

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
        st.version += 1

    def lapsed(self, group: str, topic: str, queue_id: int, offset: int, checkpoint: int, not_before_ms: int) -> bool:
        """Not acknowledged in time: it comes back at its place once its backoff is over.
        False when ``checkpoint`` is not the message's latest delivery (nothing changes)."""
        st = self.state(group, topic, queue_id)
        current = st.inflight.get(offset)
        if current is None or current[1] != checkpoint:
            return False
        del st.inflight[offset]
        st.lapsed_group[offset] = current[0]
        st.not_before[offset] = not_before_ms
        st.version += 1
        self.on_change(topic, queue_id)
        return True

    def attempts_of(self, group: str, topic: str, queue_id: int, offset: int) -> int:
        return self.state(group, topic, queue_id).attempts.get(offset, 1)

    def next_due(self, now_ms: int) -> int | None:
        """ms until the earliest lapsed message may come back (its group's consumers wait on it)."""
        times = [t for st in self.queues.values() for t in st.not_before.values() if t > now_ms]  # (past ones: a receive takes them)
        return min(times) - now_ms if times else None

    def waiting_offsets(self) -> list[tuple[str, int, int]]:
        """(topic, queue, offset) of every message waiting out a backoff (retention keeps them)."""
        return [(t, q, o) for (_g, t, q), st in self.queues.items() for o in st.not_before]

    # ------------------------------------------------------------------ saved with the pop progress

    def encode(self) -> list[list[Any]]:
        return [
            [
                g,
                t,
                q,
                st.position,
                sorted(st.finished),
                [[o, st.not_before[o], st.lapsed_group.get(o, ""), st.attempts.get(o, 1)] for o in sorted(st.not_before)],
            ]
            for (g, t, q), st in sorted(self.queues.items())
            if st.finished or st.not_before
        ]

    def decode(self, doc: list[list[Any]]) -> None:
        for g, t, q, position, finished, lapsed in doc:
            st = self.state(str(g), str(t), int(q))
            if int(position) > st.position:
                st.position = int(position)
            st.finished.update(int(o) for o in finished if int(o) >= st.position)
            for o, nb, mg, n in lapsed:
                if int(o) < st.position:
                    continue  # (finished since: its positions were saved after)
                st.not_before[int(o)] = int(nb)
                st.lapsed_group[int(o)] = str(mg)
                st.attempts[int(o)] = int(n)
            while st.position in st.finished:
                st.finished.discard(st.position)
                st.position += 1
