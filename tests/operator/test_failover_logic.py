"""The replication controller's decisions as plain functions (no cluster, no processes)."""

from __future__ import annotations

from msgstore_operator import replication as r
from msgstore_operator.lease_clock import LeaseClock
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


def pod(
    i: int,
    role: str = "SLAVE",
    end: int = 100,
    epoch: int = 1,
    ready: bool = True,
    master: str = "10.0.0.1:10911",
    connected=True,
    answers: bool = True,
):
    """``answers=False``: a paused or partitioned pod (the operator's GetRole timed out)."""
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
            "last_epoch": epoch,
            "group_epoch": epoch,
        }
        if answers
        else None,
    )


def lease(holder: str = "s-0", epoch: int = 1, in_sync: tuple[str, ...] = ("s-0", "s-1", "s-2"), renewed: str = "t0", duration: float = 10):
    return r.LeaseView(holder, epoch, in_sync, renewed, duration)


def test_the_spec_names_groups_and_pods():
    s = spec()
    assert s.pods == 3 and s.groups() == {"s-g0": NAMES}
    s2 = parse({"metadata": {"name": "s"}, "spec": {"replicas": 2, "replication": {"replicas": 2}}})
    assert s2.groups() == {"s-g0": ["s-0", "s-1"], "s-g1": ["s-2", "s-3"]}
    assert s2.store["inSyncReplicas"] == "2" and s2.store["slaveReadEnable"] == "true"


def test_a_new_group_starts_with_its_first_member_as_master_and_points_the_others_at_it():
    pods = {p.name: p for p in (pod(0, "MASTER"), pod(1, master=""), pod(2))}
    plan = r.plan_group(spec(), "s-g0", NAMES, pods, {}, now=1000, lease=lease())
    assert {k: plan.state[k] for k in ("master", "epoch", "address", "endOffset")} == {
        "master": "s-0",
        "epoch": 1,
        "address": "10.0.0.1:10911",
        "endOffset": 100,
    }
    assert plan.actions == [r.Follow("s-1", "10.0.0.1:10911", 1)]  # s-2 already follows it


def test_a_paused_master_is_replaced_only_once_its_lease_has_gone_unrenewed_for_its_whole_duration():
    s = spec()
    pods = {p.name: p for p in (pod(0, "MASTER", ready=False, answers=False), pod(1, end=500), pod(2, end=900))}
    state = {"master": "s-0", "epoch": 1, "address": "10.0.0.1:10911"}
    first = r.plan_group(s, "s-g0", NAMES, pods, state, now=1000, lease=lease(renewed="t1"))
    assert first.actions == [] and "not ready" in first.waiting and first.state["masterNotReadySince"]
    assert first.state["lease"] == {"renewTime": "t1", "seenAt": r.micro_iso(1000), "duration": 10}  # the operator's own clock
    waiting = r.plan_group(s, "s-g0", NAMES, pods, first.state, now=1010, lease=lease(renewed="t1", duration=15))
    assert waiting.actions == [] and "gone unrenewed for 15 s" in waiting.waiting  # failoverAfterSeconds passed, the Lease not
    renewed = r.plan_group(s, "s-g0", NAMES, pods, waiting.state, now=1012, lease=lease(renewed="t2", duration=15))
    assert renewed.actions == [] and renewed.state["lease"]["seenAt"] == r.micro_iso(1012)  # still renewing: it may acknowledge
    due = r.plan_group(s, "s-g0", NAMES, pods, renewed.state, now=1027, lease=lease(renewed="t2", duration=15))
    # no Fence (it does not answer), the election recorded in the Lease before the promotion
    assert due.actions[:2] == [r.TakeLease("s-2", 2), r.Promote("s-2", 2, "SYNC")]
    assert r.Follow("s-1", "10.0.0.3:10911", 2) in due.actions
    assert due.state["master"] == "s-2" and due.state["epoch"] == 2 and due.state["lastFailover"]["endOffset"] == 900
    assert due.events[0][1] == "Failover" and "in-sync" in due.events[0][2]


def test_a_not_ready_master_that_still_answers_is_fenced_first():
    pods = {p.name: p for p in (pod(0, "MASTER", ready=False), pod(1, end=500), pod(2, end=900))}
    state = {"master": "s-0", "epoch": 1, "masterNotReadySince": r.iso(0)}
    plan = r.plan_group(spec(), "s-g0", NAMES, pods, state, now=100, lease=lease(renewed="t9"))
    assert plan.actions[:3] == [r.Fence("s-0", 2), r.TakeLease("s-2", 2), r.Promote("s-2", 2, "SYNC")]
    assert not plan.fence_optional  # its Lease has not expired: the Fence must be answered
    assert r.Follow("s-0", "10.0.0.3:10911", 2) in plan.actions  # then it follows the new master


