"""Replication for real: follower processes copying a master's commit log byte for byte, SYNC
acknowledgements and their failure statuses, promotion, and an old master rejoining after
cutting back the tail nobody else had (issue 13, docs/store-format.md §14)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import time

import grpc
import pytest

from msgstore.client import Client, OutMessage, StoreError
from msgstore.client.aio import AsyncClient
from msgstore.client.routing import QueueRef
from tests.ha.conftest import caught_up, connected, identical_logs, role
from tests.support.servers import ServerProcess, wait_until

SYNC = ["brokerRole=SYNC_MASTER", "inSyncReplicas=2", "slaveTimeout=1000"]


def mixed_load(client: Client, rounds: int, seed: int = 1) -> list:
    """Several topics, sizes from 10 B to 20 KiB, keys, tags: enough to roll 256 KiB segments."""
    rnd = random.Random(seed)
    acked = []
    for _ in range(rounds):
        topic = rnd.choice(["orders", "audit", "clicks"])
        batch = [
            OutMessage(
                os.urandom(rnd.choice([10, 300, 1024, 4096, 20_000])), key=f"k{rnd.randrange(50)}", tags=rnd.choice(["a", "b", None])
            )
            for _ in range(rnd.randrange(1, 12))  # a batch must fit one 256 KiB segment
        ]
        res = client.send_batch(topic, batch)
        acked += [(topic, r) for r in res if r.ok]
    return acked


def test_followers_copy_the_log_byte_for_byte_and_build_their_own_queues(groups):
    g = groups(3, master=SYNC + ["messageIndexEnable=true"], follower=["slaveReadEnable=true"])
    c = g.client()
    acked = mixed_load(c, 120)
    assert acked and all(r.status == "PUT_OK" for _, r in acked)
    master, f1, f2 = g.members
    assert len(os.listdir(os.path.join(master.data_dir, "commitlog"))) >= 4  # segments rolled
    for f in (f1, f2):
        caught_up(c, f, master)
        assert identical_logs(master, f)
    # the follower's own dispatch: its consume queues and index answer like the master's
    reader = Client(f1.address, timeout=10)
    topic, sample = acked[-1]
    q = QueueRef(sample.node, f1.address, sample.queue_id)
    wait_until(lambda: reader.pull(topic, q, sample.queue_offset, max_messages=1).messages, what="the follower's consume queue")
    on_master = c.pull(topic, QueueRef(sample.node, master.address, sample.queue_id), sample.queue_offset, max_messages=1).messages[0]
    on_follower = reader.pull(topic, q, sample.queue_offset, max_messages=1).messages[0]
    assert on_follower.body == on_master.body and on_follower.commitlog_offset == on_master.commitlog_offset
    # the follower refuses producers and commits, naming what to do
    with pytest.raises(StoreError) as e:
        reader.send_batch("orders", [OutMessage(b"x")], queue=QueueRef("m1", f1.address, 0))
    assert e.value.code == grpc.StatusCode.UNAVAILABLE and "follower" in e.value.details
    r1 = role(c, f1)
    assert r1.role == "SLAVE" and r1.master_address == master.address and r1.connected and r1.lag_bytes == 0
    rm = role(c, master)
    assert rm.role == "MASTER" and rm.mode == "SYNC" and {f.member for f in rm.followers} == {"m1", "m2"}
    reader.close()


def test_metadata_follows_the_master(groups):
    from msgstore.v1 import msgstore_pb2 as pb

    g = groups(2)
    master, follower = g.members
    c = g.client()
    c.create_topic("meta", 3)
    q = c.route("meta", refresh=True).queues[0]
    c.send("meta", b"x", queue=q)  # (a keyless send's queue is the round robin's, which starts at random)
    c.commit("billing", "meta", q, 1)
    direct = Client(follower.address)  # calls to the follower itself, not routed to its master
    req = pb.GetCommittedOffsetRequest(group="billing", topic="meta", queue_id=q.queue_id)
    wait_until(lambda: direct._call(follower.address, "GetCommittedOffset", req).offset == 1, what="the commit copied to the follower")
    topics = direct._call(follower.address, "ListTopics", pb.ListTopicsRequest()).topics
    assert {t.name: t.write_queue_nums for t in topics}["meta"] == 3
    direct.close()


def test_sync_puts_say_when_followers_do_not_confirm(groups):
    g = groups(2, master=SYNC)
    master, follower = g.members
    c = g.client()
    assert c.send("s", b"ok").status == "PUT_OK"
    os.kill(follower.proc.pid, signal.SIGSTOP)  # the stream is cut: the follower reads nothing
    try:
        t = time.monotonic()
        r = c.send("s", b"unconfirmed")
        assert r.status == "FLUSH_SLAVE_TIMEOUT" and time.monotonic() - t >= 0.9  # stored, never a silent PUT_OK
    finally:
        os.kill(follower.proc.pid, signal.SIGCONT)
    wait_until(lambda: c.send("s", b"again").status == "PUT_OK", timeout=20, what="writes to resume")
    follower.kill()  # no follower at all: stored on the master alone
    wait_until(lambda: not role(c, master).followers, what="the master to see the follower gone")
    assert c.send("s", b"alone").status == "SLAVE_NOT_AVAILABLE"


def test_a_sync_master_with_a_write_buffer_acknowledges_without_waiting_for_its_commit_pace(groups):
    """transientStorePoolEnable: appends sit in a write buffer, and followers read only what is
    committed. With the committer paced at a minute, a SYNC put waited for that pace and timed
    out (FLUSH_SLAVE_TIMEOUT); it now has the buffer committed at once. (With the default
    pacing every put took a second: the commit was not announced to the followers' streams,
    which learnt of it at their 1 s keepalive; that announcement is tested on the store,
    tests/store/test_store_io.py.)"""
    paced = ["transientStorePoolEnable=true", "commitIntervalCommitLog=60000", "commitCommitLogThoroughInterval=60000"]
    g = groups(2, master=["brokerRole=SYNC_MASTER", "inSyncReplicas=2", "slaveTimeout=800", *paced])
    master, follower = g.members
    c = g.client()
    wait_until(lambda: connected(c, follower), what="the follower to connect")
    wait_until(lambda: c.send("wb", b"first").status == "PUT_OK", timeout=20, what="a first acknowledged put")
    assert [c.send("wb", b"m%d" % i).status for i in range(5)] == ["PUT_OK"] * 5
    caught_up(c, follower, master)


def test_too_few_in_sync_replicas_store_nothing(groups):
    g = groups(2, master=["brokerRole=SYNC_MASTER", "inSyncReplicas=3", "slaveTimeout=500"])
    c = g.client()
    wait_until(lambda: role(c, g.members[0]).followers, what="the follower to connect")
    before = role(c, g.members[0]).end_offset
    r = c.send("s", b"x")
    assert r.status == "IN_SYNC_REPLICAS_NOT_ENOUGH"
    assert role(c, g.members[0]).end_offset == before  # nothing was stored


def test_promotion_and_the_old_master_rejoining_after_truncation(groups):
    g = groups(2)  # ASYNC
    old, new = g.members
    c = g.client()
    mixed_load(c, 30)
    caught_up(c, new, old)
    shared_end = role(c, old).end_offset
    new.kill()  # the follower is gone: what the master takes now exists only there
    tail = c.send_batch("orders", [OutMessage(b"only-on-the-old-master-%d" % i) for i in range(20)])
    assert all(r.ok for r in tail)
    assert role(c, old).end_offset > shared_end
    old.kill()
    new.start()  # still a follower of the dead master, until promoted
    promoted = c.admin(new.address).promote()
    assert promoted.role == "MASTER" and promoted.epoch == 2 and promoted.end_offset == shared_end
    written = Client(new.address).send_batch("orders", [OutMessage(b"new-term-%d" % i) for i in range(30)])
    assert all(r.ok for r in written)
    g.restart_as_follower(old, new)

    caught_up(c, old, new)
    assert identical_logs(old, new)  # the unreplicated tail was cut back (zeroed), then overwritten
    r_old = role(c, old)
    assert r_old.role == "SLAVE" and [(e.epoch, e.start_offset) for e in r_old.epochs] == [(1, 0), (2, shared_end)]
    with open(os.path.join(old.data_dir, "epochFileCheckpoint")) as f:
        assert f.read().split() == ["2", "1-0", f"2-{shared_end}"]
    assert "cutting the commit log back" in old.log()


def test_async_loss_is_at_most_the_lag_the_master_reported(groups):
    g = groups(2)
    master, follower = g.members
    c = g.client()
    mixed_load(c, 10)
    caught_up(c, follower, master)
    os.kill(follower.proc.pid, signal.SIGSTOP)
    try:
        acked = c.send_batch("orders", [OutMessage(os.urandom(2000)) for _ in range(100)])
        assert all(r.ok for r in acked)
        reported = role(c, master)
        lag = max(f.lag_bytes for f in reported.followers)
        master_end = reported.end_offset
        master.kill()
    finally:
        os.kill(follower.proc.pid, signal.SIGCONT)
    promoted = Client(follower.address).admin(follower.address).promote()
    lost = master_end - promoted.end_offset
    assert 0 <= lost <= lag, (lost, lag)


def test_a_follower_recovers_from_its_own_crash(groups):
    g = groups(2)
    master, follower = g.members
    c = g.client()
    mixed_load(c, 40)
    follower.kill()
    mixed_load(c, 40, seed=2)
    follower.start()
    caught_up(c, follower, master)
    assert identical_logs(master, follower)


def test_replication_needs_the_admin_token(tmp_path, groups):
    token = tmp_path / "admin"
    token.write_text("s3cret\n")
    g = groups(2, start=False)
    g.members[0].extra += ["--admin-token-file", str(token)]
    g.members[1].extra += ["--admin-token-file", str(token)]
    g.start(admin_token="s3cret")
    c = g.client(admin_token="s3cret")
    c.send("t", b"x")
    caught_up(c, g.members[1], g.members[0])
    intruder = grpc.insecure_channel(g.members[0].address)
    from msgstore.v1 import ha_pb2, ha_pb2_grpc

    with pytest.raises(grpc.RpcError) as e:
        ha_pb2_grpc.ReplicationStub(intruder).GetMetadata(ha_pb2.GetMetadataRequest(), timeout=5)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    intruder.close()


def test_a_master_that_lost_its_data_is_not_followed(groups):
    """A master back on an empty volume must not make its followers cut what they hold."""
    g = groups(2)
    master, follower = g.members
    c = g.client()
    mixed_load(c, 20)
    caught_up(c, follower, master)
    held = role(c, follower).end_offset
    master.kill()
    shutil.rmtree(master.data_dir)
    master.start()  # an ASYNC_MASTER again, at epoch 1 from offset 0
    wait_until(lambda: "this master lost data" in master.log(), what="the master to refuse the follower")
    assert role(c, follower).end_offset == held and not connected(c, follower)
    c.admin(follower.address).promote()
    master.kill()
    g.restart_as_follower(master, follower)  # the emptied member copies everything back
    caught_up(c, master, follower)
    assert identical_logs(master, follower)


def test_a_replaced_volume_named_master_by_the_roles_file_waits(tmp_path):
    """The operator's roles file names this member master of a group that ran before (it has an
    address), but the volume is empty: it comes up a follower and lets the operator decide."""
    roles = tmp_path / "roles.json"
    roles.write_text(json.dumps({"groups": {"g0": {"members": ["m0", "m1"], "master": "m0", "address": "10.9.9.9:1", "epoch": 3}}}))
    m = ServerProcess(str(tmp_path / "m0"), name="m0", args=["--roles-file", str(roles)]).start()
    try:
        c = Client(m.address, timeout=10)
        r = c.admin(m.address).role_pb()
        assert r.role == "SLAVE" and r.master_address == "" and "its volume is empty" in m.log()
        with pytest.raises(StoreError) as e:
            c.send("t", b"x")
        assert e.value.code == grpc.StatusCode.UNAVAILABLE
        c.close()
    finally:
        m.kill()


def test_a_follower_behind_the_master_s_retention_starts_over_from_its_first_segment(groups):
    g = groups(2, master=["fileReservedTime=1", "deleteCommitLogFilesInterval=0"])
    master, follower = g.members
    c = g.client()
    mixed_load(c, 10)
    caught_up(c, follower, master)
    follower.kill()
    mixed_load(c, 60, seed=3)  # several more 256 KiB segments
    old = time.time() - 3 * 3600
    segments = sorted(os.listdir(os.path.join(master.data_dir, "commitlog")))
    for name in segments[:-1]:
        os.utime(os.path.join(master.data_dir, "commitlog", name), (old, old))
    assert c.admin(master.address).manual_delete().deleted_segments == len(segments) - 1
    follower.start()  # its log ends below what the master still keeps
    caught_up(c, follower, master)
    assert identical_logs(master, follower)
    assert "starting the copy over" in follower.log()


def test_reads_go_to_a_follower_while_the_master_is_down_and_commits_to_the_new_master(groups):
    g = groups(2, follower=["slaveReadEnable=true"])
    master, follower = g.members
    c = g.client()
    sent = c.send_batch("reads", [OutMessage(b"r%d" % i) for i in range(30)], queue=QueueRef("g0", master.address, 0))
    assert all(r.ok for r in sent)
    c.commit("billing", "reads", QueueRef("g0", master.address, 0), 10)
    caught_up(c, follower, master)
    wait_until(lambda: role(c, follower).end_offset == role(c, master).end_offset, what="metadata to follow")
    master.kill()
    q = QueueRef("g0", master.address, 0)  # what the consumer knew before the crash
    # served by the follower (whose dispatch follows its copy of the log a moment later)
    got = wait_until(lambda: (r := c.pull("reads", q, 0, max_messages=64)).next_offset == 30 and r, timeout=10, what="the follower's reads")
    assert [m.body for m in got.messages] == [b"r%d" % i for i in range(30)]
    c.admin(follower.address).promote()
    c.commit("billing", "reads", q, 20)  # goes to whoever is master now
    assert c.committed("billing", "reads", q) == 20
    assert Client(follower.address).committed("billing", "reads", QueueRef("g0", follower.address, 0)) == 20


def test_a_consumer_reading_a_follower_that_is_behind_keeps_its_position(groups):
    """The master took 30 messages while its follower was down; the follower comes back after
    the master died, holding 20. A consumer at 25 (read from the master) stays at 25 there: it
    is neither sent back to the queue's start (all 25 again) nor past what the master holds."""
    g = groups(2, follower=["slaveReadEnable=true"])
    master, follower = g.members
    c = g.client()
    q = QueueRef("g0", master.address, 0)
    assert all(r.ok for r in c.send_batch("behind", [OutMessage(b"b%d" % i) for i in range(20)], queue=q))
    caught_up(c, follower, master)
    follower.kill()
    assert all(r.ok for r in c.send_batch("behind", [OutMessage(b"b%d" % i) for i in range(20, 30)], queue=q))
    wait_until(lambda: c.pull("behind", q, 0, max_messages=64).next_offset == 30, timeout=10, what="b20-b29 dispatched")
    t = time.monotonic()
    assert c.pull("behind", q, 40, timeout_ms=5000).next_offset == 0  # a master sends a runaway offset back at once
    assert time.monotonic() - t < 4
    master.kill()
    follower.start()
    got = c.pull("behind", q, 25, max_messages=64)  # served by the follower
    assert (got.status, got.next_offset, got.messages) == ("OFFSET_OVERFLOW_BADLY", 25, [])
    # a long poll waits such an answer out (Pull and PullQueues): answered at once, it would bring the consumer straight back
    for call in (
        lambda: c.pull("behind", q, 25, timeout_ms=700),
        lambda: c.pull_queues_future("behind", follower.address, [(q, 25)], timeout_ms=700).result(),
    ):
        t = time.monotonic()
        call()
        assert time.monotonic() - t >= 0.6
    assert c.pull("behind", QueueRef("g0", master.address, 3), 4).next_offset == 4  # a queue it never had
    assert [m.body for m in c.pull("behind", q, 18, max_messages=64).messages] == [b"b18", b"b19"]


