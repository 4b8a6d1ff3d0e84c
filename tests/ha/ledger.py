"""An independent record of what producers were told, and the checks made against what the store
holds afterwards (issue 20's checker): every PUT_OK body at its acknowledged (queue, offset) on
the final master; no (queue, offset) ever read with two different bodies, across every read the
test made; and, where a mode may lose acknowledged messages (ASYNC), none lost that a member
acknowledged after another had been elected in its place (a fenced member acknowledges nothing).

"After" is the client's *receipt* of the acknowledgement against the election (for any,
:meth:`Ledger.acked_after_replaced` excuses one in flight at the election): the time the
arbiter's record says it was made (``electedAt``, read off etcd by :class:`RecordWatch`), or,
without an arbiter, the time the test's controller saw its promotion done (later than the
election itself: acknowledgements received in between are not counted there).

It knows nothing of the store's internals: only the clients' answers, the times they were sent
and received, the elections the test made or the arbiter recorded, and what reads return.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from dataclasses import dataclass, field

from msgstore.client import Client, OutMessage, StoreError
from msgstore.client.routing import QueueRef

IN_FLIGHT_S = 0.25  # an answer this soon after the election replacing its member may have been made before it


@dataclass(frozen=True)
class Ack:
    body: bytes
    group: str
    queue: int
    offset: int
    address: str  # the member that said PUT_OK
    sent: float
    received: float
    received_wall: float = 0.0  # time.time() at receipt (compared with the arbiter's election times)
    sent_wall: float = 0.0  # time.time() as the request left


@dataclass
class Ledger:
    acks: list[Ack] = field(default_factory=list)
    refused: int = 0  # answers other than PUT_OK (retried by the producer)
    errors: int = 0  # calls that failed outright
    elections: list[tuple[float, str]] = field(default_factory=list)  # (time, the new master's address)
    records: list[tuple[float, str, int]] = field(default_factory=list)  # the arbiter's: (electedAt, holder's address, epoch)
    seen: dict[tuple[str, int, int], set[bytes]] = field(default_factory=dict)  # every body ever read, by place
    reads: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def elected(self, address: str, at: float | None = None) -> None:
        with self.lock:
            self.elections.append((time.monotonic() if at is None else at, address))

    def recorded(self, at_wall: float, address: str, epoch: int) -> None:
        """An election the arbiter's record shows (made at ``at_wall``, wall clock)."""
        with self.lock:
            if (at_wall, address, epoch) not in self.records:
                self.records.append((at_wall, address, epoch))

    def recorded_master_at(self, t_wall: float) -> str | None:
        current = None
        for at, address, _ in sorted(self.records):
            if at < t_wall:
                current = address
        return current

    def master_at(self, t: float) -> str | None:
        """The master the test had elected at time ``t`` (None before the first election)."""
        current = None
        for at, address in sorted(self.elections):
            if at <= t:
                current = address
        return current

    # ------------------------------------------------------------------ reading

    def read(self, client: Client, topic: str, settle: float = 0.0) -> dict[tuple[str, int, int], bytes]:
        """Every message of ``topic`` where the route says each queue is read now; notes any
        place read with a body other than the one read there before. ``settle``: a final read,
        once the producers stopped: up to that many seconds for every queue to reach past its
        last acknowledged offset first (an ack means stored, not yet in a consume queue; where
        a mode may lose acknowledged messages the wait ends at the deadline, and :meth:`lost`
        judges what is there)."""
        held: dict[tuple[str, int, int], bytes] = {}
        offsets = client.queue_offsets(topic)
        deadline = time.monotonic() + settle
        while settle and not self._reached(offsets) and time.monotonic() < deadline:
            time.sleep(0.02)
            offsets = client.queue_offsets(topic)
        for q, (lo, hi) in offsets.items():
            off = lo
            while off < hi:
                got = client.pull(topic, q, off, max_messages=64)
                if not got.messages:
                    break
                for m in got.messages:
                    held[(q.node, q.queue_id, m.queue_offset)] = bytes(m.body)
                off = got.next_offset
        with self.lock:
            self.reads += 1
            for key, body in held.items():
                self.seen.setdefault(key, set()).add(body)
        return held

    def _reached(self, offsets: dict[QueueRef, tuple[int, int]]) -> bool:
        """Whether every queue's end is past every offset acknowledged in it."""
        ends = {(q.node, q.queue_id): hi for q, (_lo, hi) in offsets.items()}
        with self.lock:
            return all(ends.get((a.group, a.queue), 0) > a.offset for a in self.acks)

    def two_bodies(self) -> list[tuple[str, int, int]]:
        """Places read with different bodies at different times (a cut acknowledged message,
        or one offset given twice), over every read made so far."""
        return sorted(k for k, bodies in self.seen.items() if len(bodies) > 1)

    # ------------------------------------------------------------------ checks

    def lost(self, held: dict[tuple[str, int, int], bytes]) -> list[Ack]:
        return [a for a in self.acks if held.get((a.group, a.queue, a.offset)) != a.body]

    def acked_by_fenced(self, lost: list[Ack]) -> list[Ack]:
        """Lost acknowledgements received after another master had been elected: only a member
        that went on acknowledging after it was replaced (not fenced) can have given them."""
        out = []
        for a in lost:
            if self.records:
                master = self.recorded_master_at(a.received_wall)
            else:
                master = self.master_at(a.received)
            if master is not None and master != a.address:
                out.append(a)
        return out

    def replaced_at(self, address: str, t_wall: float) -> float | None:
        """When the record last named another member than ``address`` before ``t_wall`` (None
        when it names ``address`` then, or nothing)."""
        current, since = None, None
        for at, named, _ in sorted(self.records):
            if at >= t_wall:
                break
            if named != current:
                current, since = named, at
        return since if current is not None and current != address else None

    def acked_after_replaced(self) -> list[Ack]:
        """Every acknowledgement (lost or not) received from a member after the arbiter recorded
        another master's election, unless it was in flight then: none may exist.

        In flight: sent before the election and received within :data:`IN_FLIGHT_S` of it. A
        master answers PUT_OK only if it still may just before it answers (gate.py), so one
        fenced in a switchover may have answered a moment before the Fence reached it, and the
        answer arrive after the election (the candidate elects within a millisecond of the
        Fence when it holds the master's whole log already). Such an answer is judged by what
        the store holds: :meth:`acked_by_fenced` counts it when it is lost. An answer later than
        that (a send the client tried again on the same member, seconds on) is not excused:
        ``sent_wall`` is the batch's first try, not the request answered. ``electedAt`` is whole
        milliseconds, rounded down, hence the millisecond's allowance."""
        if not self.records:
            return []
        out = []
        for a in self.acks:
            replaced = self.replaced_at(a.address, a.received_wall)
            if replaced is None:
                continue
            in_flight = a.sent_wall - 0.001 <= replaced and a.received_wall <= replaced + IN_FLIGHT_S
            if not in_flight:
                out.append(a)
        return out


