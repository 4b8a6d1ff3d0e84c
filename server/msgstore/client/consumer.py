"""A consumer that pulls from every (node, queue) of a topic and commits where each lives.

Positions start at the group's committed offsets (else earliest or latest). ``poll()`` first
takes what is there; when every queue is empty it long-polls all of them at once and returns
as soon as any has messages.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import grpc

from ..record import codec
from .client import Client, StoreError, pull_result
from .routing import QueueRef

REFRESH_S = 30.0  # how often new nodes' queues are looked for
MISSING_REFRESH_S = 2.0  # ... and while a node is down or a queue has no position yet (a node returning)
PARALLEL_PULLS = 4  # pulls in flight at once (measured: 1 → 60k, 4 → 97k msg/s on 2 cores)


@dataclass
class ConsumerRecord:
    queue: QueueRef
    message: codec.StoredMessage

    def __getattr__(self, name):
        return getattr(self.message, name)


class Consumer:
    def __init__(
        self,
        client: Client,
        group: str | None,
        topic: str,
        *,
        start: str = "earliest",
        tag_filter: str | None = None,
        max_messages: int = 256,
        long_poll_ms: int = 1000,
    ):
        """``group=None`` reads without a group: positions start at ``start`` and cannot be
        committed."""
        if start not in ("earliest", "latest"):
            raise ValueError("start must be 'earliest' or 'latest'")
        self.client = client
        self.group = group
        self.topic = topic
        self.start = start
        self.tag_filter = tag_filter
        self.max_messages = max_messages
        self.long_poll_ms = long_poll_ms
        self.positions: dict[QueueRef, int] = {}
        self._committed: dict[QueueRef, int] = {}
        self._next = 0
        self._refreshed_at = 0.0
        self.refresh()

    def refresh(self) -> None:
        """Pick up queues of new nodes (scaling up) and resolve their start positions. A node
        that does not answer right now is left for the next refresh."""
        self._refreshed_at = time.monotonic()
        route = self.client.route(self.topic, refresh=True)
        offsets = None
        for q in route.queues:
            if q in self.positions:
                continue
            try:
                committed = self.client.committed(self.group, self.topic, q) if self.group else -1
                if committed < 0 and offsets is None:
                    offsets = self.client.queue_offsets(self.topic, skip_unavailable=True)
            except StoreError:
                continue
            if committed >= 0:
                self.positions[q] = committed
                self._committed[q] = committed
                continue
            if q not in offsets:
                continue
            lo, hi = offsets[q]
            self.positions[q] = lo if self.start == "earliest" else hi

    def _incomplete(self) -> bool:
        """Some node of the route is down, or some queue has no position yet."""
        route = self.client.route(self.topic)
        return any(not n.ready for n in route.nodes) or any(q not in self.positions for q in route.queues)

    def poll(self, timeout: float = 1.0) -> list[ConsumerRecord]:
        """Messages from any queue: one concurrent round of pulls over the queues (the server
        and the network overlap with decoding), else a long poll of all of them."""
        age = time.monotonic() - self._refreshed_at
        if not self.positions or age > REFRESH_S or (age > MISSING_REFRESH_S and self._incomplete()):
            self.refresh()
        queues = list(self.positions)
        n = len(queues)
        if n == 0:
            return []
        order = [queues[(self._next + i) % n] for i in range(n)]
        self._next = (self._next + 1) % n
        out: list[ConsumerRecord] = []
        for start in range(0, n, PARALLEL_PULLS):
            out.extend(self._round(order[start : start + PARALLEL_PULLS]))
            if len(out) >= self.max_messages:
                return out
        if out or timeout <= 0:
            return out
        return self._long_poll(queues, timeout)

    def _round(self, queues: list[QueueRef]) -> list[ConsumerRecord]:
        futures = []
        for q in queues:
            try:
                futures.append(
                    (
                        q,
                        self.client.pull_future(
                            self.topic,
                            q,
                            self.positions[q],
                            max_messages=self.max_messages,
                            tag_filter=self.tag_filter,
                            group=self.group or "",
                        ),
                    )
                )
            except Exception:
                continue  # a node that is down is skipped until it returns
        out: list[ConsumerRecord] = []
        for q, f in futures:
            try:
                res = pull_result(f.result(), q.node)
            except Exception:
                continue
            self.positions[q] = res.next_offset
            out.extend(ConsumerRecord(q, m) for m in res.messages)
        return out

    def _long_poll(self, queues: list[QueueRef], timeout: float) -> list[ConsumerRecord]:
        done = threading.Event()
        wait_ms = int(min(timeout, self.long_poll_ms / 1000) * 1000)
        futures = {}
        for q in queues:
            f = self.client.pull_future(
                self.topic,
                q,
                self.positions[q],
                max_messages=self.max_messages,
                timeout_ms=wait_ms,
                tag_filter=self.tag_filter,
                group=self.group or "",
            )
            f.add_done_callback(lambda _f: done.set())
            futures[q] = f
        deadline = time.monotonic() + timeout
        out: list[ConsumerRecord] = []
        while not out:
            left = deadline - time.monotonic()
            if left <= 0 or all(f.done() for f in futures.values()):
                break
            done.wait(left)
            done.clear()
            for q, f in futures.items():
                if f.done() and not f.cancelled() and f.exception() is None:
                    resp = f.result()
                    if resp.record_count:
                        res = pull_result(resp, q.node)
                        self.positions[q] = res.next_offset
                        out.extend(ConsumerRecord(q, m) for m in res.messages)
        for q, f in futures.items():
            if not f.done():
                f.cancel()
            elif not out and not f.cancelled() and f.exception() is None:
                self.positions[q] = f.result().next_offset
        return out

    def commit(self, offsets: dict[QueueRef, int] | None = None) -> None:
        """Commit every position that moved (or the given ``offsets``), each on the node owning
        its queue. A node that does not answer does not stop the others: every queue that can
        be committed is, then a :class:`StoreError` names those that could not."""
        if not self.group:
            raise RuntimeError("a consumer without a group cannot commit")
        failed: list[str] = []
        last: StoreError | None = None
        for q, off in list((self.positions if offsets is None else offsets).items()):
            if self._committed.get(q) != off:
                try:
                    self.client.commit(self.group, self.topic, q, off)
                except StoreError as e:
                    failed.append(f"{q} ({e.code.name})")
                    last = e
                    continue
                self._committed[q] = off
        if last is not None:
            raise StoreError(last.code, f"could not commit {', '.join(failed)}: {last.details}", last.node)

    def lag(self) -> int:
        offsets = self.client.queue_offsets(self.topic, skip_unavailable=True)
        return sum(max(0, hi - self.positions.get(q, lo)) for q, (lo, hi) in offsets.items())


__all__ = ["Consumer", "ConsumerRecord", "grpc"]
