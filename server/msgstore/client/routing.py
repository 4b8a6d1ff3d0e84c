"""Where a message goes: (node, queue) pairs of a topic, spread round robin or by key hash.

A message queue is (node, topic, queue id); every node holds its own queues of each topic,
so one node is simply the case with a single node.
"""

from __future__ import annotations

import itertools
import threading
import time
import zlib
from dataclasses import dataclass

DOWN_FOR_S = 5.0


@dataclass(frozen=True)
class QueueRef:
    node: str
    address: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.node}/{self.queue_id}"


@dataclass(frozen=True)
class Node:
    name: str
    address: str
    ready: bool
    queue_ids: tuple[int, ...]


class Route:
    """The nodes serving a topic, with health marks for failover."""

    def __init__(self, topic: str, nodes: list[Node]):
        self.topic = topic
        self.nodes = nodes
        self.fetched_at = time.monotonic()
        self._counter = itertools.count()
        self._down: dict[str, float] = {}
        self._lock = threading.Lock()

    @property
    def queues(self) -> list[QueueRef]:
        """Every (node, queue) pair of ready nodes, nodes interleaved (n0/q0, n1/q0, n0/q1, …)
        so that consecutive picks, and consecutive producer batches, land on different nodes."""
        pairs = [QueueRef(n.name or n.address, n.address, q) for n in self.nodes if n.ready for q in n.queue_ids]
        rank = {n.address: i for i, n in enumerate(self.nodes)}
        return sorted(pairs, key=lambda p: (p.queue_id, rank[p.address]))

    def usable(self) -> list[QueueRef]:
        now = time.monotonic()
        qs = [q for q in self.queues if self._down.get(q.address, 0) <= now]
        return qs or self.queues

    def pick(self, key: str | None = None, exclude: set[str] | frozenset = frozenset()) -> QueueRef:
        """Round robin, or by key hash so one key keeps its queue (and order) while nodes stay."""
        qs = [q for q in self.usable() if q.address not in exclude] or self.usable()
        if not qs:
            raise LookupError(f"no ready node serves topic {self.topic}")
        if key is not None:
            return qs[zlib.crc32(key.encode()) % len(qs)]
        return qs[next(self._counter) % len(qs)]

    def mark_down(self, address: str) -> None:
        with self._lock:
            self._down[address] = time.monotonic() + DOWN_FOR_S

    def node(self, name_or_address: str) -> Node | None:
        for n in self.nodes:
            if name_or_address in (n.name, n.address):
                return n
        return None