def test_the_asyncio_client_also_reads_from_a_follower_and_commits_to_the_new_master(groups):
    g = groups(2, follower=["slaveReadEnable=true"])
    master, follower = g.members
    c = g.client()
    q = QueueRef("g0", master.address, 0)
    assert all(r.ok for r in c.send_batch("reads", [OutMessage(b"r%d" % i) for i in range(30)], queue=q))
    caught_up(c, follower, master)

    async def scenario() -> tuple[list[bytes], int]:
        async with AsyncClient([master.address, follower.address], timeout=10) as ac:
            await ac.route("reads")  # cached while the master is up
            master.kill()
            bodies = [m.body for m in (await ac.pull("reads", q, 0, max_messages=64)).messages]
            c.admin(follower.address).promote()
            await ac.commit("billing", "reads", q, 15)
            return bodies, await ac.committed("billing", "reads", q)

    bodies, committed = asyncio.run(scenario())
    assert bodies == [b"r%d" % i for i in range(30)] and committed == 15


def test_a_deleted_topic_leaves_the_followers_too(groups):
    """A follower drops a topic's queues once its master's metadata says it is gone (and it
    holds the log up to where it was deleted); a topic of that name made again starts empty
    there as on the master, and a delete sent to the follower itself is refused."""
    from msgstore.v1 import msgstore_pb2 as pb

    g = groups(2, follower=["slaveReadEnable=true"])
    master, follower = g.members
    c = g.client()
    c.create_topic("gone", 1)
    for i in range(3):
        c.send("gone", b"old-%d" % i)
    caught_up(c, follower, master)
    cq_dir = os.path.join(follower.data_dir, "consumequeue", "gone")
    wait_until(lambda: os.path.isdir(cq_dir), what="the follower's queue of the topic")
    direct = Client(follower.address, timeout=10)
    with pytest.raises(StoreError) as e:
        direct._call(follower.address, "DeleteTopic", pb.DeleteTopicRequest(topic="gone", force=True))
    assert e.value.code.name == "FAILED_PRECONDITION" and "follower" in e.value.details
    assert all(r.deleted for r in c.delete_topic("gone", force=True))
    wait_until(lambda: not os.path.exists(cq_dir), timeout=30, what="the follower to drop the topic's queues")
    c.create_topic("gone", 1)
    c.send("gone", b"new")
    caught_up(c, follower, master)
    req = pb.PullRequest(topic="gone", queue_id=0, offset=0, max_messages=10)
    wait_until(
        lambda: [m.body for m in direct._call(follower.address, "Pull", req).messages] == [b"new"], what="only the new message there"
    )
    direct.close()


def test_a_second_process_with_a_member_s_name_is_refused(groups, tmp_path):
    """A user trial: a second member started with m1's name was taken for m1. The master counted
    its confirmations as m1's, so SYNC sends were acknowledged that the real m1 lacked, and a
    failover to m1 lost 8,145 of them. The master now refuses a second live process with a name,
    and that process stops, saying why."""
    g = groups(2, master=SYNC)
    master, follower = g.members
    c = g.client()
    twin = ServerProcess(str(tmp_path / "twin"), name=follower.name, args=["--group", "g0", "--replica-of", master.address])
    twin.start(wait=False)
    try:
        wait_until(lambda: "another process is connected as m1" in master.log(), what="the master to refuse the twin")
        # it stops (left retrying, it would get in first whenever the real m1's stream broke)
        assert twin.proc.wait(timeout=30) == 1
        assert "error: " in twin.log() and "every member of a group needs a --node-name of its own" in twin.log()
        followers = role(c, master).followers
        assert [(f.member, f.address) for f in followers] == [("m1", follower.address)], followers
        sent = c.send_batch("orders", [OutMessage(b"acknowledged")])
        assert sent[0].ok
        caught_up(c, follower, master)  # what was acknowledged is on the real m1
    finally:
        twin.kill()
