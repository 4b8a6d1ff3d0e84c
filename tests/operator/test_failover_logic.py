"""The replication controller's decisions as plain functions (no cluster, no processes)."""

from __future__ import annotations

from msgstore_operator import replication as r
from msgstore_operator.pods import PodView
from msgstore_operator.spec import parse

NAMES = ["s-0", "s-1", "s-2"]


def spec(**replication):
    return parse(
        {
            "metadata": {"name": "s", "namespace": "ns"},
            "spec": {"replicas": 1, "replication": {"replicas": 3, "failoverAfterSeconds": 10, **replication}},
        }
    )


def pod(i: int, role: str = "SLAVE", end: int = 100, epoch: int = 1, ready: bool = True, master: str = "10.0.0.1:10911", connected=True):
    return PodView(
        name=f"s-{i}",
        ordinal=i,
        ip=f"10.0.0.{i + 1}",
        ready=ready,
        deleting=False,
        restart_hash="",
        role={
            "role": role,
            "epoch": epoch,
            "end_offset": end,
            "master_address": "" if role == "MASTER" else master,
            "lag_bytes": 0,
            "lag_seconds": 0.0,
            "connected": connected,
        },
    )


def test_the_spec_names_groups_and_pods():
    s = spec()
    assert s.pods == 3 and s.groups() == {"s-g0": NAMES}
    s2 = parse({"metadata": {"name": "s"}, "spec": {"replicas": 2, "replication": {"replicas": 2}}})
    assert s2.groups() == {"s-g0": ["s-0", "s-1"], "s-g1": ["s-2", "s-3"]}
    assert s2.store["inSyncReplicas"] == "2" and s2.store["slaveReadEnable"] == "true"


def test_a_new_group_starts_with_its_first_member_as_master_and_points_the_others_at_it():
    pods = {p.name: p for p in (pod(0, "MASTER"), pod(1, master=""), pod(2))}
    plan = r.plan_group(spec(), "s-g0", NAMES, pods, {}, now=1000)
    assert plan.state == {"master": "s-0", "epoch": 1, "address": "10.0.0.1:10911", "endOffset": 100}
    assert plan.actions == [r.Follow("s-1", "10.0.0.1:10911")]  # s-2 already follows it


def test_a_master_not_ready_waits_for_failover_after_seconds_then_the_follower_holding_most_wins():
    s = spec()
    pods = {p.name: p for p in (pod(0, "MASTER", ready=False), pod(1, end=500), pod(2, end=900))}
    state = {"master": "s-0", "epoch": 1, "address": "10.0.0.1:10911"}
    first = r.plan_group(s, "s-g0", NAMES, pods, state, now=1000)
    assert first.actions == [] and "not ready" in first.waiting and first.state["masterNotReadySince"]
    later = r.plan_group(s, "s-g0", NAMES, pods, first.state, now=1009)
    assert later.actions == [] and later.waiting
    due = r.plan_group(s, "s-g0", NAMES, pods, first.state, now=1010)
    # the old master, still answering though not Ready, is told to follow too (fenced)
    assert due.actions == [r.Promote("s-2", 2, "SYNC"), r.Follow("s-0", "10.0.0.3:10911"), r.Follow("s-1", "10.0.0.3:10911")]
    assert due.state["master"] == "s-2" and due.state["epoch"] == 2 and due.state["lastFailover"]["endOffset"] == 900
    assert due.events[0][1] == "Failover" and "s-2" in due.events[0][2]


def test_no_ready_follower_blocks_the_failover_and_says_so():
    pods = {p.name: p for p in (pod(0, "MASTER", ready=False), pod(1, ready=False), pod(2, ready=False))}
    plan = r.plan_group(spec(), "s-g0", NAMES, pods, {"master": "s-0", "epoch": 3, "masterNotReadySince": r.iso(0)}, now=100)
    assert plan.actions == [] and "no follower is ready" in plan.blocked and plan.state["master"] == "s-0"


