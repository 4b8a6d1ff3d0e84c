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

from ..store import codec
from .client import Client, PullResult, StoreError, pull_result
from .routing import QueueRef

REFRESH_S = 30.0  # how often new nodes' queues are looked for


@dataclass
class ConsumerRecord:
    queue: QueueRef
    message: codec.StoredMessage

    def __getattr__(self, name):
        return getattr(self.message, name)


class Consumer:
    def __init__(self, client: Client, group: str | None, topic: str, *, start: str = "earliest",
                 tag_filter: str | None = None, max_messages: int = 256, long_poll_ms: int = 1000):
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

    def poll(self, timeout: float = 1.0) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        if not self.positions or time.monotonic() - self._refreshed_at > REFRESH_S:
            self.refresh()
        queues = list(self.positions)
        n = len(queues)
        for i in range(n):
            q = queues[(self._next + i) % n]
            res = self._pull(q, 0)
            if res is not None and res.messages:
                out.extend(ConsumerRecord(q, m) for m in res.messages)
                if len(out) >= self.max_messages:
                    self._next = (self._next + i + 1) % n
                    return out
        if out or timeout <= 0:
            return out
        return self._long_poll(queues, timeout)

    def _pull(self, q: QueueRef, timeout_ms: int) -> PullResult | None:
        try:
            res = self.client.pull(self.topic, q, self.positions[q], max_messages=self.max_messages,
                                   timeout_ms=timeout_ms, tag_filter=self.tag_filter, group=self.group or "")
        except Exception:
            return None  # a node that is down is simply skipped until it returns
        self.positions[q] = res.next_offset
        return res

    def _long_poll(self, queues: list[QueueRef], timeout: float) -> list[ConsumerRecord]:
        done = threading.Event()
        wait_ms = int(min(timeout, self.long_poll_ms / 1000) * 1000)
        futures = {}
        for q in queues:
            f = self.client.pull_future(self.topic, q, self.positions[q], max_messages=self.max_messages,
                                        timeout_ms=wait_ms, tag_filter=self.tag_filter, group=self.group or "")
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

    def commit(self) -> None:
        """Commit every position that moved, on the node owning its queue."""
        if not self.group:
            raise RuntimeError("a consumer without a group cannot commit")
        for q, off in list(self.positions.items()):
            if self._committed.get(q) != off:
                self.client.commit(self.group, self.topic, q, off)
                self._committed[q] = off

    def lag(self) -> int:
        offsets = self.client.queue_offsets(self.topic, skip_unavailable=True)
        return sum(max(0, hi - self.positions.get(q, lo)) for q, (lo, hi) in offsets.items())


__all__ = ["Consumer", "ConsumerRecord", "grpc"]
