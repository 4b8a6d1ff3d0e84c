"""An independent record of what producers were told, and the checks made against what the store
holds afterwards (issue 20's checker): every PUT_OK body at its acknowledged (queue, offset) on
the final master; no (queue, offset) ever read with two different bodies; and, where a mode may
lose acknowledged messages (ASYNC), none lost that a member acknowledged after another had been
elected in its place (a fenced member acknowledges nothing).

It knows nothing of the store's internals: only the clients' answers, the times they were sent
and received, the elections the test itself made (or saw), and what reads return.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from msgstore.client import Client, OutMessage, StoreError
from msgstore.client.routing import QueueRef


@dataclass(frozen=True)
class Ack:
    body: bytes
    group: str
    queue: int
    offset: int
    address: str  # the member that said PUT_OK
    sent: float
    received: float


@dataclass
class Ledger:
    acks: list[Ack] = field(default_factory=list)
    refused: int = 0  # answers other than PUT_OK (retried by the producer)
    errors: int = 0  # calls that failed outright
    elections: list[tuple[float, str]] = field(default_factory=list)  # (time, the new master's address)
    seen: dict[tuple[str, int, int], bytes] = field(default_factory=dict)  # every body read, by place
    lock: threading.Lock = field(default_factory=threading.Lock)

    def elected(self, address: str, at: float | None = None) -> None:
        with self.lock:
            self.elections.append((time.monotonic() if at is None else at, address))

    def master_at(self, t: float) -> str | None:
        """The master the test had elected at time ``t`` (None before the first election)."""
        current = None
        for at, address in sorted(self.elections):
            if at <= t:
                current = address
        return current

    # ------------------------------------------------------------------ reading

    def read(self, client: Client, topic: str) -> dict[tuple[str, int, int], bytes]:
        """Every message of ``topic`` where the route says each queue is read now; notes any
        place read with a body other than the one read there before."""
        held: dict[tuple[str, int, int], bytes] = {}
        for q, (lo, hi) in client.queue_offsets(topic).items():
            off = lo
            while off < hi:
                got = client.pull(topic, q, off, max_messages=64)
                if not got.messages:
                    break
                for m in got.messages:
                    held[(q.node, q.queue_id, m.queue_offset)] = bytes(m.body)
                off = got.next_offset
        with self.lock:
            for key, body in held.items():
                self.seen.setdefault(key, body)
        return held

    def two_bodies(self, held: dict[tuple[str, int, int], bytes]) -> list[tuple[str, int, int]]:
        return sorted(k for k, b in held.items() if self.seen.get(k, b) != b)

    # ------------------------------------------------------------------ checks

    def lost(self, held: dict[tuple[str, int, int], bytes]) -> list[Ack]:
        return [a for a in self.acks if held.get((a.group, a.queue, a.offset)) != a.body]

    def acked_by_fenced(self, lost: list[Ack]) -> list[Ack]:
        """Lost acknowledgements sent after the test had elected another master: only a member
        that went on acknowledging after it was replaced (not fenced) can have given them."""
        out = []
        for a in lost:
            master = self.master_at(a.sent)
            if master is not None and master != a.address:
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

    def run(self) -> None:
        i = 0
        while not self.stop.is_set() and i < self.limit:
            bodies = [b"%s-%d-%d" % (self.tag, i, k) for k in range(self.batch)]
            i += 1
            t0 = time.monotonic()
            try:
                results = self.client.send_batch(self.topic, [OutMessage(b) for b in bodies])
            except StoreError:
                with self.ledger.lock:
                    self.ledger.errors += 1
                self.stop.wait(0.05)
                continue
            t1 = time.monotonic()
            with self.ledger.lock:
                for body, r in zip(bodies, results, strict=True):
                    if r.status == "PUT_OK":
                        self.ledger.acks.append(Ack(body, r.node, r.queue_id, r.queue_offset, r.address, t0, t1))
                    else:
                        self.ledger.refused += 1
            self.sent += 1
            if self.pause:
                self.stop.wait(self.pause)

    def halt(self) -> None:
        self.stop.set()
        self.join(60)


def acked_on(ledger: Ledger, address: str, after: float) -> int:
    return sum(1 for a in ledger.acks if a.address == address and a.sent > after)


__all__ = ["Ack", "Ledger", "Producer", "QueueRef", "acked_on"]
