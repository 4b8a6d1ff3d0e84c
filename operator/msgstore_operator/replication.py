"""Replica groups as the operator runs them: which member of each group is master, at what epoch
and address; failover when a master stays unhealthy; moving mastership away before a roll
restarts a master; the roles document every pod reads. Plain decisions over what was observed
(reconcile.py carries the actions out), as RocketMQ's controller elects from the in-sync
replicas and bumps the epoch.

The group's Lease (``coordination.k8s.io``, one per group) is the record and the arbiter: it
names the master and its epoch, which the operator writes *before* it promotes anyone (a
promotion that timed out is retried at the same epoch, never elected twice), and the master
renews it and publishes its in-sync set there. A failover happens only once the old master can
no longer acknowledge: it answered a Fence, or the operator has seen its Lease go unrenewed for
the lease's whole duration (by the operator's own clock: client-go's rule). Candidates come only
from the in-sync set, ranked by (last epoch, end offset); ``uncleanElection`` allows others,
said in an Event.
"""

from __future__ import annotations

import calendar
import datetime
import time
from dataclasses import dataclass, field
from typing import Any

from msgstore.ha.lease import END_OFFSET, EPOCH, IN_SYNC

from .pods import PodView
from .spec import Spec


@dataclass(frozen=True)
class Fence:
    """The old master acknowledges nothing from now on (it must answer, or the step stops)."""

    pod: str
    epoch: int


@dataclass(frozen=True)
class CatchUp:
    """Until ``pod`` holds everything the fenced master has (a switchover loses nothing)."""

    pod: str


@dataclass(frozen=True)
class TakeLease:
    """The election's record: the Lease names ``holder`` at ``epoch`` (compare-and-swap)."""

    holder: str
    epoch: int


@dataclass(frozen=True)
class Promote:
    pod: str
    epoch: int
    mode: str


@dataclass(frozen=True)
class Follow:
    pod: str
    address: str
    epoch: int = 0


Action = Fence | CatchUp | TakeLease | Promote | Follow


@dataclass
class LeaseView:
    holder: str
    epoch: int
    in_sync: tuple[str, ...]
    renew_time: str
    duration: float
    end_offset: int = 0  # the holder's log end at its last renewal
    first_seen: float | None = None  # when this operator first saw renew_time (lease_clock), if it knows
    uid: str = ""  # the Lease object's (one made again under the same name is another Lease)

    @staticmethod
    def of(obj: dict[str, Any] | None) -> LeaseView | None:
        if not obj:
            return None
        spec, ann = obj.get("spec") or {}, (obj.get("metadata") or {}).get("annotations") or {}
        try:
            epoch = int(ann.get(EPOCH, "0"))
        except ValueError:
            epoch = 0
        members = tuple(m for m in str(ann.get(IN_SYNC, "")).split(",") if m)
        holder, renewed = str(spec.get("holderIdentity") or ""), str(spec.get("renewTime") or "")
        end = str(ann.get(END_OFFSET, "0"))
        duration = float(spec.get("leaseDurationSeconds") or 15)
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        return LeaseView(holder, epoch, members, renewed, duration, int(end) if end.isdigit() else 0, uid=uid)


@dataclass
class GroupPlan:
    group: str
    state: dict[str, Any]  # the group's entry in status.replication.groups once the actions succeed
    actions: list[Action] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    waiting: str = ""  # a master unhealthy, not yet for failoverAfterSeconds; a lease not yet expired
    blocked: str = ""  # a failover that cannot happen (no member of the in-sync set ready)
    fence_optional: bool = False  # the lease expired: a Fence that fails does not stop the failover


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
    """The master's log ends before where it was seen to end, or holds nothing at all (its
    volume was replaced or emptied), while a follower holds more: that follower must take over."""
    if not _usable(master) or master is None or master.role is None:
        return False
    end = int(master.role["end_offset"])
    empty = end == 0 and not int(master.role.get("last_epoch", 0))
    if end >= recorded_end and not empty:
        return False
    return any(_usable(p) and p is not None and p.role is not None and p.role["end_offset"] > end for p in others)


