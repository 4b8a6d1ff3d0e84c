"""Fencing and elections without Kubernetes (issues 20 and 29), tried as the issues' users tried
them: real members on loopback started as the README says (``--group``, followers
``--replica-of`` the master, no ``--peers``), a producer running, the master paused or killed, a
follower promoted with ``msgstore admin promote``. A master that cannot be reached is replaced
through the arbiter (a real etcd, ``--arbiter``); without one only ``--unclean`` replaces it. The
checks are the ledger's (tests/ha/ledger.py)."""

from __future__ import annotations

import json
import os
import signal
import time

from msgstore.client import AsyncClient, Client, OutMessage, StoreError
from tests.api.test_cli import run
from tests.ha.conftest import caught_up, connected, follows, role
from tests.ha.ledger import Ledger, Producer, acked_on
from tests.support.servers import wait_until

SYNC = ["brokerRole=SYNC_MASTER", "inSyncReplicas=2"]
FAST = ["haKeepaliveTimeout=1500"]  # the follower notices a silent master sooner (the default is 3 s)


def pause(member) -> None:
    os.kill(member.proc.pid, signal.SIGSTOP)


def resume(member) -> None:
    os.kill(member.proc.pid, signal.SIGCONT)


def promote(member, *flags: str, check: bool = True):
    out = run("--json", "admin", "promote", "--server", member.address, *flags, check=check)
    return json.loads(out.stdout) if out.returncode == 0 else out


def _paused_master_round(groups, etcd, master_settings: list[str]) -> tuple[Ledger, object, object, object, dict]:
    """Three members with an arbiter; two producers (one given every address, one only the
    master's) running; the master paused 6 s; the follower holding the most promoted (through
    the arbiter, once the paused master's lease has run out); then the old master resumed and
    left running a few seconds."""
    g = groups(3, master=master_settings + FAST, follower=FAST, peers=False, arbiter=etcd.url())
    old, f1, f2 = g.members
    ledger = Ledger()
    ledger.elected(old.address, at=0.0)
    every = Client([m.address for m in g.members], timeout=3, failover_timeout=20)
    only_old = Client(old.address, timeout=3, failover_timeout=20)
    producers = [Producer(every, "t", ledger, "every"), Producer(only_old, "t", ledger, "old")]
    for p in producers:
        p.start()
    wait_until(lambda: len(ledger.acks) > 200, what="acknowledged sends")
    pause(old)
    paused_at = time.monotonic()
    c = Client(f1.address, timeout=5)
    wait_until(lambda: not connected(c, f1) and not connected(c, f2), timeout=10, what="the followers to notice the silent master")
    # as the README says: the follower holding the most (admin role) is the one to promote
    a, b = sorted((f1, f2), key=lambda m: (role(c, m).epoch, role(c, m).end_offset), reverse=True)
    done = promote(a)  # the old master cannot be fenced: the election waits for its lease to run out
    record = etcd.record("g0")
    ledger.recorded(record["electedAt"] / 1000, a.address, record["epoch"])
    ledger.elected(a.address)
    elected = time.monotonic()
    assert done["role"] == "MASTER" and done["epoch"] == 2 and record["holder"] == a.name and record["epoch"] == 2
    assert any("lease" in n and ("run out" in n or "ran out" in n) for n in done.get("notes", [])), json.dumps(done)
    assert b.name in done["repointed"]
    # the client given every address reaches the new master while the old one is still hung
    wait_until(lambda: acked_on(ledger, a.address, elected) > 0, timeout=20, what="the new master acknowledging while the old is paused")
    figures_reached = time.monotonic() - paused_at
    time.sleep(max(0.0, 6.0 - (time.monotonic() - paused_at)))  # the 6 s pause
    resume(old)
    resumed = time.monotonic()
    # the old master learns it was replaced and follows the new one by itself
    wait_until(lambda: follows(c, old, a), timeout=20, what="the old master to follow the new one")
    wait_until(lambda: acked_on(ledger, a.address, resumed) > 50, timeout=30, what="writes acknowledged by the new master")
    for p in producers:
        p.halt()
    caught_up(c, old, a)
    held = ledger.read(c, "t", settle=5)
    figures = {"elected": elected, "resumed": resumed, "reached": figures_reached}
    every.close()
    only_old.close()
    return ledger, held, (old, a, b), c, figures