def test_only_the_in_sync_set_is_elected_unless_unclean_election_is_allowed():
    pods = {p.name: p for p in (pod(0, "MASTER", ready=False, answers=False), pod(1, end=500), pod(2, end=9000))}
    state = {"master": "s-0", "epoch": 1, "masterNotReadySince": r.iso(0), "lease": {"renewTime": "t", "seenAt": r.micro_iso(0)}}
    only_s1 = lease(in_sync=("s-0", "s-1"), renewed="t")
    plan = r.plan_group(spec(), "s-g0", NAMES, pods, state, now=100, lease=only_s1)
    assert plan.actions[:2] == [r.TakeLease("s-1", 2), r.Promote("s-1", 2, "SYNC")]  # s-2 holds more but was not in sync
    nobody = lease(in_sync=("s-0",), renewed="t")
    blocked = r.plan_group(spec(), "s-g0", NAMES, pods, state, now=100, lease=nobody)
    assert blocked.actions == [] and "no member of its in-sync set" in blocked.blocked and "uncleanElection" in blocked.blocked
    unclean = r.plan_group(spec(uncleanElection=True), "s-g0", NAMES, pods, state, now=100, lease=nobody)
    assert unclean.actions[:2] == [r.TakeLease("s-2", 2), r.Promote("s-2", 2, "SYNC")]
    assert [e[1] for e in unclean.events] == ["Failover", "UncleanElection"] and unclean.state["lastFailover"]["unclean"]


def test_candidates_are_ranked_by_their_last_epoch_before_their_end_offset():
    """An old master's unreplicated tail (a longer log of an older term) never beats the
    follower that holds the newer term."""
    pods = {p.name: p for p in (pod(0, "MASTER", ready=False, answers=False, epoch=3), pod(1, end=5000, epoch=2), pod(2, end=800, epoch=3))}
    state = {"master": "s-0", "epoch": 3, "masterNotReadySince": r.iso(0), "lease": {"renewTime": "t", "seenAt": r.micro_iso(0)}}
    plan = r.plan_group(spec(), "s-g0", NAMES, pods, state, now=100, lease=lease(epoch=3, renewed="t"))
    assert plan.actions[:2] == [r.TakeLease("s-2", 4), r.Promote("s-2", 4, "SYNC")]


def test_no_ready_follower_blocks_the_failover_and_says_so():
    pods = {p.name: p for p in (pod(0, "MASTER", ready=False), pod(1, ready=False), pod(2, ready=False))}
    state = {"master": "s-0", "epoch": 3, "masterNotReadySince": r.iso(0), "lease": {"renewTime": "t", "seenAt": r.micro_iso(0)}}
    plan = r.plan_group(spec(), "s-g0", NAMES, pods, state, now=100, lease=lease(epoch=3, renewed="t"))
    assert plan.actions == [] and "no member of its in-sync set" in plan.blocked and plan.state["master"] == "s-0"


def test_an_old_master_that_came_back_is_made_to_follow():
    pods = {p.name: p for p in (pod(0, "MASTER", epoch=1), pod(1, "MASTER", epoch=2), pod(2, master="10.0.0.2:10911", epoch=2))}
    plan = r.plan_group(spec(), "s-g0", NAMES, pods, {"master": "s-1", "epoch": 2}, now=0, lease=lease("s-1", 2))
    assert plan.actions == [r.Follow("s-0", "10.0.0.2:10911", 2)]


def test_a_promotion_that_timed_out_is_retried_at_the_epoch_the_lease_records():
    """The Promote reached the pod after the operator gave up: the Lease already names it at
    epoch 5, so the next pass asks again at 5 (a no-op when done), never a second election."""
    pods = {p.name: p for p in (pod(0, "SLAVE", epoch=4, master=""), pod(1, epoch=4))}
    plan = r.plan_group(spec(), "s-g0", NAMES[:2], pods, {"master": "s-1", "epoch": 4}, now=0, lease=lease("s-0", 5))
    assert plan.actions[0] == r.Promote("s-0", 5, "SYNC") and plan.state["master"] == "s-0" and plan.state["epoch"] == 5
    done = {p.name: p for p in (pod(0, "MASTER", epoch=5), pod(1, epoch=5, master="10.0.0.1:10911"))}
    again = r.plan_group(spec(), "s-g0", NAMES[:2], done, plan.state, now=1, lease=lease("s-0", 5))
    assert again.actions == []