def stale_master_role(lease: LeaseView | None, pods: dict[str, PodView]) -> str | None:
    """The Lease's holder, when the Lease records a log end beyond the one its role showed.

    The pods' roles are read before the Lease: under writes the master may renew it in between,
    with its newer end, and its log would then look as if it had gone backwards while a
    follower, asked later, holds more: a false "lost its data" failover (seen in the e2e suite,
    the healthy master of epoch 2 replaced 1.8 s after its election). Its role is to be asked
    again, after the Lease, before that is judged."""
    if lease is None or not lease.end_offset:
        return None
    p = pods.get(lease.holder)
    if p is None or p.role is None or int(p.role.get("end_offset", 0)) >= lease.end_offset:
        return None
    return p.name


def _ready_followers(names: list[str], pods: dict[str, PodView], master: str) -> list[PodView]:
    """The group's members other than ``master`` that are Ready, answer, and follow."""
    return [p for n in names if n != master and _usable(p := pods.get(n)) and p is not None and p.role["role"] == "SLAVE"]


def _rank(p: PodView) -> tuple[int, int, int]:
    """Who holds the most of the newest history: (last epoch, end offset), the lowest ordinal among equals."""
    r = p.role or {}
    return int(r.get("last_epoch", r.get("epoch", 0))), int(r.get("end_offset", 0)), -p.ordinal


def address(spec: Spec, p: PodView) -> str:
    return f"{p.ip}:{spec.port}"


def micro_iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_iso(text: str | None) -> float | None:
    try:
        return datetime.datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.UTC).timestamp()
    except ValueError:
        return None


def lease_seen(state: dict[str, Any], lease: LeaseView | None, now: float) -> tuple[dict[str, Any], float]:
    """When the operator last saw the Lease renewed (its own clock, to the microsecond: a
    rounded-down time would make it expire early), and how long ago. A renewal the status has
    not recorded yet counts from the operator's first sight of it (``first_seen``: an earlier
    pass or Lease check), else from now."""
    seen = dict(state.get("lease") or {})
    if lease is None:
        return seen, 0.0
    at = parse_micro_iso(seen.get("seenAt"))
    if seen.get("renewTime") != lease.renew_time or at is None:
        at = lease.first_seen if lease.first_seen is not None and lease.first_seen <= now else now
        seen = {"renewTime": lease.renew_time, "seenAt": micro_iso(at)}
    # the longest duration this renewal was seen with: a master counts its renewal valid by the
    # duration it read when it renewed, and failoverAfterSeconds shortened since must not make
    # the operator judge that renewal by the new, shorter one
    seen["duration"] = max(lease.duration, _number(seen.get("duration")))
    return seen, now - at


def _number(value: Any) -> float:
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


def judged_duration(state: dict[str, Any], lease: LeaseView) -> float:
    """The duration the Lease's current renewal is judged by (see lease_seen)."""
    return max(lease.duration, _number((state.get("lease") or {}).get("duration")))


def lapses_at(plan: GroupPlan, lease: LeaseView | None) -> float | None:
    """When the group's master loses its Lease unless it renews it again (the operator's wall
    clock): the moment to look at the Lease again. A master cut off from the API server stays
    Ready, so no pod event brings the operator back; without this look it would wait for its
    next periodic pass (reconcileInterval) to see the Lease lapse. None: no master holds the
    Lease (an election under way) or it has no renewal to judge."""
    if lease is None or not lease.renew_time or lease.holder != plan.state.get("master"):
        return None
    at = parse_micro_iso((plan.state.get("lease") or {}).get("seenAt"))
    return None if at is None else at + judged_duration(plan.state, lease)


