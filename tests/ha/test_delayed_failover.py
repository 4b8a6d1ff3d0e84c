"""Delayed delivery across a failover (issue 22): a replica group's master holds timer and
delay-level messages not yet due, is SIGKILLed, and its follower is promoted. The follower had
the messages (replicated) and the master's progress (copied every second), so every message
arrives, none more than once more, and a recall made after the failover still cancels."""

from __future__ import annotations

import os
import time

from msgstore.client import Client
from msgstore.client.routing import QueueRef
from msgstore.ha.follower import copy_broker_files
from msgstore.record.recall_handle import RecallHandle
from msgstore.store.layout import POP_CHECKPOINT, TRANSACTION_CHECKPOINT
from tests.ha.conftest import caught_up, role
from tests.support.servers import wait_until

SETTINGS = ["messageDelayLevel=1s 3s", "haKeepaliveTimeout=1500"]


def bodies(c: Client, address: str) -> list[bytes]:
    got = c.pull("jobs", QueueRef("g0", address, 0), 0, max_messages=1000)
    return [m.body for m in got.messages]


def test_pending_delays_are_delivered_by_the_promoted_follower(groups):
    g = groups(2, master=SETTINGS, follower=SETTINGS)
    old, new = g.members
    c = g.client()
    c.create_topic("jobs", 1)
    expected = set()
    for i in range(30):
        c.send("jobs", b"t%d" % i, delay=0.3 + 0.15 * i)  # due over the next 5 s
        expected.add(b"t%d" % i)
    for i in range(6):
        c.send("jobs", b"l%d" % i, delay_level=1 + i % 2)
        expected.add(b"l%d" % i)
    recalled = c.send("jobs", b"recalled", delay=8)
    wait_until(lambda: len(bodies(c, old.address)) >= 8, timeout=15, what="deliveries on the master")
    caught_up(c, new, old)
    wait_until(
        lambda: os.path.exists(os.path.join(new.data_dir, "config", "timercheck")),
        timeout=10,
        what="the follower's copy of the timer's progress",
    )
    old.kill()
    wait_until(lambda: not role(c, new).connected, timeout=15, what="the follower to notice its master is gone")
    assert c.admin(new.address).promote().role == "MASTER"
    c.recall(recalled)  # the handle names the group: its new master takes it
    with Client(new.address, timeout=10) as on_new:
        wait_until(lambda: expected <= set(bodies(on_new, new.address)), timeout=30, what="every pending message on the new master")
        due = RecallHandle.decode(recalled.recall_handle).deliver_ms / 1000
        time.sleep(max(0.0, due + 0.5 - time.time()))  # an absence: wait past the recalled message's time
        got = bodies(on_new, new.address)
    assert b"recalled" not in got
    counts = {b: got.count(b) for b in expected}
    assert max(counts.values()) <= 2, counts  # at most once more after the failover


def copied(master, follower, *names: str) -> None:
    """Until the follower's copies of these progress files are what the master holds in memory
    (what a follower copies once a second: Replication.GetMetadata's broker state; the master's
    settles once the acknowledgements are processed)."""
    import grpc

    from msgstore.v1 import ha_pb2, ha_pb2_grpc

    def read(name: str) -> str | None:
        try:
            with open(os.path.join(follower.data_dir, "config", name), encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            return None

    with grpc.insecure_channel(master.address) as ch:
        stub = ha_pb2_grpc.ReplicationStub(ch)

        def same() -> bool:
            now = dict(stub.GetMetadata(ha_pb2.GetMetadataRequest(), timeout=10).broker_state)
            assert all(now.get(n) for n in names), sorted(now)
            return all(read(n) == now[n] for n in names)

        wait_until(same, timeout=15, interval=0.1, what=f"the follower's copies of {', '.join(names)}")


def test_a_follower_takes_the_masters_progress_only_once_it_holds_what_it_counts(tmp_path):
    """Progress that counts a delivery done must not reach a follower before the delivered
    message does: a failover would lose it."""
    files = {"timercheck": '{"version":1,"progress":{"below":8,"done":""}}', "commitlogEnd": "5000"}
    assert not copy_broker_files(str(tmp_path), files, log_end=4999)
    assert not os.path.exists(tmp_path / "timercheck")
    assert copy_broker_files(str(tmp_path), {**files, "elsewhere.json": "{}"}, log_end=5000)
    assert (tmp_path / "timercheck").read_text() == files["timercheck"]
    assert not os.path.exists(tmp_path / "elsewhere.json")  # only the files the layout names


def test_deliveries_in_flight_come_back_on_the_promoted_follower_and_acked_ones_do_not(groups):
    g = groups(2, master=SETTINGS, follower=SETTINGS)
    old, new = g.members
    c = g.client()
    c.create_topic("jobs", 1)
    c.update_group("workers", backoff=[0.1])
    for i in range(10):
        assert c.send("jobs", b"w%d" % i, visible=True).ok
    # invisible long enough that the old master does not bring them back itself before it is
    # killed (its copies written, its progress not yet copied: both would bring them back, which
    # at-least-once allows and this test would count twice)
    got = c.receive("workers", "jobs", 10, invisible=6.0)
    assert len(got) == 10
    acked = got[:5]
    assert c.ack("workers", "jobs", acked) == [""] * 5
    caught_up(c, new, old)
    copied(old, new, POP_CHECKPOINT)  # the follower's once-a-second copy of the deliveries' progress, as the master has it now
    old.kill()
    wait_until(lambda: not role(c, new).connected, timeout=15, what="the follower to notice its master is gone")
    assert c.admin(new.address).promote().role == "MASTER"
    back: list = []
    with Client(new.address, timeout=10) as on_new:
        wait_until(
            lambda: back.extend(on_new.receive("workers", "jobs", 10, invisible=30)) or len(back) >= 5,
            timeout=30,
            what="the deliveries in flight back on the new master",
        )
        time.sleep(0.5)  # an absence: nothing more comes
        back += on_new.receive("workers", "jobs", 10, invisible=30)
    assert sorted(r.body for r in back) == sorted(r.body for r in got[5:])
    assert all(r.attempt == 2 for r in back)


def test_an_open_transaction_is_resolved_on_the_promoted_follower(groups):
    settings = [*SETTINGS, "transactionTimeOut=500", "transactionCheckInterval=500"]
    g = groups(2, master=settings, follower=settings)
    old, new = g.members
    c = g.client()
    c.create_topic("jobs", 1)
    tp = c.transaction_producer("tx", lambda m: "commit")  # kept across the failover: it listens on the new master
    committed = tp.send("jobs", b"committed-before")
    committed.commit()  # at once: the commit waits for the half's dispatch if it must
    forgotten = c.send("jobs", b"forgotten", properties={"TRAN_MSG": "true", "PGROUP": "tx"})  # never ended
    assert forgotten.transaction_id
    caught_up(c, new, old)
    copied(old, new, TRANSACTION_CHECKPOINT)  # the follower's once-a-second copy of the transaction progress
    old.kill()
    wait_until(lambda: not role(c, new).connected, timeout=15, what="the follower to notice its master is gone")
    assert c.admin(new.address).promote().role == "MASTER"
    with Client(new.address, timeout=10) as on_new:
        wait_until(lambda: b"forgotten" in bodies(on_new, new.address), timeout=30, what="the check-back's commit on the new master")
        got = bodies(on_new, new.address)
    tp.close()
    assert sorted(got) == [b"committed-before", b"forgotten"]  # each once
