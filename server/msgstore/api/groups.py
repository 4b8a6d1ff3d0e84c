"""Consumer group membership on one node: who is alive, and which member holds which queue.

Kept in memory, like RocketMQ's ConsumerManager: members heartbeat every few seconds, so a
restarted node knows its groups again within one heartbeat interval (what must survive a
restart, the committed offsets, lives in the store). A member that stops heartbeating leaves
after its expiry; one that closes cleanly leaves at once. Each change of membership bumps the
group's generation, which pull responses carry, so members notice a change at their next pull.

A queue of this node is held by at most one live member at a time: a member claims the queues it
was allocated, and a claim is granted only when the queue is free (never held, released, or held
by a member that left). A member releases a queue by leaving it out of its next claims, after
committing its progress there, so the next holder starts where it stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

DEFAULT_EXPIRY_MS = 30_000
MAX_EXPIRY_MS = 600_000

QueueKey = tuple[str, int]  # (topic, queue id)


@dataclass
class Member:
    client_id: str
    topics: tuple[str, ...]
    host: str
    broadcasting: bool
    expiry_s: float
    last_seen: float


@dataclass
class Group:
    name: str
    generation: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    owners: dict[QueueKey, str] = field(default_factory=dict)


class GroupRegistry:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock  # injectable: tests expire members without waiting
        self.groups: dict[str, Group] = {}

    def _expire(self, g: Group) -> None:
        now = self.clock()
        gone = [cid for cid, m in g.members.items() if now - m.last_seen > m.expiry_s]
        for cid in gone:
            self._leave(g, cid)

    def _leave(self, g: Group, client_id: str) -> None:
        if g.members.pop(client_id, None) is not None:
            g.generation += 1
        for q in [q for q, owner in g.owners.items() if owner == client_id]:
            del g.owners[q]

    def heartbeat(
        self,
        group: str,
        client_id: str,
        topics: Iterable[str],
        host: str,
        expiry_ms: int,
        claims: Iterable[QueueKey],
        broadcasting: bool = False,
    ) -> tuple[Group, set[QueueKey]]:
        """Record the member alive and settle its claims; (the group, the claims granted)."""
        g = self.groups.setdefault(group, Group(group))
        self._expire(g)
        now = self.clock()
        expiry_s = (expiry_ms or DEFAULT_EXPIRY_MS) / 1000
        topics = tuple(sorted(set(topics)))
        m = g.members.get(client_id)
        if m is None or m.topics != topics or m.broadcasting != broadcasting:
            g.generation += 1
        g.members[client_id] = Member(client_id, topics, host, broadcasting, expiry_s, now)
        wanted = set(claims) if not broadcasting else set()
        for q in [q for q, owner in g.owners.items() if owner == client_id and q not in wanted]:
            del g.owners[q]  # released: left out of the claims
        granted = set()
        for q in wanted:
            owner = g.owners.get(q)
            if owner is None or owner == client_id or owner not in g.members:
                g.owners[q] = client_id
                granted.add(q)
        return g, granted

    def unregister(self, group: str, client_id: str) -> bool:
        g = self.groups.get(group)
        if g is None or client_id not in g.members:
            return False
        self._leave(g, client_id)
        return True

    def get(self, group: str) -> Group | None:
        g = self.groups.get(group)
        if g is not None:
            self._expire(g)
        return g

    def generation(self, group: str) -> int:
        g = self.get(group)
        return g.generation if g is not None else 0

    def all(self) -> list[Group]:
        for g in self.groups.values():
            self._expire(g)
        return [self.groups[name] for name in sorted(self.groups)]

    def expires_in_ms(self, m: Member) -> int:
        return max(0, int((m.last_seen + m.expiry_s - self.clock()) * 1000))