def test_a_paused_async_master_is_fenced_and_both_clients_move_to_the_new_master(groups, etcd):
    ledger, held, (old, a, _b), c, t = _paused_master_round(groups, etcd, [])
    lost = ledger.lost(held)
    assert not ledger.acked_by_fenced(lost), f"{len(ledger.acked_by_fenced(lost))} acknowledged by the replaced master, then lost"
    assert not ledger.acked_after_replaced()  # nothing received from the old master after its successor (but in flight)
    # the client given only the old master's address moved too
    assert any(a_.body.startswith(b"old-") and a_.address == a.address and a_.sent > t["resumed"] for a_ in ledger.acks)
    # what ASYNC may lose is what the old master acknowledged before it was replaced and had not sent on
    assert all(x.address == old.address and x.sent < t["elected"] for x in lost)
    c.close()


def test_a_paused_sync_master_loses_nothing_and_clients_reach_the_new_master(groups, etcd):
    ledger, held, (old, a, _b), c, t = _paused_master_round(groups, etcd, SYNC)
    assert not ledger.lost(held)  # SYNC: every acknowledged message is on the new master at its place
    assert acked_on(ledger, a.address, t["resumed"]) > 50 and not ledger.acked_after_replaced()
    assert any(x.body.startswith(b"old-") and x.address == a.address for x in ledger.acks)
    r = role(c, a)
    assert r.mode == "SYNC"  # the promotion kept the group's mode (no --mode given)
    c.close()


def test_a_switchover_fences_first_and_loses_nothing_in_async_mode(groups):
    g = groups(3, peers=False)
    old, a, b = g.members
    ledger = Ledger()
    ledger.elected(old.address, at=0.0)
    client = Client([m.address for m in g.members], timeout=5, failover_timeout=20)
    p = Producer(client, "t", ledger, "p")
    p.start()
    wait_until(lambda: len(ledger.acks) > 300, what="acknowledged sends")
    t0 = time.monotonic()
    done = promote(a)  # the old master answers: fenced first, the candidate catches up, nothing forced
    ledger.elected(a.address, at=t0)
    assert done["fenced_old_master"] == "m0" and set(done["repointed"]) == {"m0", "m2"}
    wait_until(lambda: acked_on(ledger, a.address, t0) > 20, timeout=20, what="writes on the new master")
    p.halt()
    c = Client(a.address, timeout=5)
    caught_up(c, old, a)
    caught_up(c, b, a)
    held = ledger.read(c, "t", settle=5)
    assert not ledger.lost(held)  # a switchover loses nothing, in ASYNC mode too (its stall: make bench, suite ha)
    c.close()
    client.close()


def test_an_old_master_restarted_with_its_own_command_learns_it_was_replaced(groups, etcd):
    g = groups(3, master=SYNC, peers=False, arbiter=etcd.url())
    old, a, b = g.members
    c = Client([m.address for m in g.members], timeout=5, failover_timeout=20)
    assert all(r.ok for r in c.send_batch("t", [OutMessage(b"before-%d" % i) for i in range(20)]))
    caught_up(c, a, old)
    old.kill()
    promote(a)
    assert c.send("t", b"on the new master").ok
    old.start()  # its original command: --set brokerRole=SYNC_MASTER, no --replica-of
    direct = Client(old.address, timeout=5, failover_timeout=1)
    wait_until(lambda: role(direct, old).role == "SLAVE", timeout=20, what="the restarted old master to follow")
    assert role(direct, old).master_address == a.address and role(direct, old).group_epoch == 2
    # its own log carries epoch 2 once it has copied the new master's first entry of it
    wait_until(lambda: role(direct, old).epoch == 2, timeout=20, what="the old master's log to reach epoch 2")
    # it never took a write: a client given only its address is sent on to the new master
    r = direct.send("t", b"via the old master's address")
    assert r.ok and r.address == a.address
    route = {m.name: m for n in direct.route("t", refresh=True).nodes for m in n.members}
    assert route["m1"].role == "MASTER" and route["m0"].role == "SLAVE"
    direct.close()
    c.close()