def test_switchover_fences_lets_the_candidate_catch_up_records_the_lease_then_promotes():
    pods = {p.name: p for p in (pod(0, "MASTER"), pod(1, end=100, connected=False), pod(2, end=90))}
    plan = r.plan_switchover(spec(), "s-g0", NAMES, pods, {"master": "s-0", "epoch": 2}, lease(epoch=2))
    assert plan is not None and plan.actions == [
        r.Fence("s-0", 3),
        r.CatchUp("s-2"),
        r.TakeLease("s-2", 3),
        r.Promote("s-2", 3, "SYNC"),
        r.Follow("s-0", "10.0.0.3:10911", 3),
        r.Follow("s-1", "10.0.0.3:10911", 3),
    ]
    nobody = {p.name: p for p in (pod(0, "MASTER"), pod(1, connected=False))}
    assert r.plan_switchover(spec(), "s-g0", NAMES[:2], nobody, {"master": "s-0", "epoch": 2}, lease(epoch=2)) is None
    out_of_sync = {p.name: p for p in (pod(0, "MASTER"), pod(1))}
    assert r.plan_switchover(spec(), "s-g0", NAMES[:2], out_of_sync, {"master": "s-0", "epoch": 2}, lease(in_sync=("s-0",))) is None


def test_the_roles_document_is_what_the_server_reads():
    from msgstore.ha.roles import parse as read_roles

    doc = r.roles_document(spec(), {"s-g0": {"master": "s-1", "epoch": 3, "address": "10.0.0.2:10911"}})
    mine = read_roles(doc, "s-0")
    assert mine is not None and not mine.is_master and mine.master_address == "10.0.0.2:10911" and mine.epoch == 3
    assert mine.lease == "ns/s-g0"
    assert read_roles(doc, "s-1").broker_role == "SYNC_MASTER"


def test_a_master_whose_log_went_backwards_is_replaced_at_once():
    """Its pod came back on an empty volume (the PVC was deleted): a follower holds the data."""
    pods = {p.name: p for p in (pod(0, "SLAVE", end=0, epoch=0, master=""), pod(1, end=900), pod(2, end=800))}
    state = {"master": "s-0", "epoch": 1, "address": "10.0.0.9:10911", "endOffset": 900}
    plan = r.plan_group(spec(), "s-g0", NAMES, pods, state, now=5, lease=lease())
    assert plan.actions[:3] == [r.Fence("s-0", 2), r.TakeLease("s-1", 2), r.Promote("s-1", 2, "SYNC")]
    assert plan.state["endOffset"] == 900 and "lost its data" in plan.events[0][2]
    assert r.Follow("s-0", "10.0.0.2:10911", 2) in plan.actions  # the emptied member copies the new master


def test_a_master_is_followed_by_its_recorded_end_offset():
    pods = {p.name: p for p in (pod(0, "MASTER", end=1000), pod(1, end=1000, master="10.0.0.1:10911"))}
    plan = r.plan_group(spec(), "s-g0", NAMES[:2], pods, {"master": "s-0", "epoch": 1, "endOffset": 400}, now=0, lease=lease())
    assert plan.actions == [] and plan.state["endOffset"] == 1000
    behind = {"s-0": pod(0, "MASTER", end=10), "s-1": pod(1, end=5, master="10.0.0.1:10911")}
    plan = r.plan_group(spec(), "s-g0", NAMES[:2], behind, {"master": "s-0", "epoch": 1, "endOffset": 400}, now=0, lease=lease())
    assert plan.actions == [] and not plan.events  # nobody holds more: nothing to fail over to


