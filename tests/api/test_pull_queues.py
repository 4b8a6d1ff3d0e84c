"""PullQueues: several queues of a node in one call, against a real server process; and the
consumer's use of it (one long poll per node, a Pull per queue on a node without it)."""

import asyncio
import collections
import contextlib
import os
import signal
import threading
import time
from concurrent import futures

import grpc
import pytest

from msgstore.client import AsyncClient, AsyncConsumer, Client, Consumer, OutMessage, StoreError
from msgstore.v1 import msgstore_pb2 as pb
from msgstore.v1 import msgstore_pb2_grpc as pbg
from tests.api.test_send_stream import metric
from tests.support.servers import ServerProcess, free_port, wait_until


def _queues(client, topic):
    return {q.queue_id: q for q in client.route(topic).queues}


def _pull(topic, qid, offset, raw=True, **kw):
    return pb.PullRequest(topic=topic, queue_id=qid, offset=offset, raw=raw, **kw)


def test_every_queue_named_is_read_in_order(server, client):
    client.create_topic("pq", 4)
    qs = _queues(client, "pq")
    for qid in (0, 2, 3):
        client.send_batch("pq", [OutMessage(b"q%d-%d" % (qid, i)) for i in range(qid + 1)], queue=qs[qid])
    wait_until(lambda: client.queue_offsets("pq")[qs[3]][1] == 4, timeout=10, what="the sends dispatched")
    stub = pbg.MessageStoreStub(client.channel(server.address))
    resp = stub.PullQueues(
        pb.PullQueuesRequest(pulls=[_pull("pq", 3, 1), _pull("pq", 1, 0), _pull("pq", 0, 0, raw=False), _pull("pq", 2, 0)])
    )
    assert [pb.PullStatus.Name(r.status) for r in resp.results] == ["FOUND", "NO_MATCHED_LOGIC_QUEUE", "FOUND", "FOUND"]
    assert [r.next_offset for r in resp.results] == [4, 0, 1, 3]
    assert [r.record_count for r in resp.results] == [3, 0, 1, 3]
    assert [m.body for m in Client_decode(resp.results[3])] == [b"q2-0", b"q2-1", b"q2-2"]
    assert [m.body for m in resp.results[2].messages] == [b"q0-0"] and resp.results[2].records == b""  # decoded, as asked


def Client_decode(result):
    from msgstore.client.client import decode_records

    return decode_records(result.records)


def test_past_the_call_budget_the_rest_keep_their_offsets(server, client):
    client.create_topic("budget", 2)
    qs = _queues(client, "budget")
    body = b"x" * 2000
    for qid in (0, 1):
        client.send_batch("budget", [OutMessage(body) for _ in range(3)], queue=qs[qid])
    wait_until(lambda: client.queue_offsets("budget")[qs[1]][1] == 3, timeout=10, what="the sends dispatched")
    stub = pbg.MessageStoreStub(client.channel(server.address))
    resp = stub.PullQueues(pb.PullQueuesRequest(pulls=[_pull("budget", 0, 0), _pull("budget", 1, 0)], max_bytes=1))
    first, second = resp.results
    assert first.record_count == 1 and first.next_offset == 1  # one record at least, as a Pull (it passes the budget)
    assert second.record_count == 0 and second.next_offset == 0  # not read: read again at the next call
    again = stub.PullQueues(pb.PullQueuesRequest(pulls=[_pull("budget", 1, 0)]))
    assert again.results[0].record_count == 3


def test_a_long_poll_of_many_queues_is_answered_by_a_send_to_any(server, client):
    """One call parked on 64 queues for 60 s answers once a message reaches the 50th: an answer
    within the 10 s the test waits can only come from the arrival."""
    client.create_topic("wide", 64)
    qs = _queues(client, "wide")
    stub = pbg.MessageStoreStub(client.channel(server.address))
    call = stub.PullQueues.future(pb.PullQueuesRequest(pulls=[_pull("wide", i, 0) for i in range(64)], timeout_ms=60_000), timeout=70)
    wait_until(lambda: metric(server, "msgstore_long_polls_waiting") >= 64, timeout=10, what="the call parked on every queue")
    assert not call.done()
    looks = metric(server, "msgstore_pull_latency_seconds_count")  # one per look at a queue
    client.send_batch("wide", [OutMessage(b"late")], queue=qs[50])
    resp = call.result(timeout=10)
    assert [i for i, r in enumerate(resp.results) if r.record_count] == [50]
    assert [m.body for m in Client_decode(resp.results[50])] == [b"late"]
    assert [r.next_offset for r in resp.results] == [1 if i == 50 else 0 for i in range(64)]
    # only the queue that had an arrival was looked at again, not all 64
    assert metric(server, "msgstore_pull_latency_seconds_count") - looks == 1
    wait_until(lambda: metric(server, "msgstore_long_polls_waiting") == 0, timeout=10, what="no waiter left behind")