def test_a_killed_master_s_clients_find_the_promoted_follower(groups, etcd):
    g = groups(2, peers=False, arbiter=etcd.url())  # the README's two commands: no --peers anywhere
    old, a = g.members
    only_old = Client(old.address, timeout=3, failover_timeout=20)
    assert only_old.send("t", b"first").ok
    caught_up(only_old, a, old)
    old.kill()
    promote(a)
    r = only_old.send("t", b"second")  # the route it read before names the follower
    assert r.ok and r.address == a.address
    g.restart_as_follower(old, a)
    fresh = Client(old.address, timeout=5)
    wait_until(lambda: connected(fresh, old), what="the old master to follow")
    nodes = fresh.route("t").nodes
    assert [n.ready for n in nodes] == [True] and nodes[0].address == a.address  # its route names the new master
    assert fresh.send("t", b"third").address == a.address
    fresh.close()
    only_old.close()


def test_the_asyncio_client_waits_for_the_new_master(groups, etcd):
    import asyncio

    g = groups(2, peers=False, arbiter=etcd.url())
    old, a = g.members

    async def main() -> list:
        client = AsyncClient([old.address, a.address], timeout=3, failover_timeout=20)
        await client.send("t", b"one")
        old.kill()
        sending = asyncio.ensure_future(client.send("t", b"two"))
        await asyncio.sleep(1.0)
        await asyncio.get_running_loop().run_in_executor(None, lambda: promote(a))
        out = [await sending]
        await client.close()
        return out

    (r,) = asyncio.run(main())
    assert r.ok and r.address == a.address


def test_a_master_without_a_majority_stops_acknowledging_until_it_has_one(groups):
    g = groups(3, master=FAST, follower=FAST, peers=False)
    master, a, b = g.members
    c = Client(master.address, timeout=5, failover_timeout=1)
    assert c.send("t", b"x").ok
    pause(a)
    assert c.send("t", b"one follower is enough").ok  # two of three
    pause(b)
    try:

        def refused() -> bool:
            try:
                c.send("t", b"alone")
            except StoreError as e:
                return "check-quorum" in e.details
            return False

        wait_until(refused, timeout=10, what="the master to stop on its own")
        assert role(c, master).fenced
    finally:
        resume(a)
        resume(b)
    wait_until(lambda: c.send("t", b"back").ok, timeout=20, what="writes to resume with a majority")


def test_a_master_restarting_without_its_follower_takes_no_write_until_it_hears_from_it(groups):
    g = groups(2, peers=False)
    master, follower = g.members
    c = Client(master.address, timeout=3, failover_timeout=1)
    assert c.send("t", b"x").ok
    caught_up(c, follower, master)
    follower.kill()
    master.kill()
    master.start()
    with_refusal = None
    try:
        c.send("t", b"too early")
    except StoreError as e:
        with_refusal = e.details
    assert with_refusal and "newer epoch" in with_refusal and "m1" in with_refusal
    assert role(c, master).fenced
    follower.start()
    wait_until(lambda: not role(c, master).fenced, timeout=20, what="the master to hear from its follower")
    assert c.send("t", b"now").ok


def test_the_in_sync_set_shrinks_and_grows_and_a_sync_master_serves_only_what_it_holds(groups):
    g = groups(3, master=["brokerRole=SYNC_MASTER", "inSyncReplicas=2", "slaveTimeout=800"] + FAST, follower=FAST, peers=False)
    master, a, b = g.members
    c = Client(master.address, timeout=5, failover_timeout=1)
    assert c.send("t", b"x").ok
    wait_until(lambda: set(role(c, master).sync_state_set) == {"m0", "m1", "m2"}, what="both followers in sync")
    pause(a)
    r = c.send("t", b"waits for every member of the set")
    assert r.status == "FLUSH_SLAVE_TIMEOUT"
    q = next(x for x in c.route("t").queues if x.queue_id == r.queue_id)
    assert q is not None
    got = c.pull("t", q, 0, max_messages=10)  # the confirm offset: not held by m1, not served
    assert b"waits for every member of the set" not in [bytes(m.body) for m in got.messages]
    wait_until(lambda: "m1" not in role(c, master).sync_state_set, timeout=10, what="m1 to leave the in-sync set")
    assert c.send("t", b"the set is m0 and m2 now").ok
    resume(a)
    wait_until(lambda: "m1" in role(c, master).sync_state_set, timeout=20, what="m1 to rejoin the set once caught up")
    assert role(c, a).in_sync


