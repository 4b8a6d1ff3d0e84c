"""SQL92 selectors on message properties (issue 33, item 7), as RocketMQ's
``MessageSelector.bySql``: the selector's semantics, its errors with their column, and reads
through every path that filters (Pull, PullQueues, Receive, the consumers, the CLI) against a
real server process; RocketMQ 5's official client is in tests/rocketmq."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import grpc
import pytest

from msgstore.client import Client, Consumer, OutMessage
from msgstore.record.selector import SelectorError, compile_selector
from msgstore.v1 import msgstore_pb2 as pb
from msgstore.v1 import msgstore_pb2_grpc as pbg
from tests.support.servers import ROOT, wait_until

PROPS = {"region": "eu", "amount": "250", "ratio": "1.5", "flag": "true", "note": "it's late", "TAGS": "paid"}

SEMANTICS = [
    ("region = 'eu'", True),
    ("region <> 'eu'", False),
    ("amount > 100", True),  # a property compared with a number is that number
    ("amount = 250", True),
    ("amount = '250'", True),
    ("amount >= 250.0", True),
    ("ratio > 1", False),  # '1.5' is not an integer: unknown
    ("ratio > 1.4", True),
    ("amount BETWEEN 100 AND 250", True),
    ("amount NOT BETWEEN 100 AND 249", True),
    ("region IN ('us', 'eu')", True),
    ("region NOT IN ('us', 'eu')", False),
    ("missing IS NULL", True),
    ("region IS NOT NULL", True),
    ("missing = 1", False),  # unknown is not a match
    ("NOT missing = 1", False),  # ... nor is its negation
    ("missing = 1 OR region = 'eu'", True),  # unknown OR true
    ("missing = 1 AND region = 'eu'", False),
    ("NOT region = 'us'", True),  # NOT takes the whole comparison (SQL-92)
    ("flag = TRUE", True),
    ("note = 'it''s late'", True),
    ("note CONTAINS 'late'", True),
    ("note NOT CONTAINS 'early'", True),
    ("TAGS = 'paid' and amount > -1", True),  # keywords in any case; a negative literal
    ("(region = 'us' OR region = 'eu') AND amount < 300", True),
    ("region = 'eu' -- a comment", True),
    ("/* block */ amount > 249", True),
    ("amount > 100L", True),
    ("region > 1", False),  # not a number: unknown, never a crash
    ("region", False),  # a property alone is not true (RocketMQ's boolean cast)
    ("region <> 1", False),  # not a number: unknown, and so is its negation
    ("region = 'eu' OR 1.5 < 1" + "0" * 400, True),  # (an integer beyond any float: unknown, never a crash)
    ("1.5 < 1" + "0" * 400, False),
]


@pytest.mark.parametrize("text, expected", SEMANTICS, ids=[t[:40] for t, _ in SEMANTICS])
def test_a_selector_matches_as_rocketmq_s(text, expected):
    assert compile_selector(text).matches(PROPS) is expected


BAD = [
    ("amount >", 9, "ends too early"),
    ("amount > 'x'", 10, "cannot be compared with >"),
    ("region = NULL", 10, "IS NULL"),
    ("amount BETWEEN 5 AND 1", 16, "must not be above"),
    ("5", 1, "is a value, not a condition"),
    ("region IN (1)", 12, "expected a string"),
    ("(region = 'eu'", 15, "ends too early"),
    ("region ! 'eu'", 8, "unexpected character '!'"),
    ("'eu' IN ('eu')", 1, "IN applies to a property"),
    ("amount > 1 > 2", 12, "unexpected '>'"),
    ("region IS 1", 11, "expected NOT, NULL"),
    ("-amount", 1, "a number is a value"),
    ("NOT " * 100 + "a = 1", 0, "nested more than 64 deep"),
    ("(NOT " * 164 + "a = 1" + ")" * 164, 0, "nested more than 64 deep"),  # (not a RecursionError: INTERNAL)
]


@pytest.mark.parametrize("text, column, phrase", BAD, ids=[t[:40] for t, _c, _p in BAD])
def test_an_invalid_selector_names_the_column_of_its_error(text, column, phrase):
    with pytest.raises(SelectorError) as e:
        compile_selector(text)
    assert e.value.column == column, e.value
    assert phrase in str(e.value)


def _send_orders(client: Client, topic: str, queues: int, rounds: int) -> None:
    """Per queue: ``rounds`` batches of 500 small orders from 'us', then one large order from 'eu'."""
    client.create_topic(topic, queues)
    for q in client.route(topic).queues:
        for _round in range(rounds):
            assert all(
                x.ok
                for x in client.send_batch(
                    topic, [OutMessage(b"us-%d" % i, properties={"region": "us", "amount": str(i)}) for i in range(500)], queue=q
                )
            )
        assert client.send(topic, b"eu-big-%d" % q.queue_id, properties={"region": "eu", "amount": "5000"}, queue=q).ok
    wait_until(lambda: all(hi == 500 * rounds + 1 for _lo, hi in client.queue_offsets(topic).values()), timeout=30, what="dispatched")


def test_pull_pull_queues_and_a_consumer_take_only_what_the_selector_matches(server, client):
    _send_orders(client, "orders", 2, 2)  # (each match stands behind 1,000 that do not: more than one read looks at)
    q0, q1 = sorted(client.route("orders").queues, key=lambda q: q.queue_id)
    stub = pbg.MessageStoreStub(client.channel(server.address))
    where = "region = 'eu' AND amount > 1000"
    got, offset = [], 0
    while offset < 1001:
        resp = stub.Pull(pb.PullRequest(topic="orders", queue_id=0, offset=offset, sql_filter=where), timeout=10)
        assert resp.next_offset > offset, resp  # (a read that matched nothing still moves on)
        got += [m.body for m in resp.messages]
        offset = resp.next_offset
    assert got == [b"eu-big-0"]
    few = client.pull("orders", q1, 0, sql="amount BETWEEN 10 AND 12 AND region = 'us'")
    assert [m.body for m in few.messages] == [b"us-10", b"us-11", b"us-12"] * 2  # (two rounds of them)
    both = stub.PullQueues(
        pb.PullQueuesRequest(pulls=[pb.PullRequest(topic="orders", queue_id=q, offset=0, sql_filter="amount < 2") for q in (0, 1)])
    )
    assert [[m.body for m in r.messages] for r in both.results] == [[b"us-0", b"us-1", b"us-0", b"us-1"]] * 2
    consumer = Consumer(client, None, "orders", sql="region = 'eu'")
    seen: list[bytes] = []
    wait_until(lambda: seen.extend(r.message.body for r in consumer.poll(timeout=0.5)) or len(seen) >= 2, timeout=30, what="both")
    assert sorted(seen) == [b"eu-big-0", b"eu-big-1"]
    consumer.close()


def test_receive_finds_a_match_behind_many_that_do_not_in_one_call(server, client):
    _send_orders(client, "pops", 1, 4)  # 2,000 that do not match, then the one that does
    got = client.receive("billing", "pops", 8, invisible=30, sql="region = 'eu'")
    assert [m.body for m in got] == [b"eu-big-0"]
    assert not any(client.ack("billing", "pops", got))  # (one result per receipt: "" = acknowledged)
    assert client.receive("billing", "pops", 8, invisible=30, sql="region = 'eu'") == []
    few = client.receive("others", "pops", 32, invisible=30, sql="amount < 16")  # (another group: its own position)
    assert len(few) == 32 and all(int(m.properties["amount"]) < 16 for m in few)


def test_a_bad_selector_is_invalid_argument_naming_the_field_and_the_column(server, client):
    client.create_topic("t", 1)
    stub = pbg.MessageStoreStub(client.channel(server.address))
    calls = {
        "Pull": lambda **kw: stub.Pull(pb.PullRequest(topic="t", queue_id=0, offset=0, **kw), timeout=10),
        "Receive": lambda **kw: stub.Receive(pb.ReceiveRequest(group="g", topic="t", invisible_ms=1000, **kw), timeout=10),
        "PullQueues": lambda **kw: stub.PullQueues(pb.PullQueuesRequest(pulls=[pb.PullRequest(topic="t", queue_id=0, **kw)]), timeout=10),
    }
    for name, call in calls.items():
        with pytest.raises(grpc.RpcError) as e:
            call(sql_filter="amount > 'x'")
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
        assert "sql_filter" in e.value.details() and "column 10" in e.value.details(), (name, e.value.details())
        with pytest.raises(grpc.RpcError) as e:
            call(sql_filter="amount > 1", tag_filter="paid")
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "not both" in e.value.details(), name


def test_a_store_with_property_filters_off_says_so(servers):
    node = servers("off", settings=["enablePropertyFilter=false"])
    with Client(node.address, timeout=10) as c:
        c.create_topic("t", 1)
        with pytest.raises(Exception) as e:
            c.receive("g", "t", 1, sql="a = 1")
        assert "enablePropertyFilter" in str(e.value)


def test_the_cli_pulls_and_receives_by_selector_and_reports_a_bad_one_as_json(server, client):
    _send_orders(client, "cli", 1, 2)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server"))

    def cli(*args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "msgstore.cli", "--json", *args, "--server", server.address]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)

    out = cli("pull", "cli", "--sql", "region = 'eu'")  # (behind 1,000 that do not match: it reads on)
    assert out.returncode == 0, out.stderr
    assert [json.loads(line)["body"] for line in out.stdout.splitlines()] == ["eu-big-0"]  # (a JSON line per message)
    out = cli("receive", "g", "cli", "--sql", "amount IN ('3', '4')")
    assert out.returncode == 0, out.stderr
    assert sorted(r["body"] for r in json.loads(out.stdout)) == ["us-3", "us-3", "us-4", "us-4"]  # (one JSON list)
    bad = cli("pull", "cli", "--sql", "region = ")
    assert bad.returncode != 0
    err = json.loads(bad.stderr.strip().splitlines()[-1])
    assert "not a SQL92 selector" in json.dumps(err) and "column 9: the expression ends too early" in json.dumps(err), err
    both = cli("receive", "g", "cli", "--sql", "a = 1", "--tags", "x")
    assert both.returncode == 2 and "not allowed with" in both.stderr