def test_a_long_poll_woken_by_a_queue_still_empty_for_it_waits_on_every_queue(server, client):
    """An arrival that does not answer the call (a message below the caller's offset on that
    queue) leaves it parked on every queue: the woken queue's waiter is registered again, the
    others are left in place, and a later send to another queue still answers."""
    client.create_topic("rewait", 4)
    qs = _queues(client, "rewait")
    stub = pbg.MessageStoreStub(client.channel(server.address))
    # queue 1 is read from offset 1: its first message wakes the call but is not the caller's
    pulls = [_pull("rewait", 0, 0), _pull("rewait", 1, 1), _pull("rewait", 2, 0)]
    call = stub.PullQueues.future(pb.PullQueuesRequest(pulls=pulls, timeout_ms=60_000), timeout=70)
    wait_until(lambda: metric(server, "msgstore_long_polls_waiting") >= 3, timeout=10, what="the call parked")
    looks = metric(server, "msgstore_pull_latency_seconds_count")
    client.send_batch("rewait", [OutMessage(b"first")], queue=qs[1])
    wait_until(lambda: metric(server, "msgstore_pull_latency_seconds_count") > looks, timeout=10, what="the woken queue looked at")
    wait_until(lambda: metric(server, "msgstore_long_polls_waiting") >= 3, timeout=10, what="parked again on every queue")
    assert not call.done()
    client.send_batch("rewait", [OutMessage(b"second")], queue=qs[2])
    resp = call.result(timeout=10)
    assert [r.record_count for r in resp.results] == [0, 0, 1]
    assert [r.next_offset for r in resp.results] == [0, 1, 1]
    assert [m.body for m in Client_decode(resp.results[2])] == [b"second"]