class Producer(threading.Thread):
    """Sends small batches until stopped (at most ``limit`` batches), recording every answer."""

    def __init__(self, client: Client, topic: str, ledger: Ledger, tag: str, batch: int = 4, limit: int = 100_000, pause: float = 0.0):
        super().__init__(daemon=True, name=f"producer-{tag}")
        self.client = client
        self.topic = topic
        self.ledger = ledger
        self.tag = tag.encode()
        self.batch = batch
        self.limit = limit
        self.pause = pause
        self.stop = threading.Event()
        self.sent = 0
        self.tried = 0
        self.last_error = ""
        self.last_answer = 0.0  # monotonic

    def run(self) -> None:
        i = 0
        while not self.stop.is_set() and i < self.limit:
            bodies = [b"%s-%d-%d" % (self.tag, i, k) for k in range(self.batch)]
            i += 1
            self.tried = i
            t0, wall0 = time.monotonic(), time.time()
            try:
                results = self.client.send_batch(self.topic, [OutMessage(b) for b in bodies])
            except StoreError as e:
                self.last_error, self.last_answer = str(e)[:300], time.monotonic()
                with self.ledger.lock:
                    self.ledger.errors += 1
                self.stop.wait(0.05)
                continue
            t1, wall = time.monotonic(), time.time()
            self.last_answer = t1
            with self.ledger.lock:
                for body, r in zip(bodies, results, strict=True):
                    if r.status == "PUT_OK":
                        self.ledger.acks.append(Ack(body, r.node, r.queue_id, r.queue_offset, r.address, t0, t1, wall, wall0))
                    else:
                        self.ledger.refused += 1
            self.sent += 1
            if self.pause:
                self.stop.wait(self.pause)

    def halt(self) -> None:
        self.stop.set()
        self.join(60)

    def describe(self) -> str:
        """Where it is and what it last heard (for a failing round's message: a stalled producer
        says what it is waiting on)."""
        frame = sys._current_frames().get(self.ident or -1)
        where = "".join(traceback.format_stack(frame)[-6:]) if frame is not None else "(not running)\n"
        since = f"{time.monotonic() - self.last_answer:.1f} s ago" if self.last_answer else "never"
        done = " (its limit reached)" if self.tried >= self.limit else ""
        return f"producer {self.tag.decode()}: {self.sent} batches{done}, last answer {since}, last error {self.last_error!r}, at:\n{where}"


class RecordWatch(threading.Thread):
    """Reads a group's record off etcd every few milliseconds and notes each election in the
    ledger with the time the record says it was made."""

    def __init__(self, etcd, group: str, ledger: Ledger, every: float = 0.05):
        super().__init__(daemon=True, name=f"record-watch-{group}")
        self.etcd = etcd
        self.group = group
        self.ledger = ledger
        self.every = every
        self.stop = threading.Event()
        self.seen: list[dict] = []

    def run(self) -> None:
        last = None
        while not self.stop.is_set():
            try:
                rec = self.etcd.record(self.group)
            except OSError:
                rec = None
            if rec is not None and (rec.get("epoch"), rec.get("holder")) != last:
                last = (rec.get("epoch"), rec.get("holder"))
                self.seen.append(rec)
                at = float(rec.get("electedAt") or 0) / 1000
                if at:
                    self.ledger.recorded(at, rec.get("address", ""), int(rec.get("epoch") or 0))
            self.stop.wait(self.every)

    def halt(self) -> None:
        self.stop.set()
        self.join(10)


def acked_on(ledger: Ledger, address: str, after: float) -> int:
    return sum(1 for a in ledger.acks if a.address == address and a.sent > after)


__all__ = ["Ack", "Ledger", "Producer", "QueueRef", "RecordWatch", "acked_on"]