def test_an_old_master_that_came_back_is_made_to_follow():
    pods = {p.name: p for p in (pod(0, "MASTER", epoch=1), pod(1, "MASTER", epoch=2), pod(2, master="10.0.0.2:10911", epoch=2))}
    plan = r.plan_group(spec(), "s-g0", NAMES, pods, {"master": "s-1", "epoch": 2}, now=0)
    assert plan.actions == [r.Follow("s-0", "10.0.0.2:10911")]


def test_a_promotion_that_did_not_take_is_retried_at_a_new_epoch():
    pods = {p.name: p for p in (pod(0, "SLAVE", epoch=4, master=""), pod(1, epoch=4))}
    plan = r.plan_group(spec(), "s-g0", NAMES[:2], pods, {"master": "s-0", "epoch": 4}, now=0)
    assert plan.actions[0] == r.Promote("s-0", 5, "SYNC") and plan.state["epoch"] == 5


def test_switchover_picks_a_connected_follower_and_makes_the_master_follow():
    pods = {p.name: p for p in (pod(0, "MASTER"), pod(1, end=100, connected=False), pod(2, end=90))}
    plan = r.plan_switchover(spec(), "s-g0", NAMES, pods, {"master": "s-0", "epoch": 2})
    assert plan is not None and plan.actions == [
        r.Promote("s-2", 3, "SYNC"),
        r.Follow("s-0", "10.0.0.3:10911"),
        r.Follow("s-1", "10.0.0.3:10911"),
    ]
    nobody = {p.name: p for p in (pod(0, "MASTER"), pod(1, connected=False))}
    assert r.plan_switchover(spec(), "s-g0", NAMES[:2], nobody, {"master": "s-0", "epoch": 2}) is None


def test_the_roles_document_is_what_the_server_reads():
    from msgstore.ha.roles import parse as read_roles

    doc = r.roles_document(spec(), {"s-g0": {"master": "s-1", "epoch": 3, "address": "10.0.0.2:10911"}})
    mine = read_roles(doc, "s-0")
    assert mine is not None and not mine.is_master and mine.master_address == "10.0.0.2:10911" and mine.epoch == 3
    assert read_roles(doc, "s-1").broker_role == "SYNC_MASTER"


def test_a_master_whose_log_went_backwards_is_replaced_at_once():
    """Its pod came back on an empty volume (the PVC was deleted): a follower holds the data."""
    pods = {p.name: p for p in (pod(0, "SLAVE", end=0, epoch=0, master=""), pod(1, end=900), pod(2, end=800))}
    state = {"master": "s-0", "epoch": 1, "address": "10.0.0.9:10911", "endOffset": 900}
    plan = r.plan_group(spec(), "s-g0", NAMES, pods, state, now=5)
    assert plan.actions[0] == r.Promote("s-1", 2, "SYNC") and plan.state["endOffset"] == 900
    assert "lost its data" in plan.events[0][2]
    assert r.Follow("s-0", "10.0.0.2:10911") in plan.actions  # the emptied member copies the new master


def test_a_master_is_followed_by_its_recorded_end_offset():
    pods = {p.name: p for p in (pod(0, "MASTER", end=1000), pod(1, end=1000, master="10.0.0.1:10911"))}
    plan = r.plan_group(spec(), "s-g0", NAMES[:2], pods, {"master": "s-0", "epoch": 1, "endOffset": 400}, now=0)
    assert plan.actions == [] and plan.state["endOffset"] == 1000
    behind = {"s-0": pod(0, "MASTER", end=10), "s-1": pod(1, end=5, master="10.0.0.1:10911")}
    plan = r.plan_group(spec(), "s-g0", NAMES[:2], behind, {"master": "s-0", "epoch": 1, "endOffset": 400}, now=0)
    assert plan.actions == [] and not plan.events  # nobody holds more: nothing to fail over to