@pytest.mark.parametrize(
    "request_, field",
    [
        (pb.PullQueuesRequest(), "pulls"),
        (pb.PullQueuesRequest(pulls=[_pull("bad", 0, 0), _pull("bad", 0, -1)]), "pulls[1].offset"),
        (pb.PullQueuesRequest(pulls=[_pull("bad", 0, 0, timeout_ms=5)]), "pulls[0].timeout_ms"),
        (pb.PullQueuesRequest(pulls=[_pull("bad", 0, 0, max_messages=5000)]), "pulls[0].max_messages"),
        (pb.PullQueuesRequest(pulls=[_pull("bad", 0, 0)] * 1025), "pulls"),
        (pb.PullQueuesRequest(pulls=[_pull("bad", 0, 0)], timeout_ms=-1), "timeout_ms"),
    ],
)
def test_bad_input_names_the_field(server, client, request_, field):
    client.create_topic("bad", 1)
    stub = pbg.MessageStoreStub(client.channel(server.address))
    with pytest.raises(grpc.RpcError) as e:
        stub.PullQueues(request_, timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith(field + ":"), e.value.details()


def test_an_unknown_topic_is_not_found_where_a_send_would_not_create_it(servers):
    strict = servers("strict", settings=["autoCreateTopicEnable=false"])
    with grpc.insecure_channel(strict.address) as channel:
        with pytest.raises(grpc.RpcError) as e:
            pbg.MessageStoreStub(channel).PullQueues(pb.PullQueuesRequest(pulls=[_pull("nowhere", 0, 0)]), timeout=10)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND and "no topic nowhere" in e.value.details()


class _Proxy(grpc.GenericRpcHandler):
    """A gRPC hop in front of a real server that counts calls by method; methods in ``older``
    answer UNIMPLEMENTED, as a node older than them does."""

    def __init__(self, target: str, older: frozenset[str] = frozenset()):
        self.channel = grpc.insecure_channel(target)
        self.older = older
        self.calls: collections.Counter[str] = collections.Counter()
        self.refuse = None  # (method, request bytes) -> True: answered PERMISSION_DENIED, as a node whose ACL says no

    def service(self, details):
        name = details.method.rsplit("/", 1)[1]
        if name in self.older or (name == "PullQueuesStream" and "PullQueues" in self.older):
            self.calls[name] += 1
            return None
        if name == "PullQueuesStream":  # counted by request, each passed on as a PullQueues
            self.calls["PullQueuesStream opened"] += 1
            pull_queues = self.channel.unary_unary(
                details.method.replace("PullQueuesStream", "PullQueues"), request_serializer=None, response_deserializer=None
            )

            def forward_each(requests, ctx):
                for req in requests:
                    self.calls[name] += 1
                    if self.refuse is not None and self.refuse(name, req):
                        ctx.abort(grpc.StatusCode.PERMISSION_DENIED, "no")
                    yield pull_queues(req, timeout=60)

            return grpc.stream_stream_rpc_method_handler(forward_each, None, None)
        self.calls[name] += 1
        fn = self.channel.unary_unary(details.method, request_serializer=None, response_deserializer=None)

        def forward(req, ctx):
            if self.refuse is not None and self.refuse(name, req):
                ctx.abort(grpc.StatusCode.PERMISSION_DENIED, "no")
            return fn(req, timeout=60)

        return grpc.unary_unary_rpc_method_handler(forward, None, None)


@contextlib.contextmanager
def _behind_proxy(tmp_path, older: frozenset[str] = frozenset()):
    """A real server whose routes name the proxy (--advertise), and the proxy."""
    port = free_port()
    node = ServerProcess(str(tmp_path / "node"), name="node", args=["--advertise", f"127.0.0.1:{port}"]).start()
    proxy = grpc.server(futures.ThreadPoolExecutor(16))
    handler = _Proxy(node.address, older)
    proxy.add_generic_rpc_handlers((handler,))
    proxy.add_insecure_port(f"127.0.0.1:{port}")
    proxy.start()
    try:
        with Client(f"127.0.0.1:{port}", timeout=10, send_streams=False) as c:
            yield node, handler, c
    finally:
        proxy.stop(0)
        node.kill()


def test_an_idle_consumer_waits_in_one_call_per_node(tmp_path):
    """A consumer of 32 empty queues long-polls them in one call (it made 32 before)."""
    with _behind_proxy(tmp_path) as (node, proxy, c):
        c.create_topic("idle", 32)
        consumer = Consumer(c, None, "idle", long_poll_ms=30_000)
        got: list = []
        t = threading.Thread(target=lambda: got.extend(consumer.poll(timeout=30)))
        t.start()
        wait_until(lambda: metric(node, "msgstore_long_polls_waiting") == 32, timeout=10, what="the consumer's long poll parked")
        c.send_batch("idle", [OutMessage(b"wake")], queue=_queues(c, "idle")[17])
        t.join(10)
        assert [bytes(r.body) for r in got] == [b"wake"]
        assert proxy.calls["Pull"] == 0
        assert proxy.calls["PullQueues"] == 4  # a round that found nothing (4 calls of 8 queues)
        assert proxy.calls["PullQueuesStream"] == 1  # then the long poll, on the node's pull stream


def test_a_poll_waits_its_whole_timeout_over_several_long_polls(tmp_path):
    """poll(timeout=30) with 200 ms long polls returned [] after the first of them; it now polls
    again until its timeout (between long polls it looks for nodes that came back)."""
    with _behind_proxy(tmp_path) as (_node, proxy, c):
        got: dict[str, list] = {"sync": [], "aio": []}

        def sync_poll() -> None:
            got["sync"] += Consumer(c, None, "sync", long_poll_ms=200).poll(timeout=30)

        async def aio_poll() -> None:
            async with AsyncClient(c.route("aio").nodes[0].address, timeout=10) as ac:  # (the proxy's)
                async with AsyncConsumer(ac, None, "aio", long_poll_ms=200) as consumer:
                    got["aio"] += await consumer.poll(timeout=30)

        for topic, run in (("sync", sync_poll), ("aio", lambda: asyncio.run(aio_poll()))):
            c.create_topic(topic, 8)
            before = _long_polls(proxy)
            t = threading.Thread(target=run)
            t.start()
            # a round that found nothing, then several long polls, all in the one poll
            wait_until(lambda b=before: _long_polls(proxy) >= b + 8, timeout=10, what="long polls one after another")
            assert t.is_alive()
            c.send_batch(topic, [OutMessage(b"late")], queue=_queues(c, topic)[3])
            t.join(10)
            assert [bytes(r.body) for r in got[topic]] == [b"late"], topic


def test_a_consumer_keeping_up_makes_one_call_per_poll_and_a_backlog_is_read_in_rounds(tmp_path, monkeypatch):
    """Caught up, a poll long-polls at once (one request per node on its pull stream, answered
    as soon as something is there): it made a round of 4 calls first, 5 calls per arrival in a
    trickle. No thread is started per arrival: as a gRPC future each long poll started one of
    gRPC's (1,000 a second at 5,000 msg/s); the stream's threads start once. Behind (a poll
    came back full), rounds of concurrent calls read the backlog. No message is skipped."""
    with _behind_proxy(tmp_path) as (_node, proxy, c):
        c.create_topic("trickle", 8)
        queues = _queues(c, "trickle")
        consumer = Consumer(c, None, "trickle", max_messages=64)
        assert consumer.poll(timeout=0) == []  # (a round: positions and connections set up)
        c.send_batch("trickle", [OutMessage(b"first")], queue=queues[0])
        assert [bytes(r.body) for r in consumer.poll(timeout=5)] == [b"first"]  # (the stream opened)
        before = proxy.calls["PullQueuesStream"]
        started: list[str] = []  # threads started by this thread (not the proxy's own)
        me, start = threading.current_thread(), threading.Thread.start

        def counted(thread: threading.Thread) -> None:
            if threading.current_thread() is me:
                started.append(thread.name)
            start(thread)

        monkeypatch.setattr(threading.Thread, "start", counted)
        for i in range(30):  # (each long poll answers at once: before, a call answered before the
            # consumer's first look at it had its messages skipped; about one run in three saw it here)
            c.send_batch("trickle", [OutMessage(b"%d" % i)], queue=queues[i % 8])
            assert [bytes(r.body) for r in consumer.poll(timeout=5)] == [b"%d" % i]
        assert proxy.calls["PullQueuesStream"] - before == 30
        assert proxy.calls["PullQueuesStream opened"] == 1
        assert started == []
        monkeypatch.undo()
        for q in queues.values():
            c.send_batch("trickle", [OutMessage(b"b")] * 20, queue=q)
        _dispatched(c, "trickle", 31 + 160)  # (an acknowledged message is filed in its queue a moment later)
        got = consumer.poll(timeout=5)  # caught up: one long poll, which answers with 160 at once
        assert len(got) == 160
        before = proxy.calls["PullQueues"]
        c.send_batch("trickle", [OutMessage(b"c")], queue=queues[5])
        _dispatched(c, "trickle", 31 + 160 + 1)
        assert [bytes(r.body) for r in consumer.poll(timeout=5)] == [b"c"]
        assert proxy.calls["PullQueues"] - before == 4  # behind: a round of concurrent calls


def _long_polls(proxy) -> int:
    """Calls and stream requests of PullQueues the proxy passed on."""
    return proxy.calls["PullQueues"] + proxy.calls["PullQueuesStream"]


def _dispatched(c, topic: str, n: int) -> None:
    wait_until(lambda: sum(hi for _lo, hi in c.queue_offsets(topic).values()) == n, timeout=10, what=f"{n} messages in {topic}'s queues")


def test_a_caught_up_consumer_moves_past_messages_its_filter_does_not_match(server, client):
    """A long poll answered "no match" (800 non-matching messages looked at) moves the position
    on: the asyncio consumer dropped empty long-poll answers, and once caught up (it no longer
    pulls what is there first) asked for the same 800 messages until its timeout."""

    def send(topic: str) -> None:
        queue = _queues(client, topic)[0]
        for _ in range(3):
            client.send_batch(topic, [OutMessage(b"no", tags="B")] * 400, queue=queue)
        client.send_batch(topic, [OutMessage(b"yes", tags="A")], queue=queue)
        _dispatched(client, topic, 1201)

    client.create_topic("tagged-sync", 1)
    consumer = Consumer(client, None, "tagged-sync", tag_filter="A", long_poll_ms=500)
    assert consumer.poll(timeout=0) == []  # a round found nothing: caught up
    send("tagged-sync")
    assert [bytes(r.body) for r in consumer.poll(timeout=10)] == [b"yes"]

    client.create_topic("tagged-aio", 1)

    async def aio_poll() -> list[bytes]:
        async with AsyncClient(server.address, timeout=10) as ac:
            async with AsyncConsumer(ac, None, "tagged-aio", tag_filter="A", long_poll_ms=500) as aio:
                assert await aio.poll(timeout=0) == []
                await asyncio.get_running_loop().run_in_executor(None, send, "tagged-aio")
                return [bytes(r.body) for r in await aio.poll(timeout=10)]

    assert asyncio.run(aio_poll()) == [b"yes"]


@pytest.mark.parametrize("older", [frozenset(), frozenset({"PullQueues"})], ids=["one round", "two rounds of Pulls"])
def test_a_refusal_in_a_poll_moves_no_position(tmp_path, older):
    """A poll's calls are all read before any answer is applied: a refusal of the caller by a
    later call raised after earlier calls (or rounds) had moved their queues' positions past
    records the caller never got (they were lost to it). On a node without PullQueues the 8
    queues take a Pull each, in two rounds of 4."""
    with _behind_proxy(tmp_path, older=older) as (_node, proxy, c):
        c.create_topic("acl", 8)
        queues = _queues(c, "acl")
        for q in queues.values():
            c.send_batch("acl", [OutMessage(b"%d" % q.queue_id)], queue=q)
        _dispatched(c, "acl", 8)
        consumer = Consumer(c, None, "acl")
        if older:
            assert consumer.poll(timeout=0) == []  # (learns that the node answers UNIMPLEMENTED to PullQueues)

        def refuse(name: str, req: bytes) -> bool:
            if name == "Pull":
                return pb.PullRequest.FromString(req).queue_id == 7
            return name == "PullQueues" and any(p.queue_id == 7 for p in pb.PullQueuesRequest.FromString(req).pulls)

        proxy.refuse = refuse
        with pytest.raises(StoreError) as e:
            consumer.poll(timeout=0)  # queue 7 is in the round's last call, or the second round's
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
        assert set(consumer.positions.values()) == {0}
        proxy.refuse = None
        got: list[bytes] = []
        while len(got) < 8:  # (a long poll of Pulls answers with the first queue that has messages)
            batch = consumer.poll(timeout=5)
            assert batch, got
            got += [bytes(r.body) for r in batch]
        assert sorted(got) == [b"%d" % i for i in range(8)]


def test_a_refusal_of_a_caught_up_consumers_long_poll_raises_and_moves_no_position(tmp_path):
    """Caught up, a poll's one long poll is a call made in the poll's own thread (not a gRPC
    future): a refusal of the caller by it still raises, and moves no position."""
    with _behind_proxy(tmp_path) as (_node, proxy, c):
        c.create_topic("acl-lp", 8)
        consumer = Consumer(c, None, "acl-lp")
        assert consumer.poll(timeout=0) == []  # a round found nothing: caught up
        proxy.refuse = lambda name, _req: name in ("PullQueues", "PullQueuesStream")
        before = _long_polls(proxy)
        with pytest.raises(StoreError) as e:
            consumer.poll(timeout=5)
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
        assert _long_polls(proxy) == before + 1  # the long poll, at once
        assert set(consumer.positions.values()) == {0}
        proxy.refuse = None
        c.send_batch("acl-lp", [OutMessage(b"after")], queue=_queues(c, "acl-lp")[6])
        assert [bytes(r.body) for r in consumer.poll(timeout=5)] == [b"after"]


def test_a_node_without_pull_queues_is_pulled_queue_by_queue(tmp_path):
    with _behind_proxy(tmp_path, older=frozenset({"PullQueues"})) as (_node, proxy, c):
        c.create_topic("old", 4)
        for q in c.route("old").queues:
            c.send_batch("old", [OutMessage(b"m%d" % q.queue_id)], queue=q)
        consumer = Consumer(c, None, "old")
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 4 and time.monotonic() < deadline:
            got += [bytes(r.body) for r in consumer.poll(timeout=1)]
        assert sorted(got) == [b"m0", b"m1", b"m2", b"m3"]
        assert proxy.calls["PullQueues"] <= 2  # (a round's calls start together: each may be refused once)
        assert proxy.calls["Pull"] >= 4


def test_the_asyncio_consumer_answers_at_the_first_arrival_not_at_the_end_of_its_long_poll(server, client):
    """It waited for every queue's long poll to end (30 s here) before answering; one call per
    node now answers at the arrival. The test waits 10 s."""
    client.create_topic("aio", 8)
    target = _queues(client, "aio")[5]

    async def main() -> tuple[list[bytes], float]:
        async with AsyncClient(server.address, timeout=10) as ac:
            consumer = AsyncConsumer(ac, None, "aio", long_poll_ms=30_000)
            async with consumer:
                polling = asyncio.ensure_future(consumer.poll(timeout=30))
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(
                    None,
                    lambda: wait_until(lambda: metric(server, "msgstore_long_polls_waiting") == 8, timeout=10, what="the long poll parked"),
                )
                t0 = time.monotonic()
                await loop.run_in_executor(None, lambda: client.send_batch("aio", [OutMessage(b"now")], queue=target))
                got = await asyncio.wait_for(polling, 10)
                return [bytes(r.body) for r in got], time.monotonic() - t0

    got, took = asyncio.run(main())
    assert got == [b"now"] and took < 10
    wait_until(lambda: metric(server, "msgstore_long_polls_waiting") == 0, timeout=10, what="no waiter left behind")


def test_the_asyncio_consumer_pulls_queue_by_queue_from_a_node_without_pull_queues(tmp_path):
    with _behind_proxy(tmp_path, older=frozenset({"PullQueues"})) as (_node, proxy, c):
        c.create_topic("old", 4)
        for q in c.route("old").queues:
            c.send_batch("old", [OutMessage(b"m%d" % q.queue_id)], queue=q)

        async def main() -> list[bytes]:
            async with AsyncClient(c.endpoints[0], timeout=10) as ac:
                consumer = AsyncConsumer(ac, None, "old")
                got: list[bytes] = []
                async with consumer:
                    deadline = time.monotonic() + 20
                    while len(got) < 4 and time.monotonic() < deadline:
                        got += [bytes(r.body) for r in await consumer.poll(timeout=1)]
                return got

        assert sorted(asyncio.run(main())) == [b"m0", b"m1", b"m2", b"m3"]
        assert proxy.calls["PullQueues"] == 1 and proxy.calls["Pull"] >= 4


def test_a_cancelled_asyncio_poll_moves_no_position(cluster):
    """One node answers with messages while another hangs (SIGSTOP): the poll, cancelled by the
    caller's timeout, returns nothing, so it must move nothing; the next poll returns them."""
    a, b, _c = cluster
    c = Client(a.address, timeout=10)
    c.create_topic("cancel", 2)
    on_a = [q for q in c.route("cancel").queues if q.node == a.name]

    async def main() -> tuple[list[bytes], list[bytes]]:
        async with AsyncClient(a.address, timeout=10) as ac:
            consumer = AsyncConsumer(ac, None, "cancel")
            async with consumer:
                assert await consumer.poll(timeout=0) == []  # positions and routes set up while every node answers
                c.send_batch("cancel", [OutMessage(b"m%d" % i) for i in range(5)], queue=on_a[0], visible=True)
                os.kill(b.proc.pid, signal.SIGSTOP)
                try:
                    try:
                        first = await asyncio.wait_for(consumer.poll(timeout=0), 2)
                    except TimeoutError:
                        first = []
                finally:
                    os.kill(b.proc.pid, signal.SIGCONT)
                got: list[bytes] = []
                deadline = time.monotonic() + 20
                while len(got) < 5 and time.monotonic() < deadline:
                    got += [bytes(r.body) for r in await consumer.poll(timeout=1)]
                return [bytes(r.body) for r in first], got

    try:
        first, later = asyncio.run(main())
    finally:
        c.close()
    assert first == []  # the poll was cancelled (else the test would not have tested a cancellation)
    assert sorted(later) == [b"m%d" % i for i in range(5)]
