"""Message-level consumption (RocketMQ 5's pop/ack, the model of SQS and Kafka's share groups):
a member of a consumer group receives messages that then stay invisible to the group for a
while; it acknowledges each one, changes its invisibility, or lets it lapse, and a message not
acknowledged in time comes back with its delivery count one higher, after the group's backoff.

- **Receive** takes messages from the group's position in each queue of the topic (and first
  from the group's retry topic), writes one checkpoint per queue to the revive log
  (revive_log.py) and moves the group's position past them: several receivers of one group
  get different messages. A group's first receive starts at a queue's first message.
- **Ack**, **change invisibility** and **nack** (invisible for the group's backoff) write
  ack records (and a new checkpoint) to the revive log.
- **Revive**: a checkpoint whose time is up puts each message still unacknowledged on
  ``%RETRY%<group>_<topic>`` (RocketMQ 5's pop retry topic), due at once, with its delivery
  count in the record's reconsume times; after the group's
  ``retryMaxTimes`` deliveries it goes to ``%DLQ%<group>`` instead, with its original topic and
  id in ``DLQ_ORIGIN_TOPIC`` / ``DLQ_ORIGIN_MESSAGE_ID``.

What is in flight is rebuilt from the revive log (replicated like every record) from its first
checkpoint not finished, kept in ``config/popCheckpoint`` (copied to followers every second): a
restart or a failover loses no message and brings back only what was not acknowledged, or
acknowledged in the last second before a failover (at-least-once).
"""

from __future__ import annotations

import heapq
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ..record.codec import Message, StoredMessage
from ..record.receipt import Receipt
from ..record.selector import Selector
from ..store import GetStatus, MessageStore, PutStatus
from ..store.layout import POP_CHECKPOINT
from ..store.metadata import read_json
from .delivery import ensure_topic
from .fifo import FifoQueues, message_group
from .progress import DoneOffsets
from .progress_file import ProgressFile
from .queue_reading import batches_from, phy_of, read_one
from .retry_policy import RetryPolicy
from .revive_log import AckRecord, Checkpoint, ack_record, parse
from .scheduling import Scheduler
from .system_topics import DLQ_PREFIX, PROP_TIMER_DELAY_MS, PROP_UNIQ_KEY, RETRY_PREFIX, REVIVE_TOPIC

log = logging.getLogger(__name__)

FILE = POP_CHECKPOINT
PROP_RETRY_TOPIC = "RETRY_TOPIC"
PROP_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROP_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROP_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
BATCH = 256
ACKS_REMEMBERED = 65_536  # recent acknowledgements an ack sent again is checked against
REVIVE_ROUND = 64  # checkpoints brought back per lock hold
FILTER_SCAN_ROUNDS = 4  # reads of one queue per receive while a filter passes over everything (800 units each; under the lock)
RETRY_S = 5  # a checkpoint that could not be brought back is tried again this much later
PROP_RETRY_GROUP = "RETRY_GROUP"  # ours: the group a retry belongs to (its topic's name may be another group's too)


def retry_topic(group: str, topic: str) -> str:
    return f"{RETRY_PREFIX}{group}_{topic}"


def dlq_topic(group: str) -> str:
    return f"{DLQ_PREFIX}{group}"


class ReceiptExpired(Exception):
    """The delivery a receipt names is over: acknowledged, or its message came back (or is
    coming back) as a new delivery."""


class PopUnavailable(Exception):
    """The store takes no write now (full, fenced): nothing was received or acknowledged."""


@dataclass
class Delivery:
    message: StoredMessage
    topic: str  # the topic the producer sent it to (a retry's original topic)
    attempt: int
    receipt: str
    invisible_until: int


