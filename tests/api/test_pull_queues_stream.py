"""PullQueuesStream: a consumer's long polls as requests on one stream per node, against real
server processes (one of them stopped with SIGSTOP), and through a counting proxy that plays a
node older than the stream."""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import time

import grpc
import pytest

from msgstore.client import AsyncClient, AsyncConsumer, Client, Consumer, OutMessage
from msgstore.client.client import decode_records
from msgstore.client.pull_stream import StreamEnded
from msgstore.v1 import msgstore_pb2 as pb
from msgstore.v1 import msgstore_pb2_grpc as pbg
from tests.api.test_pull_queues import _behind_proxy, _pull, _queues
from tests.api.test_send_stream import metric
from tests.support.servers import wait_until

END = object()


def _stream(client, address: str):
    """A PullQueuesStream and the queue its requests are taken from (END closes it)."""
    requests: queue.SimpleQueue = queue.SimpleQueue()
    answers = pbg.MessageStoreStub(client.channel(address)).PullQueuesStream(iter(requests.get, END), timeout=60)
    return requests, answers


def test_each_request_is_answered_in_order_as_pull_queues_would(server, client):
    client.create_topic("ps", 3)
    qs = _queues(client, "ps")
    client.send_batch("ps", [OutMessage(b"a%d" % i) for i in range(3)], queue=qs[0])
    client.send_batch("ps", [OutMessage(b"b0")], queue=qs[2])
    wait_until(lambda: client.queue_offsets("ps")[qs[2]][1] == 1, timeout=10, what="the sends dispatched")
    requests, answers = _stream(client, server.address)
    requests.put(pb.PullQueuesRequest(pulls=[_pull("ps", 0, 0, max_messages=2), _pull("ps", 2, 0)]))
    first = next(answers)
    assert [r.next_offset for r in first.results] == [2, 1]
    assert [m.body for m in decode_records(first.results[0].records)] == [b"a0", b"a1"]
    requests.put(pb.PullQueuesRequest(pulls=[_pull("ps", 0, 2), _pull("ps", 2, 1)]))
    second = next(answers)
    assert [m.body for m in decode_records(second.results[0].records)] == [b"a2"]
    assert second.results[1].record_count == 0 and second.results[1].next_offset == 1
    # a long poll on the stream waits for an arrival: 30 s asked, the test waits 10
    requests.put(pb.PullQueuesRequest(pulls=[_pull("ps", 1, 0), _pull("ps", 2, 1)], timeout_ms=30_000))
    wait_until(lambda: metric(server, "msgstore_long_polls_waiting") == 2, timeout=10, what="the request parked on both queues")
    client.send_batch("ps", [OutMessage(b"late")], queue=qs[1])
    started = time.monotonic()
    third = next(answers)
    assert time.monotonic() - started < 10
    assert [m.body for m in decode_records(third.results[0].records)] == [b"late"]
    requests.put(END)
    assert list(answers) == []  # the client's end of requests ends the stream, with OK
    assert answers.code() == grpc.StatusCode.OK


def test_a_bad_request_ends_the_stream_naming_the_field(server, client):
    client.create_topic("psbad", 1)
    requests, answers = _stream(client, server.address)
    requests.put(pb.PullQueuesRequest(pulls=[_pull("psbad", 0, 0)]))
    assert next(answers).results[0].next_offset == 0
    requests.put(pb.PullQueuesRequest(pulls=[_pull("psbad", 0, 0), _pull("psbad", 0, -1)]))
    with pytest.raises(grpc.RpcError) as e:
        next(answers)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith("pulls[1].offset:"), e.value.details()
    requests.put(END)


