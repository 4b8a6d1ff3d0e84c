"""Streaming produce (issue 14): one SendStream per node, requests merged while they queue,
answers by request id, group commits shared by concurrent acks, broken streams failing their
requests retryably, back-pressure, and the unary fallback for servers without SendStream."""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import re
import threading
import urllib.request

import grpc
import pytest

from msgstore.client import Client, OutMessage, StoreError
from msgstore.client.aio import AsyncClient
from msgstore.client.client import encode_send
from msgstore.client.routing import QueueRef
from msgstore.client.stream import AsyncSendStream, Part, SendStream, _Batcher, tagged
from msgstore.v1 import msgstore_pb2 as pb
from tests.support.servers import free_port, wait_until

BODY = b"x" * 1024


def metric(server, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5).read().decode()
    m = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def raw_stream(server):
    """SendStream with raw bytes both ways, as another language's client would use it."""
    ch = grpc.insecure_channel(server.address)
    return ch, ch.stream_stream("/msgstore.v1.MessageStore/SendStream", request_serializer=None, response_deserializer=None)


def test_send_uses_one_stream_per_node_and_answers_every_message(server, client):
    client.create_topic("t", 4)
    results = [client.send("t", f"m{i}".encode(), visible=True) for i in range(20)]
    assert all(r.ok for r in results)
    assert list(client._streams) == [server.address]  # every send went over the one stream
    by_queue: dict[int, list[int]] = {}
    for r in results:
        by_queue.setdefault(r.queue_id, []).append(r.queue_offset)
    for offsets in by_queue.values():  # offsets follow the sends, queue by queue
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    got = client.pull("t", QueueRef(results[0].node, server.address, results[0].queue_id), 0, max_messages=100)
    assert [m.body for m in got.messages] == [f"m{i}".encode() for i, r in enumerate(results) if r.queue_id == results[0].queue_id]


def test_a_client_without_send_streams_sends_unary(server):
    """What the CLI's one-shot `send` uses: no stream, no background thread to tear down at exit."""
    before = {t.name for t in threading.enumerate()}
    with Client(server.address, send_streams=False) as c:
        assert all(r.ok for r in [c.send("u", b"one"), *c.send_batch("u", [OutMessage(b"two")])])
        assert c._streams == {}
        assert not [t for t in threading.enumerate() if t.name not in before and t.name.startswith("msgstore-send-stream")]


def test_merged_request_is_protocol_level_concatenation(server):
    """Two callers' SendRequests concatenated under one request_id: one answer, entries in order;
    with an invalid part the whole request is refused (nothing stored) and the stream goes on."""
    Client(server.address).create_topic("m", 2)
    a = encode_send("m", 0, [OutMessage(b"a1"), OutMessage(b"a2")], None)
    b = encode_send("m", 1, [OutMessage(b"b1")], None)
    bad = encode_send("m", 9, [OutMessage(b"zz")], None)
    requests = [tagged([Part(a, 2, (), None), Part(b, 1, (), None)], 7), tagged([Part(a, 2, (), None), Part(bad, 1, (), None)], 8)]
    requests.append(b"\xff\xff not protobuf")
    requests.append(tagged([Part(b, 1, (), None)], 9))
    ch, call = raw_stream(server)
    try:
        answers = [pb.SendResponse.FromString(x) for x in call(iter(requests), timeout=10)]
    finally:
        ch.close()
    by_id = {x.request_id: x for x in answers}
    assert len(answers) == 4 and set(by_id) == {7, 8, 9, 0}
    assert [(r.queue_id, r.queue_offset) for r in by_id[7].results] == [(0, 0), (0, 1), (1, 0)]
    assert by_id[8].error_code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and not by_id[8].results
    assert "entries[2].queue_id" in by_id[8].error_message  # the merged request's index
    assert by_id[0].error_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]  # undecodable: no id to echo
    assert [(r.queue_id, r.queue_offset) for r in by_id[9].results] == [(1, 1)]  # nothing of request 8 was stored


def test_batcher_merges_only_alike_parts():
    parts = [Part(b"a", 1, (None, False), None), Part(b"b", 1, (None, False), None), Part(b"c", 1, (True, False), None)]
    queued = iter(parts[1:])
    b = _Batcher()
    assert [p.data for p in b.merge(parts[0], lambda: next(queued, None))] == [b"a", b"b"]
    assert b.carry is parts[2]  # different wait flags: the next request
    alone = Part(b"d", 1, (), None, alone=True)
    assert b.merge(alone, lambda: parts[0]) == [alone]