def plan_group(
    spec: Spec, group: str, names: list[str], pods: dict[str, PodView], state: dict[str, Any], now: float, lease: LeaseView | None = None
) -> GroupPlan:
    """What the group needs now: its master (the Lease's) promoted or confirmed, followers
    pointed at it, or, the master unhealthy for failoverAfterSeconds and unable to acknowledge,
    a member of its in-sync set elected."""
    state = {k: v for k, v in state.items() if k != "members"}
    if state.get("master") not in names:
        state = {"master": names[0], "epoch": 1}  # a new group: its first member starts as master
    if lease is not None and lease.holder in names:  # the Lease is the record (an election this operator made, maybe unfinished)
        if (lease.holder, lease.epoch) != (state.get("master"), int(state.get("epoch", 0))):
            state = {k: v for k, v in state.items() if k not in ("address", "endOffset")}
        state["master"], state["epoch"] = lease.holder, max(1, lease.epoch)
    state["lease"], unrenewed = lease_seen(state, lease, now)
    plan = GroupPlan(group, state)
    mode = spec.replication.mode
    master = pods.get(state["master"])
    epoch = int(state["epoch"])
    # a master whose log went backwards lost its volume (replaced, emptied): fail over at once
    recorded = max(int(state.get("endOffset", 0)), lease.end_offset if lease is not None and lease.holder == state["master"] else 0)
    lost = _lost_data(master, [pods.get(n) for n in names if n != state["master"]], recorded)
    # a master that is Ready (its own node sees it healthy) but has not renewed its Lease for the
    # Lease's whole duration is cut off from the API server: it acknowledges nothing any more, and
    # left alone the group would never take a write again (a zombie partition)
    duration = judged_duration(state, lease) if lease is not None else 0.0
    lapsed = lease is not None and lease.holder == state["master"] and bool(lease.renew_time) and unrenewed >= duration
    if _usable(master) and not lost and not lapsed:
        assert master is not None and master.role is not None
        state["endOffset"] = max(int(state.get("endOffset", 0)), int(master.role["end_offset"]))
        state.pop("masterNotReadySince", None)
        state["address"] = address(spec, master)
        if master.role["role"] != "MASTER" or int(master.role["epoch"]) < epoch:
            plan.actions.append(Promote(master.name, epoch, mode))  # the recorded term (a retry is a no-op once done)
        _repoint(plan, names, pods, state["master"], state["address"], epoch)
        return plan
    since = parse_iso(state.get("masterNotReadySince"))
    if since is None:
        since = now
    state["masterNotReadySince"] = iso(since)
    after = 0 if lost or lapsed else spec.replication.failover_after_s
    if now - since < after:
        plan.waiting = f"{group}: master {state['master']} not ready for {now - since:.0f} s (failover after {after} s)"
        return plan
    expired = lease is None or unrenewed >= duration
    reachable = master is not None and master.role is not None and bool(master.ip) and not master.deleting
    if not expired and not reachable:
        plan.waiting = (
            f"{group}: master {state['master']} not ready and not answering; its Lease was renewed {unrenewed:.0f} s ago: "
            f"electing once it has gone unrenewed for {duration:.0f} s (it stops acknowledging before then)"
        )
        return plan
    candidates = _candidates(spec, names, pods, state["master"], lease)
    unclean = False
    if not candidates and spec.replication.unclean_election:
        candidates, unclean = _ready_followers(names, pods, state["master"]), True
    if not candidates:
        in_sync = ", ".join(m for m in (lease.in_sync if lease else ()) if m != state["master"]) or "none"
        plan.blocked = (
            f"{group}: master {state['master']} not ready for {now - since:.0f} s and no member of its in-sync set "
            f"({in_sync}) is ready to take over (spec.replication.uncleanElection allows another)"
        )
        return plan
    best = max(candidates, key=_rank)
    assert best.role is not None
    known = [epoch, *(int((p.role or {}).get("group_epoch", (p.role or {}).get("epoch", 0))) for p in pods.values() if p.name in names)]
    new = max(known) + 1
    old = state["master"]
    if reachable:
        plan.actions.append(Fence(old, new))
        plan.fence_optional = expired
    plan.actions += [TakeLease(best.name, new), Promote(best.name, new, mode)]
    plan.state = {
        "master": best.name,
        "epoch": new,
        "address": address(spec, best),
        "endOffset": int(best.role["end_offset"]),
        "lease": {},
        "lastFailover": {
            "time": iso(now),
            "from": old,
            "to": best.name,
            "epoch": new,
            "endOffset": int(best.role["end_offset"]),
            **({"unclean": True} if unclean else {}),
        },
    }
    why = (
        f"lost its data (its log ends at {master.role['end_offset'] if master and master.role else 0})"
        if lost
        else f"did not renew its Lease for {unrenewed:.0f} s (cut off from the API server)"
        if lapsed and _usable(master)
        else f"not ready for {now - since:.0f} s"
    )
    plan.events.append(
        (
            "Warning",
            "Failover",
            f"{group}: master {old} {why}; promoted {best.name} (end offset {best.role['end_offset']}, "
            f"{'NOT in the in-sync set: uncleanElection' if unclean else 'the most of the in-sync set'}) at epoch {new}",
        )
    )
    if unclean:
        plan.events.append(
            ("Warning", "UncleanElection", f"{group}: {best.name} was elected outside the in-sync set and may lack messages")
        )
    _repoint(plan, names, pods, best.name, plan.state["address"], new, force=frozenset({old}) if reachable else frozenset())
    return plan


