"""Where a message goes: (node, queue) pairs of a topic, spread round robin or by key hash.

A message queue is (node, topic, queue id); every node holds its own queues of each topic,
so one node is simply the case with a single node. A key's queue is its hash over *every*
queue of the route, down nodes included (as RocketMQ's selector hashes over the route's queue
list): a node going down must not move the keys of the others, and a key whose queue is down
waits for it (:class:`KeyQueueDown`) rather than land elsewhere out of order, unless the
sender allows reordering.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
import zlib
from dataclasses import dataclass, field

DOWN_FOR_S = 5.0
SUSPECT_FOR_S = 30.0
PROBE_TIMEOUT_S = 0.5


@dataclass(frozen=True)
class QueueRef:
    """A queue: its node (a replica group: the queue stays the same queue across a failover)
    and id; ``address`` is where its master was when the route was read, not part of its
    identity."""

    node: str
    address: str = field(compare=False)
    queue_id: int

    def __str__(self) -> str:
        return f"{self.node}/{self.queue_id}"


@dataclass(frozen=True)
class Member:
    """One member of a replica group (one process, one volume)."""

    name: str
    address: str
    role: str
    ready: bool
    read_enabled: bool
    epoch: int = 0
    lag_bytes: int = 0
    fenced: bool = False  # a master that acknowledges nothing now (deposed, learning, no lease or quorum)
    master_address: str = ""  # a follower's master
    stale_ms: int = 0  # > 0: the member that answered could not reach this one for that long (its role is last-known)
    arbiter_epoch: int = 0  # the group's epoch as the arbiter's record says, read by this member


@dataclass(frozen=True)
class Node:
    """A node of the route: a replica group, reached at its master's address. Without
    replication a group is one member named like the group."""

    name: str
    address: str
    ready: bool
    queue_ids: tuple[int, ...]
    members: tuple[Member, ...] = ()

    def read_address(self) -> str | None:
        """Where to read: the master, else a ready follower that serves reads."""
        if self.ready:
            return self.address
        for m in self.members:
            if m.ready and m.read_enabled:
                return m.address
        return None


def group_nodes(members: list[tuple[Member, str, tuple[int, ...]]]) -> list[Node]:
    """(member, its group, its queue ids) of every member → one Node per group, reached at its
    master: ready while a master takes writes that is ready, not fenced, and of the newest
    epoch any member of the group shows (a master that has not yet learned it was replaced is
    never written to, nor is one that was paused and fenced)."""
    groups: dict[str, list[tuple[Member, tuple[int, ...]]]] = {}
    for m, group, qids in members:
        groups.setdefault(group or m.name or m.address, []).append((m, qids))
    out = []
    for name, ms in groups.items():
        newest = max(max(m.epoch, m.arbiter_epoch) for m, _ in ms)
        masters = sorted((x for x in ms if x[0].role != "SLAVE"), key=lambda x: (x[0].epoch, x[0].ready), reverse=True)
        live = [x for x in masters if x[0].ready and not x[0].fenced and x[0].epoch >= newest]
        head = live[0] if live else (masters[0] if masters else ms[0])
        qids = head[1] or next((q for _, q in ms if q), ())
        out.append(Node(name, head[0].address, bool(live), tuple(qids), tuple(m for m, _ in ms)))
    return out


class KeyQueueDown(LookupError):
    """The queue a key hashes to is on a node that is down."""

    def __init__(self, key: str, queue: QueueRef):
        super().__init__(
            f"the queue of key {key!r} ({queue}) is on node {queue.node}, which is down; sends with this key fail until it is back, "
            "to keep their order (allow reordering to send them to another queue meanwhile)"
        )
        self.key = key
        self.queue = queue


def first_turn() -> int:
    """Where a round robin starts: at random, as RocketMQ's ThreadLocalIndex does. From 0, every
    short-lived process (a CLI send, a script's first sends) put its keyless messages on the
    first queue."""
    return random.randrange(1 << 16)


class Route:
    """The nodes serving a topic, with health marks for failover."""

    def __init__(self, topic: str, nodes: list[Node]):
        self.topic = topic
        self.nodes = nodes
        self.fetched_at = time.monotonic()
        self._counter = itertools.count(first_turn())
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

    def key_queues(self) -> list[QueueRef]:
        """Every (node, queue) of the topic, ready or not, in a fixed order (node, queue id).
        A node down since before its queues were known counts with the queues of the others."""
        known = next((n.queue_ids for n in self.nodes if n.queue_ids), ())
        pairs = [QueueRef(n.name or n.address, n.address, q) for n in self.nodes for q in (n.queue_ids or known)]
        return sorted(pairs, key=lambda p: (p.node, p.queue_id))

    def for_key(self, key: str) -> QueueRef:
        """The queue of ``key``, whether or not its node is up."""
        qs = self.key_queues()
        if not qs:
            raise LookupError(f"no node serves topic {self.topic}")
        return qs[zlib.crc32(key.encode("utf-8", "surrogatepass")) % len(qs)]

    def is_up(self, q: QueueRef) -> bool:
        node = self.node(q.address)
        return node is not None and node.ready and self._down.get(q.address, 0) <= time.monotonic()

    def pick(
        self, key: str | None = None, exclude: set[str] | frozenset = frozenset(), reorder: bool = False, turn: int | None = None
    ) -> QueueRef:
        """Round robin over the usable queues (``turn``: the caller's own count, which outlives
        this route's refreshes); with a key, the key's queue (raising :class:`KeyQueueDown`
        when its node is down, unless ``reorder`` allows another one)."""
        if key is not None:
            q = self.for_key(key)
            if self.is_up(q) and q.address not in exclude:
                return q
            if not reorder:
                raise KeyQueueDown(key, q)
        qs = [q for q in self.usable() if q.address not in exclude] or self.usable()
        if not qs:
            raise LookupError(f"no ready node serves topic {self.topic}")
        if key is not None:
            return qs[zlib.crc32(key.encode("utf-8", "surrogatepass")) % len(qs)]
        return qs[(next(self._counter) if turn is None else turn) % len(qs)]

    def mark_down(self, address: str) -> None:
        with self._lock:
            self._down[address] = time.monotonic() + DOWN_FOR_S

    def write_address(self, q: QueueRef) -> str:
        """Where the queue's group takes writes and commits now: its master (the new one, after
        a failover), else the address the queue was known at."""
        node = self.node(q.node)
        return node.address if node is not None and node.ready else q.address

    def read_address(self, q: QueueRef) -> str | None:
        """Where to read the queue: its master, else a ready follower that serves reads
        (slaveReadEnable); None when this route knows no such member."""
        node = self.node(q.node)
        return q.address if node is None else node.read_address()

    def node(self, name_or_address: str) -> Node | None:
        for n in self.nodes:
            if name_or_address in (n.name, n.address):
                return n
        return None


class Suspects:
    """Addresses whose last call failed in transport (down, paused, cut off): asked for a route
    only after every other, and a master that failed is sent to again only once it answers a
    quick probe, so a paused master costs a client one timeout, not one per retry."""

    def __init__(self) -> None:
        self._since: dict[str, float] = {}

    def mark(self, address: str) -> None:
        self._since[address] = time.monotonic()

    def clear(self, address: str) -> None:
        self._since.pop(address, None)

    def __contains__(self, address: str) -> bool:
        at = self._since.get(address)
        return at is not None and time.monotonic() - at < SUSPECT_FOR_S

    def order(self, addresses: list[str]) -> list[str]:
        return sorted(addresses, key=lambda a: a in self)  # stable: the given order otherwise


def known_addresses(endpoints: list[str], routes, answers=()) -> list[str]:
    """Where to ask for a route: the endpoints given, then every member any route (or a route
    answer just received) named (a client given only a master's address finds the group
    again after that master died)."""
    found = [m.address for r in routes for n in r.nodes for m in (n.members or ())]
    found += [n.address for r in routes for n in r.nodes]
    found += [n.address for nodes in answers for n in nodes if n.address]
    return list(dict.fromkeys([*endpoints, *found]))


UNANSWERED_MS = 2**32 - 1  # a member the answering one never reached


def merge_answers(answers: list) -> list:
    """NodeRoutes from several members' GetRoute answers: for each member, the entry that is
    freshest (its own answer over another's last-known view of it)."""
    best: dict[str, object] = {}
    for nodes in answers:
        for n in nodes:
            key = n.name or n.address
            if key not in best or n.stale_ms < best[key].stale_ms:  # type: ignore[attr-defined]
                best[key] = n
    return list(best.values())


def confirmed(resp_nodes) -> bool:
    """Whether a route answer can be taken as it is: every replicated group's master is one
    the answer saw answer (not a last-known role) and takes writes. Otherwise a client asks the
    other members too (a member cut off from its group lists the others as it last saw them)."""
    for node in nodes_of(resp_nodes):
        if len(node.members) < 2:
            continue
        if not node.ready:
            return False
        head = next((m for m in node.members if m.address == node.address), None)
        if head is None or head.stale_ms > 0:
            return False
    return True


def nodes_of(resp_nodes) -> list[Node]:
    """GetRoute's NodeRoutes (one per member) as the route's nodes (one per replica group)."""
    members = [
        (
            Member(
                n.name,
                n.address,
                n.role or "MASTER",
                n.ready,
                n.read_enabled or n.role != "SLAVE",
                n.epoch,
                n.lag_bytes,
                n.fenced,
                n.master_address,
                n.stale_ms,
                n.arbiter_epoch,
            ),
            n.group,
            tuple(n.queue_ids),
        )
        for n in resp_nodes
    ]
    return group_nodes(members)


# Answers that say the group's master may have changed ("not master", "replicas missing"): the
# route is read again and, when it names another master for the group, the send goes there.
REROUTE = frozenset({"SLAVE_NOT_AVAILABLE", "FLUSH_SLAVE_TIMEOUT", "IN_SYNC_REPLICAS_NOT_ENOUGH", "SERVICE_NOT_AVAILABLE"})
# Of those, the ones a master gives when it may not acknowledge at all (fenced, deposed, without
# its lease or quorum): in a replicated group the client waits for another master.
REFUSED = frozenset({"SERVICE_NOT_AVAILABLE"})


def on_master(route: Route, target: QueueRef) -> QueueRef | None:
    """The queue at its group's writable master in ``route`` (None while the group has none)."""
    node = route.node(target.node)
    if node is None or not node.ready:
        return None
    return QueueRef(target.node, node.address, target.queue_id)


def replicated(route: Route, target: QueueRef) -> bool:
    node = route.node(target.node)
    return node is not None and len(node.members) > 1