class PopService(ProgressFile):
    def __init__(
        self,
        store: MessageStore,
        scheduler: Scheduler,
        node: Callable[[], str],
        may_write: Callable[[], bool] = lambda: True,
        on_deadline: Callable[[], None] = lambda: None,
    ):
        """``may_write``: checked before every record (a master that may not acknowledge client
        writes writes no checkpoint or ack either); ``on_deadline``: a delivery's time is now
        earlier than any before (the revive loop looks again)."""
        self.store = store
        self.scheduler = scheduler
        self.node = node  # the replica group (or lone node) receipts name
        self.may_write = may_write
        self.on_deadline = on_deadline
        self._turn = 0  # where the next receive starts among the queues (none starves)
        self.on_queue_change: Callable[[str, int], None] = lambda topic, queue_id: None  # (long polls look again)
        self.fifo = FifoQueues(store, lambda t, q: self.on_queue_change(t, q))
        self.path = os.path.join(store.layout.config_dir, FILE)
        self.lock = threading.RLock()
        self.inflight: dict[int, Checkpoint] = {}  # revive-log offset → checkpoint not finished
        self.heap: list[tuple[int, int]] = []  # (deadline, checkpoint offset)
        self.done = DoneOffsets()
        # (checkpoint, offset) of the latest acknowledgements, from this run and the log read
        # since: an ack sent again (its answer lost with a master that died) is answered as done
        self.acked_recently: OrderedDict[tuple[int, int], None] = OrderedDict()
        self.read_offset = 0
        self.dirty = False
        self.revived = 0
        self.dead_lettered = 0

    # ------------------------------------------------------------------ progress

    def load(self) -> None:
        doc = read_json(self.path, strict=False)  # (its own: rebuilt when unreadable)
        with self.lock:
            self.done = DoneOffsets.decode(doc.get("progress", {})) if isinstance(doc, dict) else DoneOffsets()
            self.inflight, self.heap = {}, []
            self.fifo = FifoQueues(self.store, lambda t, q: self.on_queue_change(t, q))
            if isinstance(doc, dict):
                self.fifo.decode(doc.get("fifo", []))
            self.read_offset = self.done.below
            self.dirty = False

    def state_json(self) -> str:
        with self.lock:
            return json.dumps({"version": 1, "progress": self.done.encode(), "fifo": self.fifo.encode()}, separators=(",", ":"))

    def _finish(self, offset: int) -> None:
        self.done.add(offset)
        self.dirty = True

    def lowest_pending_phy(self) -> int | None:
        """The oldest message still in flight keeps its segment (and the revive log's)."""
        with self.lock:
            first = self.done.first_pending()
        log_phy = phy_of(self.store, REVIVE_TOPIC, 0, first)
        lows = [log_phy] if log_phy is not None else []
        with self.lock:
            cks = list(self.inflight.values())
            waiting = self.fifo.waiting_offsets()
        for t, qid, o in waiting:  # FIFO messages waiting out a backoff come back from their queue
            wq = self.store.consume_queue(t, qid)
            u = wq.unit(o) if wq is not None else None
            if u is not None:
                lows.append(u[0])
        for ck in cks:
            q = self.store.consume_queue(ck.topic, ck.queue_id)
            u = q.unit(min(ck.pending)) if q is not None and ck.pending else None
            if u is not None:
                lows.append(u[0])
        return min(lows) if lows else None

    def inflight_counts(self) -> dict[str, int]:
        """Messages in flight per consumer group."""
        out: dict[str, int] = {}
        with self.lock:
            for ck in self.inflight.values():
                out[ck.group] = out.get(ck.group, 0) + len(ck.pending)
        return out

    # ------------------------------------------------------------------ the revive log

    def _write(self, records: list[Message]) -> int:
        """Append records to the revive log; the queue offset of the first."""
        if not self.may_write():
            raise PopUnavailable("this master may not take writes now (fenced, without its lease or quorum, or learning its epoch)")
        ensure_topic(self.store, REVIVE_TOPIC, 1)
        res = self.store.put_messages(REVIVE_TOPIC, 0, records)
        if not res.status.stored:
            raise PopUnavailable(f"{res.status.name} {res.reason}")
        return res.queue_offset

    def take_new(self) -> None:
        """Read the revive log's records not seen yet: checkpoints of another run (a restart, a
        promotion) become in flight, acks finish what they name."""
        for stored, after in batches_from(self.store, REVIVE_TOPIC, 0, self.read_offset, BATCH):
            with self.lock:
                for m in stored:
                    off = m.queue_offset
                    rec = parse(m.properties.get("TAGS"), bytes(m.body))
                    if isinstance(rec, Checkpoint):
                        if rec.fifo is None:
                            self._position_past(rec)
                        if off not in self.done and off not in self.inflight:
                            self.inflight[off] = rec
                            heapq.heappush(self.heap, (rec.deadline, off))
                            for o, (mg, n) in (rec.fifo or {}).items():
                                self.fifo.delivered(rec.group, rec.topic, rec.queue_id, o, mg, n, off)
                        continue
                    if isinstance(rec, AckRecord):
                        for ck_off, o in rec.acks:
                            self._acked(ck_off, o, finished=not rec.moved)
                    self._finish(off)
                self.read_offset = after

    def _position_past(self, ck: Checkpoint) -> None:
        """The group's position is past every message a checkpoint delivered: the log says so
        even when the position's own (lazy) save was lost in a crash."""
        store = self.store
        end = max(ck.offsets) + 1
        if store.query_offset(ck.group, ck.topic, ck.queue_id) < end:
            store.commit_offset(ck.group, ck.topic, ck.queue_id, end, durable=False)

    def _track(self, ck_off: int, ck: Checkpoint) -> None:
        sooner = not self.heap or ck.deadline < self.heap[0][0]
        self.inflight[ck_off] = ck
        heapq.heappush(self.heap, (ck.deadline, ck_off))
        if sooner:
            self.on_deadline()

    def _acked(self, ck_off: int, offset: int, finished: bool = True) -> None:
        """``finished``: acknowledged (not moved to another checkpoint): a FIFO group's next may go."""
        if finished:
            self.acked_recently[(ck_off, offset)] = None
            if len(self.acked_recently) > ACKS_REMEMBERED:
                self.acked_recently.popitem(last=False)
        ck = self.inflight.get(ck_off)
        if ck is None:
            return
        if ck.fifo is not None and finished and offset in ck.pending:
            self.fifo.finished(ck.group, ck.topic, ck.queue_id, offset)
        ck.pending.discard(offset)
        if not ck.pending:
            del self.inflight[ck_off]
            self._finish(ck_off)

    # ------------------------------------------------------------------ receive

    def receive(
        self, group: str, topic: str, max_messages: int, invisible_ms: int, now_ms: int, tag_filter: str | Selector | None = None
    ) -> list[Delivery]:
        """Up to ``max_messages`` for ``group`` from ``topic`` (retries first), invisible to
        the group until ``now_ms + invisible_ms``. Raises PopUnavailable."""
        store = self.store
        self.take_new()  # (after a restart or promotion: the log's checkpoints first, and the positions they repair)
        self.store.groups.ensure(group)
        deadline = now_ms + invisible_ms
        if is_fifo(store.groups.groups.get(group)):
            return self._receive_fifo(group, topic, max_messages, deadline, now_ms, tag_filter)
        retry = retry_topic(group, topic)
        queues = [(topic, q) for q in store.queues_of(topic)] + [(retry, 0)]
        out: list[Delivery] = []
        with self.lock:
            self._turn += 1
            turn = self._turn % len(queues)
            for t, q in queues[turn:] + queues[:turn]:
                if len(out) >= max_messages:
                    break
                if store.consume_queue(t, q) is None:
                    continue
                committed = store.query_offset(group, t, q)
                start = max(committed, store.min_offset(t, q)) if committed >= 0 else store.min_offset(t, q)
                if start >= store.max_offset(t, q):
                    continue
                got, next_offset = [], start
                for _ in range(FILTER_SCAN_ROUNDS):  # (a filter that matches little: read on past what it passed over)
                    res = store.get_message(group, t, q, next_offset, max_msgs=max_messages - len(out), tag_filter=tag_filter)
                    try:
                        got = res.messages() if res.status is GetStatus.FOUND else []
                        moved, next_offset = res.next_offset > next_offset, max(res.next_offset, next_offset)
                    finally:
                        res.release()
                    if got or tag_filter is None or not moved or next_offset >= store.max_offset(t, q):
                        break
                if t == retry:  # a retry topic's name can be another group's too: only this group's, of this topic
                    got = [
                        m for m in got if m.properties.get(PROP_RETRY_TOPIC) == topic and m.properties.get(PROP_RETRY_GROUP, group) == group
                    ]
                if got:
                    offsets = [m.queue_offset for m in got]
                    ck = Checkpoint(group, t, q, offsets, deadline, set(offsets))
                    ck_off = self._write([ck.record()])
                    self._track(ck_off, ck)
                    node = self.node()
                    for m in got:
                        attempt = m.reconsume_times + 1
                        r = Receipt(group, t, q, m.queue_offset, ck_off, attempt, node).encode()
                        out.append(Delivery(m, topic, attempt, r, deadline))
                if next_offset > start:  # past what it returned, and past what the tag filter skipped
                    store.commit_offset(group, t, q, next_offset, durable=False)
        return out

    def _receive_fifo(
        self, group: str, topic: str, max_messages: int, deadline: int, now_ms: int, tag_filter: str | Selector | None
    ) -> list[Delivery]:
        """A FIFO group: from each queue, messages of message groups with nothing in flight (fifo.py)."""
        store = self.store
        queues = store.queues_of(topic)
        out: list[Delivery] = []
        with self.lock:
            self._turn += 1
            turn = self._turn % max(1, len(queues))
            for q in queues[turn:] + queues[:turn]:
                if len(out) >= max_messages:
                    break
                picked = self.fifo.pick(group, topic, q, max_messages - len(out), now_ms, tag_filter)
                if not picked:
                    continue
                offsets = [m.queue_offset for m, _n in picked]
                fifo = {m.queue_offset: (message_group(m), n) for m, n in picked}
                ck = Checkpoint(group, topic, q, offsets, deadline, set(offsets), fifo)
                ck_off = self._write([ck.record()])
                self._track(ck_off, ck)
                node = self.node()
                for m, n in picked:
                    self.fifo.delivered(group, topic, q, m.queue_offset, message_group(m), n, ck_off)
                    r = Receipt(group, topic, q, m.queue_offset, ck_off, n, node).encode()
                    out.append(Delivery(m, topic, n, r, deadline))
        return out

    def fifo_next_due(self, now_ms: int) -> int | None:
        """ms until a lapsed FIFO message may be received again (a long poll waits no longer)."""
        with self.lock:
            return self.fifo.next_due(now_ms)

    # ------------------------------------------------------------------ ack and invisibility

    def _check(self, receipt: Receipt) -> Checkpoint:
        ck = self.inflight.get(receipt.checkpoint)
        if (
            ck is None
            or receipt.offset not in ck.pending
            or (ck.group, ck.topic, ck.queue_id) != (receipt.group, receipt.topic, receipt.queue_id)
        ):
            raise ReceiptExpired("the delivery is over: the message was acknowledged, or it came back as a new delivery")
        return ck

    def ack(self, receipts: list[Receipt]) -> list[str]:
        """Acknowledge deliveries; per receipt '' or why it could not be (expired)."""
        with self.lock:
            errors, acks = [], []
            for r in receipts:
                try:
                    self._check(r)
                    acks.append((r.checkpoint, r.offset))
                    errors.append("")
                except ReceiptExpired as e:
                    # acknowledged already: saying so again is no error, as in RocketMQ (an ack
                    # whose answer was lost is sent again, through an access point to a new master)
                    errors.append("" if (r.checkpoint, r.offset) in self.acked_recently else str(e))
            if acks:
                self._write([ack_record(acks)])
                for ck_off, o in acks:
                    self._acked(ck_off, o)
            return errors

    def dead_letter(self, receipt: Receipt) -> None:
        """The consumer gives up on a delivery (RocketMQ 5's ForwardMessageToDeadLetterQueue,
        which a FIFO push consumer sends after its last local attempt): the message goes to the
        group's DLQ now and the delivery is acknowledged (a FIFO group's next may go). Raises
        ReceiptExpired, or PopUnavailable when the DLQ copy cannot be stored."""
        with self.lock:
            ck = self._check(receipt)
            if not self.may_write():
                raise PopUnavailable("this master may not take writes now (fenced, without its lease or quorum, or learning its epoch)")
            m = read_one(self.store, ck.topic, ck.queue_id, receipt.offset)
            if m is not None:
                original = m.properties.get(PROP_RETRY_TOPIC, ck.topic) if ck.topic.startswith(RETRY_PREFIX) else ck.topic
                if not self._set_aside(ck.group, original, m, receipt.attempt):
                    raise PopUnavailable(f"the dead-letter copy could not be stored in {dlq_topic(ck.group)}")
            self._write([ack_record([(receipt.checkpoint, receipt.offset)])])
            self._acked(receipt.checkpoint, receipt.offset)

    def _set_aside(self, group: str, original: str, m: StoredMessage, deliveries: int) -> bool:
        """Put ``m`` on the group's DLQ; False when the store refused for now (try again). A
        message the DLQ can never take is logged and dropped (True)."""
        origin_id = m.properties.get(PROP_ORIGIN_MESSAGE_ID) or m.properties.get(PROP_UNIQ_KEY) or m.msg_id
        props = {k: v for k, v in m.properties.items() if k not in (PROP_TIMER_DELAY_MS, "TIMER_OUT_MS")}
        props.update({PROP_DLQ_ORIGIN_TOPIC: original, PROP_DLQ_ORIGIN_MESSAGE_ID: origin_id})
        target = dlq_topic(group)
        ensure_topic(self.store, target, 1)
        msg = Message(target, bytes(m.body), 0, m.flag, props, m.born_timestamp, m.born_host, reconsume_times=deliveries)
        put = self.store.put_messages(target, 0, [msg])
        if not put.status.stored and put.status not in (PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED):
            return False
        if not put.status.stored:
            log.error("group %s: message %s cannot be set aside (%s) and is dropped", group, origin_id, put.reason)
        else:
            self.dead_lettered += 1
            log.warning("group %s: message %s of %s set aside in %s after %d deliveries", group, origin_id, original, target, deliveries)
        return True

    def change_invisible(self, receipt: Receipt, invisible_ms: int, now_ms: int) -> tuple[str, int]:
        """The delivery stays invisible until ``now_ms + invisible_ms`` instead, and comes back
        then (a nack is the group's backoff, computed by the caller); its new receipt and that time."""
        with self.lock:
            old = self._check(receipt)
            deadline = now_ms + invisible_ms
            fifo = {receipt.offset: old.fifo[receipt.offset]} if old.fifo is not None and receipt.offset in old.fifo else None
            ck = Checkpoint(old.group, old.topic, old.queue_id, [receipt.offset], deadline, {receipt.offset}, fifo)
            first = self._write([ack_record([(receipt.checkpoint, receipt.offset)], moved=True), ck.record()])
            self._acked(receipt.checkpoint, receipt.offset, finished=False)
            ck_off = first + 1
            self._track(ck_off, ck)
            if fifo is not None:  # the message's latest delivery is the new checkpoint now
                mg, n = fifo[receipt.offset]
                self.fifo.delivered(old.group, old.topic, old.queue_id, receipt.offset, mg, n, ck_off)
            return Receipt(old.group, old.topic, old.queue_id, receipt.offset, ck_off, receipt.attempt, self.node()).encode(), deadline

    # ------------------------------------------------------------------ revive

    def run_due(self, now_ms: int) -> int | None:
        """Bring back what is due; ms until the next checkpoint's time (None: none)."""
        self.take_new()
        for _ in range(REVIVE_ROUND):  # a round at a time: receives and acks take the lock in between
            with self.lock:
                if not self.heap or self.heap[0][0] > now_ms:
                    break
                deadline, ck_off = heapq.heappop(self.heap)
                ck = self.inflight.get(ck_off)
                if ck is None:
                    continue
                try:
                    revived = self._revive(ck, now_ms, ck_off)
                except Exception:
                    log.exception("group %s: bringing back %s/%d failed; trying again in %d s", ck.group, ck.topic, ck.queue_id, RETRY_S)
                    revived = False
                if not revived:  # later, behind the others due now: one that cannot be put never blocks the rest
                    ck.deadline = now_ms + RETRY_S * 1000
                    heapq.heappush(self.heap, (ck.deadline, ck_off))
                    continue
                del self.inflight[ck_off]
                self._finish(ck_off)
        with self.lock:
            return max(0, self.heap[0][0] - now_ms) if self.heap else None

    def _revive(self, ck: Checkpoint, now_ms: int, ck_off: int = -1) -> bool:
        """Put every message of ``ck`` still pending on the retry topic (or the DLQ); False when
        the store refused (the checkpoint is tried again)."""
        store = self.store
        policy = RetryPolicy.of_group(store.groups.groups.get(ck.group))
        if ck.fifo is not None:
            return self._revive_fifo(ck, ck_off, policy, now_ms)
        for off in sorted(ck.pending):
            found = read_one(store, ck.topic, ck.queue_id, off)
            if found is None:
                log.error("%s/%d offset %d of group %s is gone (retention): it cannot come back", ck.topic, ck.queue_id, off, ck.group)
                ck.pending.discard(off)
                continue
            m = found
            deliveries = m.reconsume_times + 1
            original = m.properties.get(PROP_RETRY_TOPIC, ck.topic) if ck.topic.startswith("%RETRY%") else ck.topic
            origin_id = m.properties.get(PROP_ORIGIN_MESSAGE_ID) or m.properties.get(PROP_UNIQ_KEY) or m.msg_id
            props = {k: v for k, v in m.properties.items() if k not in (PROP_TIMER_DELAY_MS, "TIMER_OUT_MS")}
            props.update({PROP_RETRY_TOPIC: original, PROP_ORIGIN_MESSAGE_ID: origin_id, PROP_RETRY_GROUP: ck.group})
            if deliveries >= policy.max_deliveries:
                target = dlq_topic(ck.group)
                props.update({PROP_DLQ_ORIGIN_TOPIC: original, PROP_DLQ_ORIGIN_MESSAGE_ID: origin_id})
            else:  # back now: its invisible time was the wait (RocketMQ 5: a SimpleConsumer's retry interval)
                target = retry_topic(ck.group, original)
            ensure_topic(store, target, 1)
            msg = Message(target, bytes(m.body), 0, m.flag, props, m.born_timestamp, m.born_host, reconsume_times=deliveries)
            res_put = store.put_messages(msg.topic, msg.queue_id, [msg])
            if res_put.status in (PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED):
                log.error(
                    "group %s: message %s of %s cannot come back (%s: %s) and is dropped",
                    ck.group,
                    origin_id,
                    original,
                    res_put.status.name,
                    res_put.reason,
                )
                ck.pending.discard(off)
                continue
            if not res_put.status.stored:
                log.warning("group %s: bringing back %s/%d offset %d waits: %s", ck.group, ck.topic, ck.queue_id, off, res_put.reason)
                return False
            ck.pending.discard(off)
            if target == dlq_topic(ck.group):
                self.dead_lettered += 1
                log.warning(
                    "group %s: message %s of %s set aside in %s after %d deliveries", ck.group, origin_id, original, target, deliveries
                )
            else:
                self.revived += 1
        return True

    def _revive_fifo(self, ck: Checkpoint, ck_off: int, policy: RetryPolicy, now_ms: int) -> bool:
        """A FIFO delivery that lapsed comes back at its place after the backoff (nothing of its
        group overtakes it), or, after its last delivery, goes to the DLQ and lets its group on.
        A checkpoint that is not the message's latest delivery (replayed after a restart) is
        only closed."""
        assert ck.fifo is not None
        for off in sorted(ck.pending):
            mg, deliveries = ck.fifo.get(off, ("", 1))
            current = self.fifo.state(ck.group, ck.topic, ck.queue_id).inflight.get(off)
            if current is None or current[1] != ck_off:
                ck.pending.discard(off)
                continue
            if deliveries < policy.max_deliveries:
                self.fifo.lapsed(ck.group, ck.topic, ck.queue_id, off, ck_off, now_ms)  # (its invisible time was the wait)
                ck.pending.discard(off)
                self.revived += 1
                continue
            m_or_none = read_one(self.store, ck.topic, ck.queue_id, off)
            if m_or_none is not None:
                if not self._set_aside(ck.group, ck.topic, m_or_none, deliveries):
                    return False
                log.warning("FIFO group %s: message group %r let on after %d deliveries", ck.group, mg, deliveries)
            self.fifo.finished(ck.group, ck.topic, ck.queue_id, off)
            ck.pending.discard(off)
        return True


def is_fifo(entry: dict[str, object] | None) -> bool:
    """A FIFO consumer group (RocketMQ's subscription group flag ``consumeMessageOrderly``)."""
    return bool(entry and entry.get("consumeMessageOrderly"))