def test_concurrent_sends_merge_and_a_bad_one_fails_alone(server, client):
    """Requests queued behind a write go out merged (fewer requests than sends); a bad send
    merged with good ones fails on its own, naming its own entry, and the others are stored."""
    client.create_topic("c", 2)
    stream = client.send_stream(server.address)
    before = metric(server, "msgstore_put_latency_seconds_count")
    good = [OutMessage(f"g{i}".encode()) for i in range(400)]
    futures = [stream.submit(encode_send("c", i % 2, [m], None), 1, (None, False)) for i, m in enumerate(good[:200])]
    bad = stream.submit(encode_send("c", 5, [OutMessage(b"bad")], None), 1, (None, False))
    futures += [stream.submit(encode_send("c", i % 2, [m], None), 1, (None, False)) for i, m in enumerate(good[200:])]
    results = [f.result(10) for f in futures]
    with pytest.raises(StoreError) as e:
        bad.result(10)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "entries[0].queue_id" in e.value.details
    assert all(len(r) == 1 and r[0].status == pb.PUT_OK for r in results)
    for q in (0, 1):  # every good message stored once, in submit order per queue
        assert sorted(r[0].queue_offset for i, r in enumerate(results) if i % 2 == q) == list(range(200))
    requests = metric(server, "msgstore_put_latency_seconds_count") - before
    assert requests < len(futures)  # merged: the server saw fewer requests than sends


def test_sync_flush_acks_share_group_commits(servers):
    """64 producers awaiting each ack under SYNC_FLUSH: every ack after its flush, and flushes
    answering several requests each. (With 16 producers one full run saw 343 flushes for 640
    sends, above the bound below: a fast disk finishes a flush before the next request arrives.
    64 keep more requests waiting: 34-185 flushes over six runs here, against 112-262 with 16.)"""
    server = servers("sync", settings=["flushDiskType=SYNC_FLUSH"])
    Client(server.address).create_topic("s", 4)

    async def main() -> list:
        async with AsyncClient(server.address) as c:

            async def producer(p: int) -> list:
                return [await c.send("s", f"{p}-{i}".encode()) for i in range(10)]

            return await asyncio.gather(*[producer(p) for p in range(64)])

    results = [r for rs in asyncio.run(main()) for r in rs]
    assert len(results) == 640 and all(r.status == "PUT_OK" for r in results)
    commits = metric(server, "msgstore_group_commits_total")
    answered = metric(server, "msgstore_group_commit_requests_total")
    # every send answered by a group commit, and at least one flush answered several: concurrency
    # turned into fewer flushes (how many fewer depends on the disk: make bench measures it)
    assert 1 <= commits < answered <= len(results), (commits, answered)
    assert metric(server, "msgstore_commitlog_flushed_offset") >= metric(server, "msgstore_commitlog_max_offset")


def test_threads_share_the_sync_clients_stream(servers):
    server = servers("sync", settings=["flushDiskType=SYNC_FLUSH"])
    with Client(server.address) as c:
        c.create_topic("s", 4)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda i: c.send("s", str(i)), range(400)))
        assert all(r.ok for r in results) and len(c._streams) == 1
        offsets = {(r.queue_id, r.queue_offset) for r in results}
        assert len(offsets) == 400


def test_broken_stream_fails_pending_retryably_and_client_reconnects(servers, tmp_path):
    server = servers("node-0")
    with Client(server.address, timeout=10) as c:
        c.create_topic("b", 1)
        stream = c.send_stream(server.address)
        futures = [stream.submit(encode_send("b", 0, [OutMessage(BODY)], None), 1, (None, False)) for _ in range(300)]
        server.kill()
        outcomes = []
        for f in futures:  # every request answered or failed: none left hanging
            try:
                outcomes.append(f.result(15)[0].status == pb.PUT_OK)
            except StoreError as e:
                assert e.code == grpc.StatusCode.UNAVAILABLE, e
                outcomes.append(False)
        assert False in outcomes  # some were pending at the kill: what the test is about
        assert stream.broken is not None and stream.broken.code == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(StoreError) as e:
            stream.submit(encode_send("b", 0, [OutMessage(BODY)], None), 1, (None, False))
        assert e.value.code == grpc.StatusCode.UNAVAILABLE
        server.start()
        r = wait_until(lambda: _try_send(c), timeout=30, what="a send after the restart")
        assert r.ok
        assert c.send_stream(server.address) is not stream  # a new stream
        # acked messages survived the kill; the last send's ack does not wait for its dispatch
        wait_until(
            lambda: sum(mx for _, mx in c.queue_offsets("b").values()) >= sum(outcomes) + 1, timeout=10, what="every ack in the queues"
        )


def _try_send(c: Client):
    try:
        return c.send("b", b"after", visible=True)
    except StoreError as e:
        if e.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return None
        raise


