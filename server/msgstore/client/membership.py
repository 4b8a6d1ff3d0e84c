"""One consumer's membership in its group: heartbeats, the members it allocates among, the
queues it claims and the ones each node granted it.

Every node keeps its own view of the group (members heartbeat to every node); to allocate alike,
every member reads the member list of the same node: the first ready node of the route by name.
What the member may read is what the nodes granted: a queue is granted to one live member at a
time, so the member that is letting a queue go (committing first) and the one taking it never
read it together. The transport (sync thread or asyncio task) lives in the consumers; this holds
what both need, behind a lock because the heartbeat runs beside the polling thread.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import uuid
from collections.abc import Iterable, Sequence

from ..v1 import msgstore_pb2 as pb
from .allocation import allocate
from .routing import Node, QueueRef

CLUSTERING = "clustering"
BROADCASTING = "broadcasting"
DEFAULT_HEARTBEAT_S = 3.0
DEFAULT_EXPIRY_S = 10.0


def default_client_id() -> str:
    """host@pid@random: unique per consumer object, readable in ``msgstore groups``."""
    return f"{socket.gethostname()}@{os.getpid()}@{uuid.uuid4().hex[:6]}"


def broadcast_group(group: str, client_id: str) -> str:
    """Where a broadcasting member keeps its own progress: the group and its client id."""
    return f"{group}%{re.sub(r'[^A-Za-z0-9_-]', '-', client_id)}"[:255]


def queue_key(q: QueueRef) -> str:
    """A queue named alike by every member (node name, queue id)."""
    return f"{q.node}\x00{q.queue_id:06d}"


class Membership:
    def __init__(self, group: str, topic: str, client_id: str, mode: str, heartbeat_s: float, expiry_s: float):
        if mode not in (CLUSTERING, BROADCASTING):
            raise ValueError(f"mode must be {CLUSTERING!r} or {BROADCASTING!r}")
        if expiry_s <= heartbeat_s:
            raise ValueError("the expiry must be longer than the heartbeat interval")
        self.group = group
        self.topic = topic
        self.client_id = client_id
        self.mode = mode
        self.heartbeat_s = heartbeat_s
        self.expiry_s = expiry_s
        self.lock = threading.Lock()
        self.claims: dict[str, set[int]] = {}  # node address → queue ids claimed there
        self.granted: dict[str, set[int]] = {}  # node address → queue ids granted there
        self.generations: dict[str, int] = {}  # node address → its generation of the group
        self.members: tuple[str, ...] | None = None  # clustering members, from the leading node
        self.leader: str | None = None

    @property
    def clustering(self) -> bool:
        return self.mode == CLUSTERING

    def request(self, address: str) -> pb.HeartbeatRequest:
        with self.lock:
            claims = sorted(self.claims.get(address, ()))
        return pb.HeartbeatRequest(
            group=self.group,
            client_id=self.client_id,
            topics=[self.topic],
            expiry_ms=int(self.expiry_s * 1000),
            claims=[pb.QueueKey(topic=self.topic, queue_id=q) for q in claims],
            broadcasting=not self.clustering,
        )

    @staticmethod
    def leading(nodes: Sequence[Node]) -> Node | None:
        ready = sorted((n for n in nodes if n.ready), key=lambda n: n.name)
        return ready[0] if ready else None

    def absorb(self, node: Node, resp: pb.HeartbeatResponse, leader: bool) -> None:
        with self.lock:
            self.generations[node.address] = resp.generation
            self.granted[node.address] = {k.queue_id for k in resp.granted if k.topic == self.topic}
            if leader:
                self.leader = node.address
                self.members = tuple(m.client_id for m in resp.members if not m.broadcasting and self.topic in m.topics)

    def stale(self, address: str, generation: int) -> bool:
        """A pull answer's generation differs from the last heartbeat's: membership changed."""
        with self.lock:
            known = self.generations.get(address)
        return bool(generation) and known is not None and generation != known

    def target(self, queues: Iterable[QueueRef]) -> set[QueueRef]:
        """The queues this member should hold, by the leading node's member list."""
        with self.lock:
            members = self.members
        if not members or self.client_id not in members:
            return set()
        return set(allocate(list(queues), members, key=queue_key).get(self.client_id, []))

    def set_claims(self, queues: Iterable[QueueRef]) -> None:
        claims: dict[str, set[int]] = {}
        for q in queues:
            claims.setdefault(q.address, set()).add(q.queue_id)
        with self.lock:
            for address in set(self.claims) | set(claims):
                self.claims[address] = claims.get(address, set())

    def is_granted(self, q: QueueRef) -> bool:
        with self.lock:
            return q.queue_id in self.granted.get(q.address, ())

    def lost(self, held: Iterable[QueueRef]) -> list[QueueRef]:
        """Held queues a node no longer grants us (it took us for gone and gave them away):
        their progress is the new holder's now, so they are dropped without a commit."""
        _, granted = self.snapshot()
        return [q for q in held if q.address in granted and q.queue_id not in granted[q.address]]

    def granted_of(self, queues: Iterable[QueueRef]) -> list[QueueRef]:
        _, granted = self.snapshot()
        return [q for q in queues if q.queue_id in granted.get(q.address, ())]

    def snapshot(self) -> tuple[tuple[str, ...] | None, dict[str, set[int]]]:
        with self.lock:
            return self.members, {a: set(g) for a, g in self.granted.items()}
