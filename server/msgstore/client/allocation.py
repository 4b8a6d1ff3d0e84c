"""Which member of a consumer group reads which (node, queue): computed by every member alike.

Every member gets the same sorted member and queue lists (from the same node's view of the
group), so every member computes the same assignment without talking to the others, as
RocketMQ's average allocation does. The split is as even as RocketMQ's (each member gets the
floor or the ceiling of queues / members), but not by contiguous blocks: a queue goes to the
member that ranks highest for it (rendezvous hashing) among those with room left. Blocks move
almost every queue when a member joins or leaves; ranking moves little more than the share that
must move, so a rebalance keeps most members' queues where they are (sticky) and re-reads less.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Sequence
from typing import TypeVar

Q = TypeVar("Q", bound=Hashable)


def _score(queue: str, member: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{queue}\x00{member}".encode(), digest_size=8).digest(), "big")


def allocate(queues: Sequence[Q], members: Sequence[str], key=str) -> dict[str, list[Q]]:
    """member → its queues. ``key`` names a queue stably across members (its node and id)."""
    members = sorted(set(members))
    if not members:
        return {}
    ordered = sorted(queues, key=key)
    base, extra = divmod(len(ordered), len(members))
    # which members take one more than the others: the ones that rank highest for the extra
    # slots, so that the choice does not depend on names sorting first
    ranked = sorted(members, key=lambda m: _score(f"extra:{len(ordered)}", m), reverse=True)
    room = {m: base + (1 if i < extra else 0) for i, m in enumerate(ranked)}
    out: dict[str, list[Q]] = {m: [] for m in members}
    for q in ordered:
        name = key(q)
        for m in sorted(members, key=lambda m: _score(name, m), reverse=True):
            if room[m] > 0:
                room[m] -= 1
                out[m].append(q)
                break
    return out


def moved(before: dict[str, list[Q]], after: dict[str, list[Q]]) -> int:
    """How many queues changed owner (a queue of a member that left counts)."""
    owner = {q: m for m, qs in before.items() for q in qs}
    return sum(1 for m, qs in after.items() for q in qs if owner.get(q) != m)