class HoldingServer:
    """A stand-in for another implementation of the protocol: answers SendStream requests only
    when told to (to see back-pressure), or implements only unary Send (an older server)."""

    def __init__(self, stream: bool):
        self.port = free_port()
        self.release = threading.Event()
        self.received = 0
        self.unary_calls = 0
        handlers = {
            "Send": grpc.unary_unary_rpc_method_handler(self._send),
            "GetRoute": grpc.unary_unary_rpc_method_handler(self._route),
        }
        if stream:
            handlers["SendStream"] = grpc.stream_stream_rpc_method_handler(self._stream)
        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(4))
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("msgstore.v1.MessageStore", handlers),))
        self.server.add_insecure_port(f"127.0.0.1:{self.port}")
        self.server.start()

    def _answer(self, req: pb.SendRequest) -> pb.SendResponse:
        return pb.SendResponse(request_id=req.request_id, node="holder", results=[pb.SendResult(status=pb.PUT_OK) for _ in req.entries])

    def _route(self, data, context):
        node = pb.NodeRoute(name="holder", address=f"127.0.0.1:{self.port}", ready=True, queue_ids=[0])
        return pb.GetRouteResponse(nodes=[node]).SerializeToString()

    def _send(self, data, context):
        self.unary_calls += 1
        return self._answer(pb.SendRequest.FromString(data)).SerializeToString()

    def _stream(self, requests, context):
        held: queue.SimpleQueue = queue.SimpleQueue()

        def read() -> None:
            try:
                for data in requests:
                    req = pb.SendRequest.FromString(data)
                    self.received += len(req.entries)
                    held.put(req)
            except grpc.RpcError:  # the client went away
                pass
            held.put(None)

        threading.Thread(target=read, daemon=True).start()
        while context.is_active():  # ends with the call: no handler thread outlives the test
            try:
                req = held.get(timeout=0.05)
            except queue.Empty:
                continue
            if req is None:
                return
            while not self.release.wait(0.05):
                if not context.is_active():
                    return
            yield self._answer(req).SerializeToString()

    def stop(self) -> None:
        self.server.stop(0)


def test_back_pressure_bounds_requests_in_flight():
    holder = HoldingServer(stream=True)
    ch = grpc.insecure_channel(f"127.0.0.1:{holder.port}")
    stream = SendStream(ch, "holder", max_in_flight=3)
    try:
        data = encode_send("t", 0, [OutMessage(b"x")], None)
        first = [stream.submit(data, 1) for _ in range(3)]
        wait_until(lambda: holder.received == 3, what="the first requests reach the server")
        blocked = threading.Thread(target=lambda: first.append(stream.submit(data, 1)))
        blocked.start()
        blocked.join(0.3)
        assert blocked.is_alive() and holder.received == 3  # a fourth request waits for room
        holder.release.set()
        blocked.join(10)
        assert not blocked.is_alive() and len(first) == 4
        assert all(f.result(10)[0].status == pb.PUT_OK for f in first)
    finally:
        stream.close()
        ch.close()
        holder.stop()


def test_an_async_send_past_its_timeout_fails_alone_and_its_late_answer_breaks_nothing():
    """AsyncSendStream awaits the answer's own future, failed by a timer at the timeout (no
    longer asyncio.wait_for over a shield): the caller gets DEADLINE_EXCEEDED; a cancelled
    caller just stops waiting; their answers, when they come, are skipped and the stream
    goes on."""
    holder = HoldingServer(stream=True)

    async def main() -> None:
        ch = grpc.aio.insecure_channel(f"127.0.0.1:{holder.port}")
        stream = AsyncSendStream(ch, "holder")
        try:
            data = encode_send("t", 0, [OutMessage(b"x")], None)
            with pytest.raises(StoreError) as late:
                await stream.send(data, 1, (), 0.3)
            assert late.value.code == grpc.StatusCode.DEADLINE_EXCEEDED and "within 0.3 s" in late.value.details
            gone = asyncio.ensure_future(stream.send(data, 1, (), 30))
            await asyncio.sleep(0.2)
            gone.cancel()
            with pytest.raises(asyncio.CancelledError):
                await gone
            holder.release.set()  # both answers now arrive, for callers that no longer wait
            results = await stream.send(data, 1, (), 10)
            assert [r.status for r in results] == [pb.PUT_OK] and stream.broken is None
            assert holder.received == 3
        finally:
            await stream.close()
            await ch.close()

    try:
        asyncio.run(main())
    finally:
        holder.stop()


