"""Transactional messages (RocketMQ's two-phase send): a half message waits, invisible, in
``RMQ_SYS_TRANS_HALF_TOPIC`` until its producer commits or rolls back (``EndTransaction``); a
half left unresolved for ``transactionTimeOut`` is checked back with a producer of its group
every ``transactionCheckInterval``, at most ``transactionCheckMax`` times, then set aside in
``TRANS_CHECK_MAX_TIME_TOPIC``, as RocketMQ does.

Every resolution is an op record in ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` (tag ``c`` commit, ``r``
rollback, ``x`` set aside; the body names the half's queue offset). A commit writes its op
record *before* the committed message, with the real queue's end at that moment: a start that
finds a commit op whose message is not in its queue from there on puts it then, and one whose
message is there does not, so a commit becomes visible exactly once whatever crashed when.
Which halves are resolved (a bitmap over the half queue, progress.py) and how far the op queue
was read are kept in ``config/transactionCheckpoint``, saved every second; the op records
after that point are read again at start.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..record import codec
from ..record.codec import Message, StoredMessage
from ..store import MessageStore, PutStatus
from ..store.config import StoreConfig
from ..store.layout import TRANSACTION_CHECKPOINT
from ..store.metadata import read_json
from .delivery import ensure_topic, restored
from .progress import DoneOffsets
from .progress_file import ProgressFile
from .queue_reading import phy_of, read_batch, read_one
from .system_topics import PROP_REAL_QID, PROP_REAL_TOPIC, PROP_UNIQ_KEY

log = logging.getLogger(__name__)

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
PROP_TRANSACTION_PREPARED = "TRAN_MSG"  # "true": a half message
PROP_PRODUCER_GROUP = "PGROUP"
PROP_HALF_OFFSET = "TRAN_HALF_OFFSET"  # ours, on a committed message: the half it came from
FILE = TRANSACTION_CHECKPOINT
BATCH = 256
RESOLVED_KEPT = 100_000  # recent outcomes kept, so a late copy of a resolved message is rolled back, not asked about


class TransactionUnknown(Exception):
    """The transaction a handle names is not open here (resolved already, or never seen)."""


class TransactionUnavailable(Exception):
    """The store takes no write now."""


class CommitRefused(Exception):
    """The commit is recorded, but the message's topic refuses it for good (deleted meanwhile,
    queue out of range, grown too large): nothing became visible."""


@dataclass
class Half:
    offset: int  # its queue offset in the half topic
    group: str  # the producer group
    uniq: str
    stored_ms: int
    checks: int = 0
    next_check_ms: int = 0


def is_half(msg: Message) -> bool:
    return msg.properties.get(PROP_TRANSACTION_PREPARED) == "true"


def to_half(msg: Message) -> Message:
    """What a producer's half message is stored as (RocketMQ's parseHalfMessageInner)."""
    props = dict(msg.properties)
    props.update({PROP_REAL_TOPIC: msg.topic, PROP_REAL_QID: str(msg.queue_id)})
    return replace(msg, topic=HALF_TOPIC, queue_id=0, properties=props, sys_flag=msg.sys_flag & ~codec.TRANSACTION_MASK)


class TransactionService(ProgressFile):
    def __init__(self, store: MessageStore, settings: Callable[[], StoreConfig], may_write: Callable[[], bool] = lambda: True):
        self.store = store
        self.settings = settings
        self.may_write = may_write
        self.path = os.path.join(store.layout.config_dir, FILE)
        self.lock = threading.RLock()
        self.done = DoneOffsets()
        self.read_offset = 0  # the half queue: next offset to take in
        self.op_offset = 0  # the op queue: next offset to apply
        self.open: dict[int, Half] = {}  # half queue offset → half not resolved
        self.by_uniq: dict[str, list[int]] = {}  # UNIQ_KEY → its open halves (a retried send stores one twice)
        self.resolved_uniq: collections.OrderedDict[str, str] = collections.OrderedDict()  # recent outcomes: a late copy gets none
        self.next_ready = 0  # no check is due before this (ms)
        self.dirty = False
        self.committed = self.rolled_back = self.set_aside = 0

    # ------------------------------------------------------------------ progress

    def load(self) -> None:
        doc = read_json(self.path, strict=False)  # (its own: rebuilt when unreadable)
        with self.lock:
            doc = doc if isinstance(doc, dict) else {}
            self.done = DoneOffsets.decode(doc.get("progress", {}))
            self.op_offset = int(doc.get("opOffset", 0))
            self.read_offset = self.done.below
            self.open, self.by_uniq = {}, {}
            self.resolved_uniq = collections.OrderedDict()
            self.next_ready = 0
            self.dirty = False

    def state_json(self) -> str:
        with self.lock:
            return json.dumps({"version": 1, "progress": self.done.encode(), "opOffset": self.op_offset}, separators=(",", ":"))

    def lowest_pending_phy(self) -> int | None:
        with self.lock:
            first = self.done.first_pending()
        return phy_of(self.store, HALF_TOPIC, 0, first)

    # ------------------------------------------------------------------ reading the queues

    def _read(self, topic: str, start: int) -> tuple[list[StoredMessage], int]:
        return read_batch(self.store, topic, 0, start, BATCH)

    def take_new(self) -> None:
        """New halves into the open set; op records applied (a commit found without its
        message is completed here: the crash came between the two)."""
        store = self.store
        while self.read_offset < store.max_offset(HALF_TOPIC, 0):
            start = self.read_offset
            got, nxt = self._read(HALF_TOPIC, start)
            with self.lock:
                if self.read_offset != start:
                    continue  # another thread took these in meanwhile
                returned = {m.queue_offset for m in got}
                gone = [o for o in range(start, max(nxt, start)) if o not in returned and o not in self.done]
                if gone:  # cleaned away (forced, disk full): nothing to resolve there
                    log.error(
                        "%d half message(s) from %d are gone before they were resolved (deleted under disk pressure)", len(gone), gone[0]
                    )
                    for o in gone:
                        self.done.add(o)
                    self.dirty = True
                for m in got:
                    if m.queue_offset not in self.done and m.queue_offset not in self.open:
                        uniq = m.properties.get(PROP_UNIQ_KEY, m.msg_id)
                        self.open[m.queue_offset] = Half(m.queue_offset, m.properties.get(PROP_PRODUCER_GROUP, ""), uniq, m.store_timestamp)
                        self.by_uniq.setdefault(uniq, []).append(m.queue_offset)
                        self.next_ready = 0
                if nxt <= start:
                    break
                self.read_offset = nxt
        while self.op_offset < store.max_offset(OP_TOPIC, 0):
            start = self.op_offset
            got, nxt = self._read(OP_TOPIC, start)
            with self.lock:
                if self.op_offset != start:
                    continue
                try:
                    for m in got:
                        self._apply_op(m)
                except TransactionUnavailable as e:  # read again next time; the other services go on meanwhile
                    log.warning("completing a commit waits: %s", e)
                    return
                if nxt <= start:
                    break
                self.op_offset = nxt
                self.dirty = True

    def _apply_op(self, op: StoredMessage) -> None:
        try:
            doc = json.loads(bytes(op.body))
            half = int(doc["h"])
        except (ValueError, KeyError, TypeError):
            return
        if half in self.done:
            return
        if op.tags == "c":
            self._complete_commit(half, int(doc.get("from", 0)))  # (TransactionUnavailable: read again later)
        self._resolved(half, str(doc.get("u", "")), str(op.tags or ""))

    def _resolved(self, half: int, uniq: str = "", action: str = "") -> None:
        self.done.add(half)
        self.dirty = True
        h = self.open.pop(half, None)
        uniq = h.uniq if h is not None else uniq
        if uniq:
            self.resolved_uniq[uniq] = action
            self.resolved_uniq.move_to_end(uniq)
            while len(self.resolved_uniq) > RESOLVED_KEPT:
                self.resolved_uniq.popitem(last=False)
        if h is not None:
            rest = [o for o in self.by_uniq.get(h.uniq, []) if o != half]
            if rest:
                self.by_uniq[h.uniq] = rest
            else:
                self.by_uniq.pop(h.uniq, None)

    # ------------------------------------------------------------------ ending a transaction

    def end(self, uniq: str, commit: bool, topic: str | None = None) -> None:
        """Commit (the message becomes visible, exactly once) or roll back. ``topic``: the
        topic the transaction id names, which must be the half message's (a caller allowed to
        publish one topic must not end another topic's transactions). Raises
        TransactionUnknown, TransactionUnavailable."""
        self.take_new()
        with self.lock:
            found = self.by_uniq.get(uniq)
        if not found:  # (sent a moment ago: the answer to its send can come before its dispatch)
            self.store.wait_dispatched(5)
            self.take_new()
        with self.lock:
            halves = [self.open[o] for o in sorted(self.by_uniq.get(uniq, [])) if o in self.open]
            if not halves:
                raise TransactionUnknown(f"no open transaction {uniq} here: it was resolved already, or it is not this node's")
            if topic is not None:
                half = self._half(halves[0].offset)
                real = restored(half) if half is not None else None
                if real is not None and real.topic != topic:
                    raise TransactionUnknown(f"no open transaction {uniq} of topic {topic} here")
            for dup in halves[1:]:  # the same message stored twice (a send retried): one outcome, the copies first
                self._end(dup, "r")
            self._end(halves[0], "c" if commit else "r")

    def _end(self, h: Half, action: str) -> None:
        if not self.may_write():
            raise TransactionUnavailable("this master may not take writes now")
        half = self._half(h.offset)
        if half is None:
            log.error("half message %d is gone (retention): transaction %s cannot be %s", h.offset, h.uniq, action)
            self._op(h.offset, "x", 0)
            self._resolved(h.offset)
            return
        real = restored(half)
        if action == "c" and real is not None:
            frm = self.store.max_offset(real.topic, real.queue_id)
            self._op(h.offset, "c", frm, h.uniq)  # first: a crash before the message is completed at start
            stored = self._put_committed(h.offset, half, real)
            self.committed += 1
            if not stored:
                self._resolved(h.offset, h.uniq, "c")
                raise CommitRefused(f"{real.topic}/{real.queue_id} refuses the message for good: nothing became visible")
        elif action == "x":
            ensure_topic(self.store, CHECK_MAX_TOPIC, 1)
            self.store.put_messages(CHECK_MAX_TOPIC, 0, [Message(CHECK_MAX_TOPIC, bytes(half.body), 0, half.flag, dict(half.properties))])
            self._op(h.offset, "x", 0, h.uniq)
            self.set_aside += 1
        else:
            self._op(h.offset, "r", 0, h.uniq)
            self.rolled_back += 1
        self._resolved(h.offset, h.uniq, action)

    def _op(self, half: int, action: str, frm: int, uniq: str = "") -> None:
        ensure_topic(self.store, OP_TOPIC, 1)
        body = json.dumps({"h": half, "from": frm, "u": uniq}, separators=(",", ":")).encode()
        res = self.store.put_messages(OP_TOPIC, 0, [Message(OP_TOPIC, body, 0, properties={codec.PROP_TAGS: action})])
        if not res.status.stored:
            raise TransactionUnavailable(f"{res.status.name} {res.reason}")

    def _half(self, offset: int) -> StoredMessage | None:
        return read_one(self.store, HALF_TOPIC, 0, offset)

    def _put_committed(self, half_offset: int, half: StoredMessage, real: Message) -> bool:
        """Store the committed message; False when its queue refuses it for good (logged)."""
        props = {k: v for k, v in real.properties.items() if k not in (PROP_TRANSACTION_PREPARED, PROP_PRODUCER_GROUP)}
        props[PROP_HALF_OFFSET] = str(half_offset)
        msg = replace(real, properties=props, sys_flag=(real.sys_flag & ~codec.TRANSACTION_MASK) | codec.TRANSACTION_COMMIT)
        res = self.store.put_messages(msg.topic, msg.queue_id, [msg])
        if res.status in (PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED):  # for good (its topic deleted, ...)
            log.error("committed transaction %d cannot be stored on %s/%d (%s): dropped", half_offset, msg.topic, msg.queue_id, res.reason)
            return False
        if not res.status.stored:
            raise TransactionUnavailable(f"{res.status.name} {res.reason}")
        return True

    def _complete_commit(self, half_offset: int, frm: int) -> None:
        """A commit op read again: put its message unless its queue holds it from ``frm`` on."""
        half = self._half(half_offset)
        real = restored(half) if half is not None else None
        if half is None or real is None:
            log.error("committed transaction %d: its half message is gone, its message cannot be completed", half_offset)
            return
        at = frm
        while at < self.store.max_offset(real.topic, real.queue_id):
            got, nxt = read_batch(self.store, real.topic, real.queue_id, at, BATCH)
            if any(m.properties.get(PROP_HALF_OFFSET) == str(half_offset) for m in got):
                return
            if nxt <= at:
                break
            at = nxt
        log.warning("transaction %d was committed but its message was not stored (a crash between): storing it now", half_offset)
        self._put_committed(half_offset, half, real)

    # ------------------------------------------------------------------ check-back

    def due_checks(self, now_ms: int) -> tuple[list[tuple[Half, StoredMessage]], int | None]:
        """Halves to check back now (their count and next time moved on), those past the
        maximum set aside; and ms until the next check."""
        cfg = self.settings()
        self.take_new()
        out: list[tuple[Half, StoredMessage]] = []
        wait: int | None = None
        with self.lock:
            if now_ms < self.next_ready:
                return out, self.next_ready - now_ms
            for uniq, offs in list(self.by_uniq.items()):
                if uniq in self.resolved_uniq:  # a late copy of a message already resolved: no second outcome
                    for o in list(offs):
                        if o in self.open:
                            self._end(self.open[o], "r")
            firsts = [self.open[min(offs)] for offs in self.by_uniq.values() if offs and min(offs) in self.open]
            for h in firsts:  # (a message stored twice is asked about once)
                ready = max(h.stored_ms + cfg.transactionTimeOut, h.next_check_ms)
                if ready > now_ms:
                    wait = ready - now_ms if wait is None else min(wait, ready - now_ms)
                    continue
                if h.checks >= cfg.transactionCheckMax:
                    log.warning(
                        "transaction %s of %s unresolved after %d checks: set aside in %s", h.uniq, h.group, h.checks, CHECK_MAX_TOPIC
                    )
                    self._end(h, "x")
                    continue
                half = self._half(h.offset)
                if half is None:
                    self._resolved(h.offset)
                    continue
                h.checks += 1
                h.next_check_ms = now_ms + cfg.transactionCheckInterval
                wait = cfg.transactionCheckInterval if wait is None else min(wait, cfg.transactionCheckInterval)
                out.append((h, half))
            self.next_ready = now_ms + wait if wait is not None else now_ms + cfg.transactionCheckInterval
        return out, wait