def test_a_ready_master_that_stopped_renewing_its_lease_is_replaced():
    """Issue 29: a master cut off from the API server (a zombie: its node still sees it healthy,
    clients still reach it) cannot renew its Lease and acknowledges nothing; once the operator
    has seen the Lease unrenewed for its whole duration it fences it and elects, as for a master
    that is not ready; renewing again in time keeps it master."""
    pods = {p.name: p for p in (pod(0, "MASTER"), pod(1, end=500), pod(2, end=900))}
    state = {"master": "s-0", "epoch": 1, "address": "10.0.0.1:10911"}
    seen = r.plan_group(spec(), "s-g0", NAMES, pods, state, now=1000, lease=lease(renewed="t1", duration=10))
    assert seen.actions == [] and not seen.waiting
    early = r.plan_group(spec(), "s-g0", NAMES, pods, seen.state, now=1009, lease=lease(renewed="t1", duration=10))
    assert early.actions == []  # 9 s: it may still be acknowledging
    renewed = r.plan_group(spec(), "s-g0", NAMES, pods, early.state, now=1011, lease=lease(renewed="t2", duration=10))
    assert renewed.actions == []
    lapsed = r.plan_group(spec(), "s-g0", NAMES, pods, renewed.state, now=1021, lease=lease(renewed="t2", duration=10))
    assert lapsed.actions[:3] == [r.Fence("s-0", 2), r.TakeLease("s-2", 2), r.Promote("s-2", 2, "SYNC")]
    assert lapsed.fence_optional  # the Lease expired: it acknowledges nothing whether or not it answers the Fence
    assert "did not renew its Lease" in lapsed.events[0][2]


def test_a_renewal_first_seen_by_an_earlier_look_counts_from_then_and_the_next_look_is_when_it_lapses():
    """The observer's Lease check may see a renewal before any pass records it: the pass that
    follows judges it from that first sight (lease_clock), so a master cut off right after
    renewing is replaced one duration later, not two; the plan says when to look again."""
    pods = {p.name: p for p in (pod(0, "MASTER"), pod(1, end=500), pod(2, end=900))}
    state = {"master": "s-0", "epoch": 1, "address": "10.0.0.1:10911"}
    seen = r.plan_group(spec(), "s-g0", NAMES, pods, state, now=1000, lease=lease(renewed="t1"))
    assert r.lapses_at(seen, lease(renewed="t1")) == 1010
    unseen = r.plan_group(spec(), "s-g0", NAMES, pods, seen.state, now=1012, lease=lease(renewed="t2"))
    assert unseen.actions == [] and r.lapses_at(unseen, lease(renewed="t2")) == 1022  # t2 from now, nobody saw it before
    looked = r.LeaseView("s-0", 1, ("s-0", "s-1", "s-2"), "t2", 10, first_seen=1002)  # a Lease check saw t2 at 1002
    lapsed = r.plan_group(spec(), "s-g0", NAMES, pods, seen.state, now=1012, lease=looked)
    assert lapsed.actions[:3] == [r.Fence("s-0", 2), r.TakeLease("s-2", 2), r.Promote("s-2", 2, "SYNC")]
    assert r.lapses_at(lapsed, looked) is None  # an election: the new holder's Lease is looked at by the next pass
    future = r.LeaseView("s-0", 1, ("s-0",), "t3", 10, first_seen=5000)  # (a clock that went back: never later than now)
    assert r.plan_group(spec(), "s-g0", NAMES, pods, seen.state, now=1012, lease=future).state["lease"]["seenAt"] == r.micro_iso(1012)


def test_a_renewal_made_before_the_lease_was_shortened_is_judged_by_the_longer_duration():
    """A master counts its renewal valid by the duration it read when it renewed: lowering
    failoverAfterSeconds (30 s to 3 s here) must not let the operator elect while a master cut
    off just then may still acknowledge under the 30 s it renewed with."""
    pods = {p.name: p for p in (pod(0, "MASTER"), pod(1, end=500), pod(2, end=900))}
    state = {"master": "s-0", "epoch": 1, "address": "10.0.0.1:10911"}
    seen = r.plan_group(spec(), "s-g0", NAMES, pods, state, now=1000, lease=lease(renewed="t1", duration=30))
    shortened = lease(renewed="t1", duration=3)  # the spec changed: the operator patched the Lease down
    early = r.plan_group(spec(), "s-g0", NAMES, pods, seen.state, now=1010, lease=shortened)
    assert early.actions == [] and r.lapses_at(early, shortened) == 1030
    late = r.plan_group(spec(), "s-g0", NAMES, pods, early.state, now=1031, lease=shortened)
    assert late.actions[:3] == [r.Fence("s-0", 2), r.TakeLease("s-2", 2), r.Promote("s-2", 2, "SYNC")]
    renewed = r.plan_group(spec(), "s-g0", NAMES, pods, early.state, now=1012, lease=lease(renewed="t2", duration=3))
    assert renewed.actions == [] and r.lapses_at(renewed, lease(renewed="t2", duration=3)) == 1015  # renewed under 3 s
    lapsed = r.plan_group(spec(), "s-g0", NAMES, pods, renewed.state, now=1016, lease=lease(renewed="t2", duration=3))
    assert lapsed.actions[:1] == [r.Fence("s-0", 2)]