def test_client_falls_back_to_unary_send_without_send_stream():
    holder = HoldingServer(stream=False)
    try:
        with Client(f"127.0.0.1:{holder.port}", timeout=5) as c:
            target = QueueRef("holder", f"127.0.0.1:{holder.port}", 0)
            results = c.send_batch("t", [OutMessage(b"a"), OutMessage(b"b")], queue=target)
            assert [r.status for r in results] == ["PUT_OK", "PUT_OK"]
            assert holder.unary_calls == 1 and c._unary_only == {target.address}
            c.send_batch("t", [OutMessage(b"c")], queue=target)
            assert holder.unary_calls == 2  # straight to unary from now on
    finally:
        holder.stop()


def test_batch_results_are_a_list_of_what_was_stored(server, client):
    """send_batch answers with results made as they are read (issue 30): each one names the
    message stored at its offset, slices and iteration agree, a list compares equal, and a
    batch that was refused in part reports every status without reading each result first."""
    client.create_topic("lazy", 2)
    q = client.route("lazy").queues[0]
    sent = [OutMessage(f"body-{i}".encode(), key=f"k{i}") for i in range(300)]
    results = client.send_batch("lazy", sent, queue=q, visible=True)
    assert len(results) == 300 and results.all_ok and results.statuses() == {"PUT_OK"}
    assert [r.queue_offset for r in results] == list(range(300))
    assert results[-1] is results[299] and results[-1].queue_offset == 299
    assert results[10:13] == [results[10], results[11], results[12]]
    assert results == list(results) and results != list(results)[:-1]
    assert len({r.message_id for r in results}) == 300
    with pytest.raises(IndexError):
        results[300]
    got = client.pull("lazy", q, 0, max_messages=300)
    stored = [(m.queue_offset, m.body, m.msg_id) for m in got.messages]
    assert stored == [(r.queue_offset, s.body, r.message_id) for r, s in zip(results, sent)]
    # one request, two queues' batches merged on the stream: each gets its own results
    stream = client.send_stream(server.address)
    a = stream.submit(encode_send("lazy", 0, sent[:3], None), 3)
    b = stream.submit(encode_send("lazy", 1, sent[:2], None), 2)
    assert [r.queue_id for r in a.result(10)] == [0, 0, 0] and [r.queue_id for r in b.result(10)] == [1, 1]


def test_a_status_grpc_aio_overwrote_after_a_failed_write_counts_as_the_connection_lost():
    """grpc/grpc#36066: a write on a stream that has ended reports INTERNAL "Internal error from
    Core" in place of the real status (UNAVAILABLE when the server died). The asyncio client
    must treat that as a lost connection (retried after a failover), not as a server's verdict."""
    from msgstore.client.errors import LOST_STATUS, error_from

    lost = grpc.aio.AioRpcError(grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata(), details=LOST_STATUS)
    assert error_from(lost, "g0").code == grpc.StatusCode.UNAVAILABLE
    real = grpc.aio.AioRpcError(grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata(), details="a handler failed")
    assert (error_from(real).code, error_from(real).details) == (grpc.StatusCode.INTERNAL, "a handler failed")


def test_a_lone_small_send_is_dispatched_on_the_loop_a_large_one_by_the_dispatcher(server, client):
    """After a stream send's answer, a small send whose bytes are the only ones not yet
    dispatched is dispatched on the event loop (Dispatcher.dispatch_here, store-format §6); a
    send over 16 KiB is left to the dispatcher's thread. Either way every message is read."""
    client.create_topic("inline", 1)
    q = client.route("inline").queues[0]
    on_loop = "msgstore_dispatched_on_loop_total"
    before = metric(server, on_loop)
    sent = 0
    # (the thread's 1 ms look takes one now and then; on a loaded machine once all of 20)
    while sent < 20 or (metric(server, on_loop) == before and sent < 200):
        assert client.send_batch("inline", [OutMessage(b"small %d" % sent)], queue=q).all_ok
        sent += 1
    # A large send first: the stream's task reads it only after the step that answered the
    # last small one has counted that one (the count comes after the answer is written)
    assert client.send_batch("inline", [OutMessage(b"L" * 20_000)], queue=q).all_ok
    small = metric(server, on_loop) - before
    assert 1 <= small <= sent
    assert client.send_batch("inline", [OutMessage(b"M" * 20_000)], queue=q).all_ok
    assert metric(server, on_loop) - before == small  # the large ones: the dispatcher's thread
    wait_until(lambda: client.queue_offsets("inline")[q][1] == sent + 2, timeout=10, what=f"{sent + 2} messages in the queue")
    got = client.pull("inline", q, 0, max_messages=300)
    assert [bytes(m.body) for m in got.messages] == [b"small %d" % i for i in range(sent)] + [b"L" * 20_000, b"M" * 20_000]