def test_a_follower_of_a_silent_master_says_so_within_seconds(groups):
    g = groups(2, master=FAST, follower=FAST, peers=False)
    master, follower = g.members
    c = Client(follower.address, timeout=5)
    wait_until(lambda: connected(c, follower), what="connected")
    pause(master)
    try:
        wait_until(lambda: not connected(c, follower), timeout=10, what="the follower to notice")
        assert role(c, follower).master_contact_age_s >= 1.5  # it says for how long (haKeepaliveTimeout: 1.5 s)
    finally:
        resume(master)
    wait_until(lambda: connected(c, follower), timeout=10, what="reconnected")


def test_members_restarted_with_their_original_commands_take_up_the_roles_the_group_gave_them(groups):
    """After a switchover the old master restarted with ``brokerRole=SYNC_MASTER`` follows the new
    master instead of claiming its epoch (two masters at one epoch, found by the nemesis
    campaign); the promoted follower restarted with ``--replica-of`` the old master is master again
    once its group confirms no newer epoch exists."""
    g = groups(3, master=SYNC + FAST, follower=FAST, peers=False)
    old, a, b = g.members
    c = Client([m.address for m in g.members], timeout=5, failover_timeout=20)
    assert all(r.ok for r in c.send_batch("t", [OutMessage(b"before-%d" % i) for i in range(20)]))
    caught_up(c, a, old)
    promote(a)  # a switchover: old is fenced and repointed
    wait_until(lambda: role(c, old).role == "SLAVE" and connected(c, old), timeout=20, what="the old master to follow")
    old.kill()
    old.start()  # its original command: --set brokerRole=SYNC_MASTER
    wait_until(lambda: connected(c, old), timeout=20, what="the old master to follow again")
    r = role(c, old)
    assert r.role == "SLAVE" and r.master_address == a.address and r.epoch == 2
    assert role(c, a).role == "MASTER" and role(c, a).epoch == 2
    a.kill()
    a.start()  # its original command: --replica-of the old master's address
    wait_until(lambda: role(c, a).role == "MASTER" and not role(c, a).fenced, timeout=20, what="the promoted member to lead again")
    assert role(c, a).epoch == 2
    res = c.send("t", b"after both restarts")
    assert res.ok and res.address == a.address
    wait_until(lambda: connected(c, old) and connected(c, b), timeout=20, what="both followers back")
    c.close()


def test_without_an_arbiter_an_unreachable_master_is_replaced_only_unclean(groups):
    """Issue 29: without an arbiter nothing proves a silent master stopped acknowledging, nor
    which members hold what it acknowledged: a plain promote refuses and says what to use,
    ``--force`` is gone, ``--unclean`` promotes and says how much may be lost."""
    g = groups(2, master=FAST, follower=FAST, peers=False)
    old, a = g.members
    c = Client(old.address, timeout=3)
    assert c.send("t", b"first").ok
    caught_up(c, a, old)
    old.kill()
    refused = promote(a, check=False)
    text = refused.stderr.decode()
    assert refused.returncode != 0 and "cannot be reached to fence it" in text and "--arbiter" in text and "--unclean" in text, text
    forced = promote(a, "--force", check=False)
    assert forced.returncode != 0 and "--force is gone" in forced.stderr.decode()
    assert role(Client(a.address), a).role == "SLAVE"  # neither changed anything
    done = promote(a, "--unclean")
    assert done["role"] == "MASTER" and any(n.startswith("unclean:") for n in done["notes"]), done
    c.close()
