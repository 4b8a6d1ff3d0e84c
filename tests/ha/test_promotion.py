"""Promotion that cannot go wrong half-way (issue 20): the store-level steps a promoted follower
takes, on real stores and files, and the same against real processes."""

from __future__ import annotations

import json
import os
import threading

from msgstore.client import Client, OutMessage
from msgstore.ha.epochs import Epoch, EpochFile
from msgstore.record.codec import Message
from msgstore.store import GetStatus
from tests.ha.conftest import Group, caught_up, role
from tests.support.servers import wait_until


def _master_log(make_store, tmp_path, n: int, body: bytes = b"m" * 300) -> tuple[object, bytes]:
    master = make_store(tmp_path / "master")
    for i in range(n):
        assert master.put_message(Message("t", body + b"%d" % i, properties={"KEYS": f"k{i}"})).ok
    end = master.commitlog.max_offset
    return master, master.commitlog.read(0, end)


def test_a_copy_ending_inside_a_record_is_cut_to_its_last_whole_record_on_promotion(make_store, tmp_path):
    master, data = _master_log(make_store, tmp_path, 10)
    last = master.commitlog.max_offset - (len(data) // 10)  # where the last record starts
    follower = make_store(tmp_path / "follower")
    follower.follower = True
    follower.append_replicated(0, data[: len(data) - 57])  # its master died mid-record
    opened: list[int] = []
    follower.take_writes(opened.append, timeout=10)
    assert opened == [last] and follower.commitlog.max_offset == last  # the partial record is gone
    r = follower.put_message(Message("t", b"first of the new term"))
    assert r.ok and r.queue_offset == 9  # right after the nine whole records, at the offset the cut one had
    assert follower.wait_dispatched(10)
    got = follower.get_message("group", "t", 0, 9, 1).messages()
    assert got and got[0].body == b"first of the new term"


def test_a_follower_writes_past_its_write_buffer(make_store, tmp_path):
    """transientStorePoolEnable on a follower: the write buffer is off while it follows, so every
    replicated chunk lands at the log's write position; promotion turns it back on."""
    demoted = make_store(tmp_path / "demoted", transientStorePoolEnable=True)
    assert demoted.put_message(Message("t", b"own")).ok
    assert demoted.commitlog.segments.last().uses_buffer
    demoted.follower = True  # a master with a buffer in use becomes a follower: committed and put away
    last = demoted.commitlog.segments.last()
    assert not last.uses_buffer and last.committed == last.wrote
    master, data = _master_log(make_store, tmp_path, 40)
    follower = make_store(tmp_path / "follower", transientStorePoolEnable=True)
    follower.follower = True
    step = 1000
    for pos in range(0, len(data), step):
        assert follower.append_replicated(pos, data[pos : pos + step]) == min(pos + step, len(data))
    assert follower.commitlog.read(0, len(data)) == data
    follower.take_writes(lambda end: None, timeout=10)
    assert follower.commitlog.segments.pool is follower.commitlog.pool is not None
    assert follower.put_message(Message("t", b"after")).ok


def test_consumer_offsets_a_follower_takes_are_clamped_to_what_it_holds(make_store, tmp_path):
    master, data = _master_log(make_store, tmp_path, 5)
    follower = make_store(tmp_path / "follower")
    follower.follower = True
    follower.append_replicated(0, data)
    assert follower.wait_dispatched(10)
    offsets = {"offsetTable": {"t@billing": {"0": 50, "1": 3}, "t@audit": {"0": 2}}}
    follower.apply_metadata({"offsets": json.dumps(offsets)})
    assert follower.query_offset("billing", "t", 0) == 5  # it holds 5 messages in queue 0: not past them
    assert follower.query_offset("billing", "t", 1) == 0  # and none in queue 1
    assert follower.query_offset("audit", "t", 0) == 2


def test_an_epoch_file_past_the_log_s_end_is_reconciled(tmp_path):
    f = EpochFile(str(tmp_path))
    f.append(1, 0)
    f.append(2, 1000)
    f.append(3, 5000)  # a crash between cutting the log (to 900) and this file
    assert f.reconcile(900) == [Epoch(2, 1000), Epoch(3, 5000)]
    assert f.snapshot() == [Epoch(1, 0), Epoch(3, 900)]
    f.append(4, 900)  # a promotion works again (it replaces the empty term)
    assert EpochFile(str(tmp_path)).snapshot() == [Epoch(1, 0), Epoch(4, 900)]


def test_promotion_while_chunks_stream_in_never_reuses_a_queue_offset(tmp_path):
    """The follower is promoted while its master streams large batches: appends in flight are
    awaited and everything copied is dispatched before the first put, whose queue offset is
    then a new one and pullable with its own body."""
    for round_ in range(3):
        (tmp_path / f"round{round_}").mkdir()
        g = Group(tmp_path / f"round{round_}", 2, [], []).start()
        master, follower = g.members
        c = Client(master.address, timeout=10)
        body = os.urandom(20_000)
        stop = threading.Event()

        def load(c=c, body=body, stop=stop) -> None:
            for _ in range(2000):  # bounded; stopped once the follower is promoted
                if stop.is_set():
                    return
                c.send_batch("big", [OutMessage(body) for _ in range(8)], queue=c.route("big").queues[0])

        t = threading.Thread(target=load, daemon=True)
        t.start()
        wait_until(lambda c=c, f=follower: role(c, f).end_offset > 2_000_000, what="a few MiB copied")
        f = Client(follower.address, timeout=30)
        f.admin(follower.address).promote(epoch=2)
        stop.set()
        t.join(30)
        r = f.send("big", b"first on the new master %d" % round_, queue=f.route("big").queues[0], visible=True)
        assert r.ok
        got = f.pull("big", f.route("big").queues[0], r.queue_offset, max_messages=1)
        assert got.messages and got.messages[0].body == b"first on the new master %d" % round_
        whole = follower.whole_log()  # (log() keeps its tail)
        assert "Bad file descriptor" not in whole and "Task was destroyed" not in whole
        g.kill_all()
        c.close()
        f.close()


def test_a_late_roles_file_never_promotes_a_demoted_member(tmp_path):
    """The roles file names a member master at an older epoch than it knows: ignored."""
    from tests.support.servers import ServerProcess, free_port

    roles = tmp_path / "roles.json"
    ports = [free_port(), free_port()]
    addr = [f"127.0.0.1:{p}" for p in ports]

    def write(master: int, epoch: int, known: bool = True) -> None:
        address = addr[master] if known else ""  # as the operator writes a new group: no address until the pod is seen
        doc = {"groups": {"g0": {"members": ["a", "b"], "master": ["a", "b"][master], "address": address, "epoch": epoch}}}
        tmp = tmp_path / "roles.tmp"
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, roles)

    write(0, 1, known=False)
    members = [ServerProcess(str(tmp_path / n), port=p, name=n, args=["--roles-file", str(roles)]) for n, p in zip(("a", "b"), ports)]
    for m in members:
        m.start()
    write(0, 1)
    c = Client(addr, timeout=5)
    assert c.send("t", b"x").ok
    caught_up(c, members[1], members[0])
    write(1, 3)  # b is made master at epoch 3 (a follows it)
    wait_until(lambda: role(c, members[1]).role == "MASTER" and role(c, members[0]).role == "SLAVE", what="the new roles applied")
    write(0, 2)  # a file written before that one arrives late
    wait_until(lambda: "older epoch" in members[0].log() and "older epoch" in members[1].log(), what="both to read and ignore it")
    assert role(c, members[0]).role == "SLAVE" and role(c, members[0]).epoch == 3
    assert role(c, members[1]).role == "MASTER" and role(c, members[1]).epoch == 3
    assert c.send("t", b"still on b").address == addr[1]
    for m in members:
        m.kill()


def test_a_follower_answers_a_pull_outside_its_queue_with_the_caller_s_own_offset(make_store, tmp_path):
    """A follower behind its master (or without the queue yet) must not send a consumer back to
    the queue's start or past what the master holds: RocketMQ's nextOffsetCorrection on a slave.
    A master answers with the queue's word."""
    master, data = _master_log(make_store, tmp_path, 5)
    follower = make_store(tmp_path / "follower")
    follower.follower = True
    follower.append_replicated(0, data)
    assert follower.wait_dispatched(5)
    for store, expect in ((master, {"missing": 0, "past": 0}), (follower, {"missing": 7, "past": 9})):
        missing = store.get_message(None, "no-such-topic", 0, 7)
        assert (missing.status, missing.next_offset) == (GetStatus.NO_MATCHED_LOGIC_QUEUE, expect["missing"])
        past = store.get_message(None, "t", 0, 9)  # (a consumer that read 9 from a master that had more)
        assert (past.status, past.next_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, expect["past"])
        at_end = store.get_message(None, "t", 0, 5)
        assert (at_end.status, at_end.next_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 5)
