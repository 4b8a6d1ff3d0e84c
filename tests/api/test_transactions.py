"""Transactional messages (issue 22, part 4) against real server processes: a half message is
invisible until committed (then visible exactly once) or rolled back; a producer that forgets
is checked back (commit, rollback, unknown → asked again), and after transactionCheckMax checks
the half is set aside; a SIGKILL keeps open halves open and commits done."""

from __future__ import annotations

import asyncio
import threading
import time

import grpc
import pytest

from msgstore.client import Client, QueueRef, StoreError
from msgstore.v1 import msgstore_pb2 as pb
from msgstore.v1 import msgstore_pb2_grpc as pbg
from tests.support.servers import wait_until

FAST = ["transactionTimeOut=300", "transactionCheckInterval=300", "transactionCheckMax=3"]


def bodies(c: Client, topic: str) -> list[bytes]:
    out = []
    for n in c.route(topic, refresh=True).nodes:
        for q in range(2):
            out += [m.body for m in c.pull(topic, QueueRef(n.name, n.address, q), 0, max_messages=1000).messages]
    return sorted(out)


@pytest.fixture
def node(servers):
    return servers("tx", settings=FAST)


@pytest.fixture
def c(node):
    with Client(node.address, timeout=10) as client:
        client.create_topic("orders", 2)
        yield client


def test_a_half_message_is_invisible_until_committed_and_then_visible_once(c):
    with c.transaction_producer("tx-group", lambda m: "unknown") as tp:
        tx = tp.send("orders", b"order-1")
        rolled = tp.send("orders", b"order-2")
        assert bodies(c, "orders") == []
        tx.commit()
        rolled.rollback()
        wait_until(lambda: bodies(c, "orders") == [b"order-1"], timeout=10, what="the committed message")
        with pytest.raises(StoreError) as e:
            tx.commit()  # once only
        assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
        time.sleep(0.5)  # an absence: the rolled back one never shows
        assert bodies(c, "orders") == [b"order-1"]


def test_a_forgotten_transaction_is_checked_back_and_resolved(c):
    asked: list[tuple[bytes, int]] = []
    answers = {b"commit-me": "commit", b"roll-me": "rollback"}
    lock = threading.Lock()

    def check(m) -> str:
        with lock:
            asked.append((m.body, m.check))
        if m.body == b"unsure" and m.check < 2:
            return "unknown"  # asked again
        return answers.get(m.body, "commit")

    with c.transaction_producer("tx-group", check) as tp:
        for body in (b"commit-me", b"roll-me", b"unsure"):
            tp.send("orders", body, properties={"k": "v"})  # and "forget" to end it
        wait_until(lambda: bodies(c, "orders") == [b"commit-me", b"unsure"], timeout=20, what="the check-backs' commits")
    with lock:
        assert (b"unsure", 2) in asked
        assert {b for b, _n in asked} == {b"commit-me", b"roll-me", b"unsure"}


def test_a_half_nobody_resolves_is_set_aside_after_the_maximum_checks(c):
    with c.transaction_producer("tx-group", lambda m: "unknown") as tp:
        tp.send("orders", b"limbo")
        wait_until(lambda: "TRANS_CHECK_MAX_TIME_TOPIC" in c.topics(), timeout=20, what="the half set aside")
    assert bodies(c, "orders") == []


def test_open_halves_stay_open_and_commits_stay_done_across_a_sigkill(servers):
    node = servers("tx-crash", settings=["transactionTimeOut=60000"])
    with Client(node.address, timeout=10) as c:
        c.create_topic("orders", 2)
        tp = c.transaction_producer("tx-group", lambda m: "unknown")
        done = tp.send("orders", b"done")
        pending = tp.send("orders", b"pending")
        done.commit()
        wait_until(lambda: bodies(c, "orders") == [b"done"], timeout=10, what="the commit")
        tp.close()
    node.kill()
    node.start()
    with Client(node.address, timeout=10) as c:
        pending_tx = pending.id
        c.end_transaction(pending_tx, "commit")
        wait_until(lambda: bodies(c, "orders") == [b"done", b"pending"], timeout=10, what="the commit after the restart")
        with pytest.raises(StoreError) as e:
            c.end_transaction(done.id, "commit")  # resolved before the crash: not again
        assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION, e.value