def _candidates(spec: Spec, names: list[str], pods: dict[str, PodView], master: str, lease: LeaseView | None) -> list[PodView]:
    """Ready followers in the in-sync set the Lease holds (none without a Lease: nobody knows who is in sync)."""
    in_sync = set(lease.in_sync) if lease is not None else set()
    return [p for p in _ready_followers(names, pods, master) if p.name in in_sync]


def plan_switchover(
    spec: Spec, group: str, names: list[str], pods: dict[str, PodView], state: dict[str, Any], lease: LeaseView | None = None
) -> GroupPlan | None:
    """Before a roll restarts a group's master: fence it, let the best connected member of its
    in-sync set catch up, record it in the Lease, promote it, and make the old master follow.
    None when no such follower is ready (the roll waits)."""
    master = state.get("master", "")
    candidates = [p for p in _candidates(spec, names, pods, master, lease) if p.role and p.role["connected"]]
    if not candidates:
        return None
    best = max(candidates, key=_rank)
    known = [int(state.get("epoch", 1)), *(int((p.role or {}).get("group_epoch", 0)) for p in pods.values() if p.name in names)]
    epoch = max(known) + 1
    new_state = {
        **{k: v for k, v in state.items() if k not in ("members", "lease", "masterNotReadySince")},
        "master": best.name,
        "epoch": epoch,
        "address": address(spec, best),
        "endOffset": int(best.role["end_offset"]) if best.role else 0,
    }
    actions: list[Action] = [
        Fence(master, epoch),
        CatchUp(best.name),
        TakeLease(best.name, epoch),
        Promote(best.name, epoch, spec.replication.mode),
    ]
    plan = GroupPlan(group, new_state, actions)
    _repoint(plan, names, pods, best.name, new_state["address"], epoch, force=frozenset({master}))
    plan.events.append(("Normal", "Switchover", f"{group}: mastership moved from {master} to {best.name} (epoch {epoch}) before a restart"))
    return plan


def _repoint(
    plan: GroupPlan,
    names: list[str],
    pods: dict[str, PodView],
    master: str,
    addr: str,
    epoch: int,
    force: frozenset[str] = frozenset(),
) -> None:
    for n in names:
        p = pods.get(n)
        if n == master or p is None or p.role is None or p.deleting:
            continue
        if n in force or p.role["role"] == "MASTER" or p.role["master_address"] != addr:
            plan.actions.append(Follow(n, addr, epoch))


def roles_document(spec: Spec, groups: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The roles file (msgstore.ha.roles): every group's members, master, address, epoch, mode, Lease."""
    out = {}
    for g, names in spec.groups().items():
        st = groups.get(g) or {"master": names[0], "epoch": 1}
        out[g] = {
            "members": names,
            "master": st["master"],
            "address": st.get("address", ""),
            "epoch": int(st["epoch"]),
            "mode": spec.replication.mode,
            "lease": f"{spec.namespace}/{g}",
        }
    return {"groups": out}


def member_figures(names: list[str], pods: dict[str, PodView], master: str) -> list[dict[str, Any]]:
    """Per member: role, epoch, end offset, lag in bytes and seconds, in sync (status.replication)."""
    out = []
    for n in names:
        p = pods.get(n)
        entry: dict[str, Any] = {"name": n, "ready": bool(p and p.ready)}
        if p is not None and p.role is not None:
            r = p.role
            entry.update(role=r["role"], epoch=int(r["epoch"]), endOffset=int(r["end_offset"]))
            if r["role"] == "SLAVE":
                entry.update(lagBytes=int(r["lag_bytes"]), lagSeconds=round(float(r["lag_seconds"]), 3), connected=bool(r["connected"]))
            if r.get("fenced"):
                entry["fenced"] = r["fenced"][:200]
        elif n == master:
            entry["role"] = "MASTER"
        out.append(entry)
    return out
