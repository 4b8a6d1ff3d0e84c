"""Consumer-group logic without processes: the allocation every member computes alike, and one
node's registry of members and queue holders (on an injected clock: expiry without waiting)."""

from __future__ import annotations

import random

from msgstore.api.groups import GroupRegistry
from msgstore.client.allocation import allocate, moved
from msgstore.client.membership import Membership, broadcast_group, queue_key
from msgstore.client.routing import Node, QueueRef, Suspects

QUEUES = [QueueRef(f"store-{n}", f"127.0.0.1:{9000 + n}", q) for n in range(3) for q in range(8)]


def members(n: int, seed: int = 0) -> list[str]:
    rnd = random.Random(seed)
    return [f"host{rnd.randrange(10**6)}@{rnd.randrange(10**5)}@{k}" for k in range(n)]


def test_every_member_computes_the_same_even_split():
    group = members(3)
    a = allocate(QUEUES, group, key=queue_key)
    shuffled = QUEUES[:]
    random.Random(7).shuffle(shuffled)
    b = allocate(shuffled, list(reversed(group)), key=queue_key)  # other input order, same answer
    assert a == {m: sorted(qs, key=queue_key) for m, qs in b.items()}
    owned = [q for qs in a.values() for q in qs]
    assert sorted(owned, key=queue_key) == sorted(QUEUES, key=queue_key)  # each queue exactly once
    assert sorted(len(qs) for qs in a.values()) == [8, 8, 8]
    five = allocate(QUEUES, members(5), key=queue_key)
    assert sorted(len(qs) for qs in five.values()) == [4, 5, 5, 5, 5]
    thirty = allocate(QUEUES, members(30), key=queue_key)
    assert sorted(len(qs) for qs in thirty.values()) == [0] * 6 + [1] * 24  # more members than queues: some idle


def test_a_join_or_a_leave_moves_little_more_than_its_share():
    """Average allocation by blocks moves about half the queues when a fourth member joins 3;
    ranking moves close to the 6 that must move."""
    joins, leaves = [], []
    for seed in range(50):
        group = members(3, seed)
        before = allocate(QUEUES, group, key=queue_key)
        joins.append(moved(before, allocate(QUEUES, group + ["joiner@1"], key=queue_key)))
        leaves.append(moved(before, allocate(QUEUES, group[1:], key=queue_key)))
    assert max(joins) <= 10 and sum(joins) / len(joins) < 8  # at least 6 must move
    assert max(leaves) <= 12 and sum(leaves) / len(leaves) < 10  # at least 8 must move


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_registry_grants_a_queue_to_one_live_member_at_a_time():
    clock = Clock()
    reg = GroupRegistry(clock)
    q = ("orders", 0)
    g, granted = reg.heartbeat("billing", "a", ["orders"], "h1", 3000, [q])
    assert granted == {q} and g.generation == 1
    g, granted = reg.heartbeat("billing", "b", ["orders"], "h2", 3000, [q, ("orders", 1)])
    assert granted == {("orders", 1)} and g.generation == 2  # q is a's until a lets it go
    reg.heartbeat("billing", "a", ["orders"], "h1", 3000, [])  # a releases it (after committing)
    g, granted = reg.heartbeat("billing", "b", ["orders"], "h2", 3000, [q, ("orders", 1)])
    assert granted == {q, ("orders", 1)} and g.generation == 2  # heartbeats alone change nothing


def test_registry_expires_silent_members_and_frees_their_queues():
    clock = Clock()
    reg = GroupRegistry(clock)
    reg.heartbeat("billing", "a", ["orders"], "h1", 2000, [("orders", 0)])
    reg.heartbeat("billing", "b", ["orders"], "h2", 2000, [])
    clock.now += 1.5
    reg.heartbeat("billing", "b", ["orders"], "h2", 2000, [])
    assert sorted(reg.get("billing").members) == ["a", "b"]
    clock.now += 0.6  # a silent for 2.1 s > 2 s
    g = reg.get("billing")
    assert sorted(g.members) == ["b"] and ("orders", 0) not in g.owners and g.generation == 3
    _, granted = reg.heartbeat("billing", "b", ["orders"], "h2", 2000, [("orders", 0)])
    assert granted == {("orders", 0)}
    assert reg.unregister("billing", "b") and reg.get("billing").members == {} and reg.get("billing").owners == {}
    assert not reg.unregister("billing", "b")
    assert reg.generation("billing") == 4 and reg.generation("nobody") == 0


def test_broadcasting_members_claim_nothing_and_are_not_allocated():
    reg = GroupRegistry(Clock())
    _, granted = reg.heartbeat("audit", "x", ["orders"], "h", 0, [("orders", 0)], broadcasting=True)
    assert granted == set() and reg.get("audit").members["x"].broadcasting
    assert broadcast_group("audit", "host.example@12@ab") == "audit%host-example-12-ab"


def test_membership_allocates_from_the_leading_nodes_view():
    from msgstore.v1 import msgstore_pb2 as pb

    m = Membership("billing", "orders", "b@1", "clustering", 0.5, 2.0)
    nodes = [
        Node("store-1", "127.0.0.1:9001", True, ()),
        Node("store-0", "127.0.0.1:9000", False, ()),
        Node("store-2", "127.0.0.1:9002", True, ()),
    ]
    assert Membership.leading(nodes).name == "store-1"  # store-0 is not ready
    view = pb.HeartbeatResponse(generation=4, members=[pb.GroupMember(client_id=c, topics=["orders"]) for c in ("a@1", "b@1")])
    m.absorb(nodes[2], pb.HeartbeatResponse(generation=9, members=[pb.GroupMember(client_id="z@1", topics=["orders"])]), leader=False)
    assert m.members is None  # another node's view is not used to allocate
    m.absorb(nodes[0], view, leader=True)
    assert m.members == ("a@1", "b@1") and m.stale("127.0.0.1:9001", 5) and not m.stale("127.0.0.1:9001", 4)
    mine = m.target(QUEUES)
    assert mine == set(allocate(QUEUES, ["a@1", "b@1"], key=queue_key)["b@1"]) and len(mine) == 12


def test_an_address_that_failed_in_transport_is_asked_for_a_route_last():
    """A paused master must not cost a client a timeout on every route refresh (issue 20)."""
    s = Suspects()
    given = ["m:1", "f1:1", "f2:1"]
    assert s.order(given) == given
    s.mark("m:1")
    assert "m:1" in s and s.order(given) == ["f1:1", "f2:1", "m:1"]
    s.clear("m:1")
    assert "m:1" not in s and s.order(given) == given