def test_a_consumers_long_poll_ends_on_time_when_the_node_stops_answering(servers):
    """A stream has no read timeout in synchronous gRPC: the pull stream's watchdog cancels a
    pull past its poll's end (here 0.5 s + 0.2 s). The next poll, the node answering again,
    opens a new stream and gets the message sent meanwhile."""
    node = servers("paused")
    with Client(node.address, timeout=10) as c:
        c.create_topic("pause", 4)
        consumer = Consumer(c, None, "pause")
        assert consumer.poll(timeout=0) == []  # caught up: the next polls long-poll on the stream
        q = _queues(c, "pause")[3]
        c.send_batch("pause", [OutMessage(b"before")], queue=q)
        assert [bytes(r.body) for r in consumer.poll(timeout=5)] == [b"before"]
        first = consumer._streams[node.address]
        os.kill(node.proc.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            assert consumer.poll(timeout=0.5) == []
            assert time.monotonic() - started < 3  # (it is 0.7 s; without the watchdog, forever)
            assert first.closed
        finally:
            os.kill(node.proc.pid, signal.SIGCONT)
        c.send_batch("pause", [OutMessage(b"after")], queue=q)
        assert [bytes(r.body) for r in consumer.poll(timeout=5)] == [b"after"]
        assert consumer._streams[node.address] is not first
        consumer.close()
        assert consumer._streams[node.address].closed


def test_a_node_without_the_stream_is_long_polled_with_calls(tmp_path):
    """A node older than PullQueuesStream answers it UNIMPLEMENTED once; the consumer then
    long-polls it with PullQueues calls, and misses nothing."""
    with _behind_proxy(tmp_path, older=frozenset({"PullQueuesStream"})) as (_node, proxy, c):
        c.create_topic("older", 4)
        queues = _queues(c, "older")
        consumer = Consumer(c, None, "older")
        assert consumer.poll(timeout=0) == []
        got: list[bytes] = []
        for i in range(6):
            c.send_batch("older", [OutMessage(b"%d" % i)], queue=queues[i % 4])
            deadline = time.monotonic() + 10
            while len(got) <= i and time.monotonic() < deadline:
                got += [bytes(r.body) for r in consumer.poll(timeout=2)]
        assert got == [b"%d" % i for i in range(6)]
        assert proxy.calls["PullQueuesStream"] == 1  # asked once, answered UNIMPLEMENTED
        assert proxy.calls["PullQueues"] >= 6  # a call per long poll (the round was a Pull per queue: one each)


@pytest.mark.parametrize("older", [frozenset(), frozenset({"PullQueuesStream"})], ids=["stream", "older node"])
def test_the_asyncio_consumer_long_polls_on_the_stream_too(tmp_path, older):
    """AsyncConsumer, caught up, sends its lone long poll on the node's stream (one stream for
    every poll); a node older than the stream is asked until it refuses it and long-polled with calls after."""
    with _behind_proxy(tmp_path, older=older) as (_node, proxy, c):
        c.create_topic("aio-trickle", 4)
        queues = _queues(c, "aio-trickle")

        async def trickle() -> list[bytes]:
            got: list[bytes] = []
            async with AsyncClient(c.route("aio-trickle").nodes[0].address, timeout=10) as ac:  # (the proxy's)
                async with AsyncConsumer(ac, None, "aio-trickle") as consumer:
                    assert await consumer.poll(timeout=0) == []  # a round found nothing: caught up
                    for i in range(8):
                        await asyncio.to_thread(c.send_batch, "aio-trickle", [OutMessage(b"%d" % i)], queue=queues[i % 4])
                        deadline = time.monotonic() + 10
                        while len(got) <= i and time.monotonic() < deadline:
                            got += [bytes(r.body) for r in await consumer.poll(timeout=2)]
            return got

        assert asyncio.run(trickle()) == [b"%d" % i for i in range(8)]
        if older:
            # asked until it answers UNIMPLEMENTED: once, or again when grpc.aio overwrote that answer
            # with "Internal error from Core" (grpc/grpc#36066: the request's write raced the refusal,
            # read as a lost connection), never a stream per poll (9 here)
            assert 1 <= proxy.calls["PullQueuesStream"] <= 3
            assert proxy.calls["PullQueues"] >= 8
        else:
            assert proxy.calls["PullQueuesStream opened"] == 1
            assert proxy.calls["PullQueuesStream"] >= 8
            assert proxy.calls["PullQueues"] == 1  # the round (4 queues, one call), nothing after


def test_a_stream_to_a_node_no_longer_read_alone_is_closed(servers):
    """Only a lone long poll takes a stream: when it goes to another node (a failover moved the
    queues), the stream to the first is closed, and its watchdog thread ends."""
    first, second = servers("first"), servers("second")
    with Client(first.address, timeout=10) as c:
        c.create_topic("moved", 2)
        consumer = Consumer(c, None, "moved")
        old = consumer._pull_stream(first.address)
        assert consumer._pull_stream(first.address) is old  # (kept while it is the one read)
        new = consumer._pull_stream(second.address)
        assert old.closed and not new.closed
        assert list(consumer._streams) == [second.address]
        old._watchdog.join(10)
        assert not old._watchdog.is_alive()
        consumer.close()
        assert new.closed
        with pytest.raises(StreamEnded):  # (a poll still running when another thread closed the consumer)
            consumer._pull_stream(first.address)
        assert all(s.closed for s in consumer._streams.values())


def test_a_pull_stream_ends_with_its_client(server):
    """Closing the Client (before its consumer) ends the stream: the call's end closes it, and
    its watchdog thread ends."""
    c = Client(server.address, timeout=10)
    c.create_topic("ends", 2)
    consumer = Consumer(c, None, "ends")
    stream = consumer._pull_stream(server.address)
    c.close()
    stream._watchdog.join(10)
    assert stream.closed and not stream._watchdog.is_alive()