def test_the_lease_clock_keeps_the_first_sighting_of_each_renewal_of_each_lease():
    clock = LeaseClock()
    assert clock.seen("ns", "s-g0", "uid-1", "t1", 100) == 100
    assert clock.seen("ns", "s-g0", "uid-1", "t1", 103) == 100  # seen again: still from its first sight
    assert clock.seen("ns", "s-g0", "uid-1", "t1", 90) == 90  # an earlier sighting recorded (a status, after a restart)
    assert clock.seen("ns", "s-g0", "uid-1", "t2", 104) == 104  # renewed: from now
    assert clock.seen("ns", "s-g0", "uid-2", "t2", 105) == 105  # the same name, another Lease (a store made again)
    assert clock.seen("ns", "s-g1", "uid-3", "t2", 106) == 106  # each Lease its own


def test_an_image_that_cannot_be_pulled_is_named_with_what_to_do():
    """Issue 33: the chart's default image is not published; a pod waiting for it says so."""
    from msgstore_operator import decide
    from msgstore_operator.pods import _unpullable_image

    waiting = {
        "spec": {"containers": [{"name": "msgstore", "image": "ghcr.io/msgstore/msgstore:0.1.0"}]},
        "status": {"containerStatuses": [{"name": "msgstore", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "x"}}}]},
    }
    crashing = {"status": {"containerStatuses": [{"name": "msgstore", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}}
    assert _unpullable_image(waiting) == "ghcr.io/msgstore/msgstore:0.1.0"
    assert _unpullable_image(crashing) == "" and _unpullable_image({}) == ""
    pods = [PodView(f"s-{i}", i, None, False, False, "", unpullable="ghcr.io/msgstore/msgstore:0.1.0") for i in (1, 0)]
    said = decide.unpullable_images(pods + [PodView("s-2", 2, "10.0.0.3", True, False, "")])
    assert said.startswith("image ghcr.io/msgstore/msgstore:0.1.0 cannot be pulled for s-0, s-1: build it (make image)")
    assert "set spec.image" in said and said.count("image ghcr.io") == 1
    assert decide.unpullable_images([PodView("s-0", 0, "10.0.0.1", True, False, "")]) == ""


def test_a_master_whose_lease_was_renewed_after_its_role_was_read_is_asked_again_not_replaced():
    """Under writes: the roles are read, then the Lease, which the master renewed meanwhile with
    its newer end; a follower asked after the master holds more than the master showed. Judged
    on those readings the master "lost its data"; asked again, it has not."""
    read_first = {p.name: p for p in (pod(0, "MASTER", end=33456), pod(1, end=33880), pod(2, end=33700))}
    renewed = r.LeaseView("s-0", 1, ("s-0", "s-1", "s-2"), "t0", 10, end_offset=33500)
    state = {"master": "s-0", "epoch": 1, "address": "10.0.0.1:10911", "endOffset": 33000}
    assert r.stale_master_role(renewed, read_first) == "s-0"
    judged_on_old = r.plan_group(spec(), "s-g0", NAMES, read_first, state, now=5, lease=renewed)
    assert "lost its data" in judged_on_old.events[0][2]  # what the operator did before it asked again
    asked_again = {**read_first, "s-0": pod(0, "MASTER", end=34000)}
    assert r.stale_master_role(renewed, asked_again) is None
    plan = r.plan_group(spec(), "s-g0", NAMES, asked_again, state, now=5, lease=renewed)
    assert plan.actions == [] and not plan.events and plan.state["endOffset"] == 34000


def test_a_master_whose_log_went_backwards_is_still_replaced_when_asked_again():
    """A role read before the Lease is asked again; a log that really went backwards stays so."""
    pods = {p.name: p for p in (pod(0, "MASTER", end=10), pod(1, end=900), pod(2, end=800))}
    renewed = r.LeaseView("s-0", 1, ("s-0", "s-1", "s-2"), "t0", 10, end_offset=900)
    assert r.stale_master_role(renewed, pods) == "s-0"
    plan = r.plan_group(spec(), "s-g0", NAMES, pods, {"master": "s-0", "epoch": 1}, now=5, lease=renewed)
    assert plan.actions[:3] == [r.Fence("s-0", 2), r.TakeLease("s-1", 2), r.Promote("s-1", 2, "SYNC")]
    assert r.stale_master_role(None, pods) is None
    assert r.stale_master_role(r.LeaseView("s-0", 1, (), "t0", 10), pods) is None  # no end recorded