def test_transactional_sends_that_cannot_work_are_invalid_argument(c):
    with pytest.raises(StoreError) as e:
        c.send("orders", b"x", properties={"TRAN_MSG": "true"})
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "PGROUP" in e.value.details
    with pytest.raises(StoreError) as e:
        c.send("orders", b"x", properties={"TRAN_MSG": "true", "PGROUP": "g"}, delay=5)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "delayed" in e.value.details
    with pytest.raises(StoreError) as e:
        c.end_transaction("garbage", "commit")
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "transaction_id" in e.value.details
    # the client refuses that before any call: the store must too (a raw stub, as another client's)
    stub = pbg.MessageStoreStub(c.channel(c.endpoints[0]))
    with pytest.raises(grpc.RpcError) as raw:
        stub.EndTransaction(pb.EndTransactionRequest(transaction_id="garbage", resolution=pb.COMMIT), timeout=10)
    assert raw.value.code() == grpc.StatusCode.INVALID_ARGUMENT and raw.value.details().startswith("transaction_id: ")


def test_the_asyncio_client_commits_and_answers_check_backs(node, c):
    from msgstore.client import AsyncClient

    async def scenario() -> None:
        async def check(m):
            return "commit" if m.body == b"async-forgotten" else "rollback"

        ac = AsyncClient(node.address, timeout=10)
        try:
            async with ac.transaction_producer("async-tx", check) as tp:
                tx = await tp.send("orders", b"async-committed")
                await tx.commit()
                await tp.send("orders", b"async-forgotten")
                deadline = time.monotonic() + 20
                while bodies(c, "orders") != [b"async-committed", b"async-forgotten"] and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
        finally:
            await ac.close()

    asyncio.run(scenario())
    assert bodies(c, "orders") == [b"async-committed", b"async-forgotten"]


def test_a_send_retried_with_the_same_id_is_one_transaction(c):
    """A send retried after a lost answer stores its half twice under one UNIQ_KEY: one
    outcome for both, the message visible once."""
    props = {"TRAN_MSG": "true", "PGROUP": "tx-group"}
    first = c.send("orders", b"twice", properties=props, uniq_key="SAME-ID")
    second = c.send("orders", b"twice", properties=props, uniq_key="SAME-ID")
    assert first.transaction_id == second.transaction_id
    c.end_transaction(first.transaction_id, "commit")
    wait_until(lambda: bodies(c, "orders") == [b"twice"], timeout=10, what="the commit")
    time.sleep(1.0)  # an absence: no second copy (the duplicate is rolled back, never checked back)
    assert bodies(c, "orders") == [b"twice"]


def test_a_commit_right_after_the_send_finds_its_half(c):
    # "unknown": a check-back that comes first (a stall of 300 ms between a send and its commit)
    # leaves the half for the commit, where "rollback" made the commit fail for want of its half
    with c.transaction_producer("tx-group", lambda m: "unknown") as tp:
        for i in range(20):
            tp.send("orders", b"quick-%d" % i).commit()
    wait_until(lambda: len(bodies(c, "orders")) == 20, timeout=10, what="twenty commits")


def test_a_late_copy_of_a_resolved_transaction_gets_no_second_outcome(c):
    props = {"TRAN_MSG": "true", "PGROUP": "tx-group"}
    first = c.send("orders", b"once", properties=props, uniq_key="LATE-ID")
    c.end_transaction(first.transaction_id, "commit")
    wait_until(lambda: bodies(c, "orders") == [b"once"], timeout=10, what="the commit")
    with c.transaction_producer("tx-group", lambda m: "commit"):  # it would commit anything asked about
        c.send("orders", b"once", properties=props, uniq_key="LATE-ID")  # the retried send lands after the commit
        time.sleep(1.5)  # an absence, past several check rounds
    assert bodies(c, "orders") == [b"once"]
