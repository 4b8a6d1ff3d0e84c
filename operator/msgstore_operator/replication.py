"""Replica groups as the operator runs them: which member of each group is master, at what epoch
and address; failover when a master stays not Ready; moving mastership away before a roll
restarts a master; the roles document every pod reads. Plain decisions over what was observed
(reconcile.py carries the actions out), as RocketMQ's controller elects a new master from the
in-sync replicas and bumps the epoch.
"""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass, field
from typing import Any

from .pods import PodView
from .spec import Spec


@dataclass(frozen=True)
class Promote:
    pod: str
    epoch: int
    mode: str


@dataclass(frozen=True)
class Follow:
    pod: str
    address: str


@dataclass
class GroupPlan:
    group: str
    state: dict[str, Any]  # the group's entry in status.replication.groups once the actions succeed
    actions: list[Promote | Follow] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    waiting: str = ""  # a master not Ready, not yet for failoverAfterSeconds
    blocked: str = ""  # a failover that cannot happen (no ready follower)


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def parse_iso(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def _usable(p: PodView | None) -> bool:
    return p is not None and p.ready and not p.deleting and p.role is not None and bool(p.ip)


def _lost_data(master: PodView | None, others: list[PodView | None], recorded_end: int) -> bool:
    """The master's log ends before where it was seen to end (its volume was replaced or
    emptied) while a follower holds more: that follower must take over."""
    if not _usable(master) or master is None or master.role is None or master.role["end_offset"] >= recorded_end:
        return False
    return any(_usable(p) and p is not None and p.role is not None and p.role["end_offset"] > master.role["end_offset"] for p in others)


def _ready_followers(names: list[str], pods: dict[str, PodView], master: str) -> list[PodView]:
    """The group's members other than ``master`` that are Ready, answer, and follow."""
    return [p for n in names if n != master and _usable(p := pods.get(n)) and p is not None and p.role["role"] == "SLAVE"]


def _holding_most(followers: list[PodView]) -> PodView:
    """The follower whose log reaches furthest (the lowest ordinal among equals)."""
    return max(followers, key=lambda p: (p.role["end_offset"] if p.role else 0, -p.ordinal))


def address(spec: Spec, p: PodView) -> str:
    return f"{p.ip}:{spec.port}"


def plan_group(spec: Spec, group: str, names: list[str], pods: dict[str, PodView], state: dict[str, Any], now: float) -> GroupPlan:
    """What the group needs now: its master promoted or confirmed, followers pointed at it, or
    (a master not Ready for failoverAfterSeconds) the follower holding the most promoted."""
    state = {k: v for k, v in state.items() if k != "members"}
    if state.get("master") not in names:
        state = {"master": names[0], "epoch": 1}  # a new group: its first member starts as master
    plan = GroupPlan(group, state)
    mode = spec.replication.mode
    master = pods.get(state["master"])
    # a master whose log went backwards lost its volume (replaced, emptied): fail over at once
    lost = _lost_data(master, [pods.get(n) for n in names if n != state["master"]], int(state.get("endOffset", 0)))
    if _usable(master) and not lost:
        assert master is not None and master.role is not None
        state["endOffset"] = max(int(state.get("endOffset", 0)), int(master.role["end_offset"]))
        state.pop("masterNotReadySince", None)
        state["address"] = address(spec, master)
        if master.role["role"] != "MASTER":  # a promotion that did not take: a new term, never one a follower holds
            state["epoch"] = max(int(state["epoch"]), int(master.role["epoch"])) + 1
            plan.actions.append(Promote(master.name, int(state["epoch"]), mode))
        elif master.role["epoch"] < state["epoch"]:
            plan.actions.append(Promote(master.name, int(state["epoch"]), mode))
        _repoint(plan, names, pods, state["master"], state["address"])
        return plan
    since = parse_iso(state.get("masterNotReadySince"))
    if since is None:
        since = now
    state["masterNotReadySince"] = iso(since)
    after = 0 if lost else spec.replication.failover_after_s
    if now - since < after:
        plan.waiting = f"{group}: master {state['master']} not ready for {now - since:.0f} s (failover after {after} s)"
        return plan
    candidates = _ready_followers(names, pods, state["master"])
    if not candidates:
        plan.blocked = f"{group}: master {state['master']} not ready for {now - since:.0f} s and no follower is ready to take over"
        return plan
    best = _holding_most(candidates)
    assert best.role is not None
    epochs = [int(state["epoch"]), *(int(p.role["epoch"]) for p in candidates if p.role)]
    if master is not None and master.role is not None:
        epochs.append(int(master.role["epoch"]))
    epoch = max(epochs) + 1
    plan.actions.append(Promote(best.name, epoch, mode))
    old = state["master"]
    plan.state = {
        "master": best.name,
        "epoch": epoch,
        "address": address(spec, best),
        "endOffset": int(best.role["end_offset"]),
        "lastFailover": {"time": iso(now), "from": old, "to": best.name, "epoch": epoch, "endOffset": int(best.role["end_offset"])},
    }
    why = (
        f"lost its data (its log ends at {master.role['end_offset'] if master and master.role else 0})"
        if lost
        else f"not ready for {now - since:.0f} s"
    )
    plan.events.append(
        (
            "Warning",
            "Failover",
            f"{group}: master {old} {why}; promoted {best.name} "
            f"(end offset {best.role['end_offset']}, the most of the ready followers) at epoch {epoch}",
        )
    )
    _repoint(plan, names, pods, best.name, plan.state["address"])
    return plan


def plan_switchover(spec: Spec, group: str, names: list[str], pods: dict[str, PodView], state: dict[str, Any]) -> GroupPlan | None:
    """Before a roll restarts a group's master: promote its most caught-up connected follower,
    and make the old master follow it. None when no follower is ready (the roll waits)."""
    candidates = [p for p in _ready_followers(names, pods, state.get("master", "")) if p.role and p.role["connected"]]
    if not candidates:
        return None
    best = _holding_most(candidates)
    epoch = int(state.get("epoch", 1)) + 1
    new_state = {
        **{k: v for k, v in state.items() if k != "members"},
        "master": best.name,
        "epoch": epoch,
        "address": address(spec, best),
        "endOffset": int(best.role["end_offset"]) if best.role else 0,
    }
    new_state.pop("masterNotReadySince", None)
    plan = GroupPlan(group, new_state, [Promote(best.name, epoch, spec.replication.mode)])
    _repoint(plan, names, pods, best.name, new_state["address"], force=frozenset({state.get("master", "")}))
    plan.events.append(
        ("Normal", "Switchover", f"{group}: mastership moved from {state.get('master')} to {best.name} (epoch {epoch}) before a restart")
    )
    return plan


def _repoint(
    plan: GroupPlan, names: list[str], pods: dict[str, PodView], master: str, addr: str, force: frozenset[str] = frozenset()
) -> None:
    for n in names:
        p = pods.get(n)
        if n == master or p is None or p.role is None or p.deleting:
            continue
        if n in force or p.role["role"] == "MASTER" or p.role["master_address"] != addr:
            plan.actions.append(Follow(n, addr))


def roles_document(spec: Spec, groups: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The roles file (msgstore.ha.roles): every group's members, master, address, epoch, mode."""
    out = {}
    for g, names in spec.groups().items():
        st = groups.get(g) or {"master": names[0], "epoch": 1}
        out[g] = {
            "members": names,
            "master": st["master"],
            "address": st.get("address", ""),
            "epoch": int(st["epoch"]),
            "mode": spec.replication.mode,
        }
    return {"groups": out}


def member_figures(names: list[str], pods: dict[str, PodView], master: str) -> list[dict[str, Any]]:
    """Per member: role, epoch, end offset, lag in bytes and seconds (status.replication)."""
    out = []
    for n in names:
        p = pods.get(n)
        entry: dict[str, Any] = {"name": n, "ready": bool(p and p.ready)}
        if p is not None and p.role is not None:
            r = p.role
            entry.update(role=r["role"], epoch=int(r["epoch"]), endOffset=int(r["end_offset"]))
            if r["role"] == "SLAVE":
                entry.update(lagBytes=int(r["lag_bytes"]), lagSeconds=round(float(r["lag_seconds"]), 3), connected=bool(r["connected"]))
        elif n == master:
            entry["role"] = "MASTER"
        out.append(entry)
    return out
