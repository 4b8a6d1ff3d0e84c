"""Latency at a fixed offered load (issue 30): send-to-ack and produce-to-consume, p50/p99/p99.9,
1 KiB messages offered at 5,000 and 50,000 msg/s for 10 s (``BENCH_SCALE`` shortens it), beside
Redis Streams (XADD, XREAD BLOCK) and NATS JetStream (publish with ack, a push consumer) on the
same machine in the same run, and RocketMQ's official Python producer against msgstore. A
floor row sends the same requests on the client's send stream to a gRPC server that stores
nothing (echo_stream.py): what of msgstore's send-to-ack is the Python gRPC round trip itself.

The producer is open-loop: every millisecond it offers the messages due by then, each stamped
with the time it *should* have been sent, and latencies are measured from that time, so a
producer that falls behind shows it (no coordinated omission). Messages go out in one batch per
tick where the client can batch (msgstore's AsyncClient.send_batch, a Redis pipeline, JetStream's
async publishes), one call each where it cannot (the official producer's send_async, a window of
64 in flight). The consumer runs in a process of its own and stamps each message on arrival
(one machine, one clock). A system that cannot keep up with the offered rate is reported so,
with what it reached. Each system runs BENCH_LATENCY_ROUNDS times (3) per rate, the systems in
rotating order, and a row's figures are the medians of its rounds. Results: results/latency.json
(the rounds' figures in latency_detail.json) and latency.png.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import statistics
import struct
import time

import grpc

from msgstore.client import AsyncClient, Client, OutMessage
from msgstore.client.client import encode_send
from msgstore.client.stream import AsyncSendStream
from tests.support.servers import ServerProcess

from . import peers
from .common import RESULTS, Measure

SCALE = float(os.environ.get("BENCH_SCALE", "1"))
DURATION_S = max(2.0, 10.0 * SCALE)
RATES = (5_000, 50_000)
ROUNDS = int(os.environ.get("BENCH_LATENCY_ROUNDS", "3"))
TICK_S = 0.001
BACKLOG_S = 2.0  # unacknowledged messages, in seconds of offered load, at which a system has fallen behind
GRACE_S = 10.0  # beyond DURATION_S, to offer what is left, then again to answer
BODY = 1024
ECHO = "floor: gRPC echo, no store (AsyncSendStream)"
STAMP = struct.Struct(">d")  # the intended send time, time.time()


def body_at(t: float) -> bytes:
    return STAMP.pack(t) + b"x" * (BODY - STAMP.size)


def sent_at(body: bytes) -> float:
    return STAMP.unpack_from(body, 0)[0]


def percentiles(values: list[float]) -> dict[str, float]:
    """p50/p99/p99.9 in ms (nearest rank)."""
    if not values:
        return {"p50": float("nan"), "p99": float("nan"), "p99.9": float("nan"), "n": 0}
    v = sorted(values)

    def at(q: float) -> float:
        return v[min(len(v) - 1, int(q * len(v)))] * 1000

    return {"p50": at(0.50), "p99": at(0.99), "p99.9": at(0.999), "n": len(v)}


async def open_loop(rate: int, send_tick) -> tuple[list[float], float]:
    """Offer ``rate`` msg/s for DURATION_S: ``send_tick(times)`` is awaited as a task per tick
    (not before the next tick: open loop) and returns the ack times of its messages. A system
    that falls far behind is given GRACE_S more to offer and then to answer; what it has not
    acknowledged by then is left out, and its reached rate says so; one with more than
    BACKLOG_S of offered messages unacknowledged is offered no more (JetStream's Python client at
    50,000/s otherwise held 3 GiB of pending publishes and ran for many minutes)."""
    start = time.time() + 0.2
    total = int(rate * DURATION_S)
    offered = 0
    # only the ticks still waiting are held: keeping every finished task (10,000 at 5,000/s) grew
    # the producer's heap until a full garbage collection paused it for 20-35 ms mid-run, a
    # stall of the measuring process that every system's p99 then showed
    tasks: set[asyncio.Task] = set()
    latencies: list[float] = []
    k = 0
    while offered < total and time.time() < start + DURATION_S + GRACE_S:
        if offered - len(latencies) > rate * BACKLOG_S:  # fallen behind: offering more only buries its client
            break
        tick = start + k * TICK_S
        delay = tick - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        due = min(total, int((tick - start + TICK_S) * rate)) - offered
        if due > 0:
            times = [start + (offered + i) / rate for i in range(due)]
            offered += due
            task = asyncio.ensure_future(_measured(send_tick, times, latencies))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        k += 1
    left = start + DURATION_S + 2 * GRACE_S - time.time()
    pending: set[asyncio.Task] = set()
    if tasks:
        _done, pending = await asyncio.wait(set(tasks), timeout=max(0.1, left))
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    reached = len(latencies) / max(1e-9, (time.time() - start))
    return latencies, reached


async def _measured(send_tick, times: list[float], out: list[float]) -> None:
    acked = await send_tick(times)
    out.extend(a - t for a, t in zip(acked, times))


# ---------------------------------------------------------------------- consumers (own processes)


def _msgstore_consumer(address: str, topic: str, total: int, q: mp.Queue, ready) -> None:
    """The documented consumer (``Consumer.poll``: what is there, else a long poll of every
    queue at once). Subscribing to each of the 8 queues instead cost the store a pull per message
    at this rate (each arrival woke its queue's stream for one message): at 5,000/s sends then
    waited 360 ms (p50) for a CPU the pulls held."""
    from msgstore.client import Consumer

    lat: list[float] = []
    with Client(address, timeout=30) as c:
        consumer = Consumer(c, None, topic, max_messages=1024)
        consumer.poll(timeout=0.1)  # positions and connections set up before the producer starts
        ready.set()
        deadline = time.time() + DURATION_S + 30
        while len(lat) < total and time.time() < deadline:
            got = consumer.poll(timeout=0.5)
            now = time.time()
            lat.extend(now - sent_at(bytes(m.body)) for m in got if len(m.body) == BODY)
    q.put(lat)


def _redis_consumer(port: int, key: str, total: int, q: mp.Queue, ready) -> None:
    import redis

    r = redis.Redis(host="127.0.0.1", port=port)  # (localhost may be ::1, where it does not listen)
    r.ping()
    ready.set()
    lat: list[float] = []
    last = "0-0"
    deadline = time.time() + DURATION_S + 30
    while len(lat) < total and time.time() < deadline:
        got = r.xread({key: last}, count=1000, block=100)
        now = time.time()
        for _stream, entries in got or ():
            for entry_id, fields in entries:
                lat.append(now - sent_at(fields[b"b"]))
                last = entry_id
    q.put(lat)


def _nats_consumer(port: int, subject: str, total: int, q: mp.Queue, ready) -> None:
    import nats

    async def main() -> list[float]:
        nc = await nats.connect(f"nats://127.0.0.1:{port}")
        js = nc.jetstream()
        lat: list[float] = []
        done = asyncio.Event()

        async def on(msg) -> None:
            lat.append(time.time() - sent_at(msg.data))
            if len(lat) >= total:
                done.set()

        await js.subscribe(subject, cb=on, manual_ack=False, ordered_consumer=True)
        ready.set()
        try:
            await asyncio.wait_for(done.wait(), DURATION_S + 30)
        except TimeoutError:
            pass
        await nc.close()
        return lat

    q.put(asyncio.run(main()))


def _with_consumer(target, args: tuple, producer) -> tuple[list[float], list[float], float]:
    """Run the consumer process, then the producer coroutine; (send-to-ack, produce-to-consume, reached rate)."""
    ctx = mp.get_context("spawn")
    q: mp.Queue = ctx.Queue()
    ready = ctx.Event()
    proc = ctx.Process(target=target, args=(*args, q, ready))
    proc.start()
    if not ready.wait(60):  # its start-up (a new interpreter, imports) is not measured
        raise RuntimeError(f"the consumer {target.__name__} did not start")
    acks, reached = asyncio.run(producer())
    consumed = q.get(timeout=DURATION_S + 60)
    proc.join(30)
    return acks, consumed, reached


# ---------------------------------------------------------------------- producers


def msgstore_run(address: str, rate: int, topic: str) -> tuple[list[float], list[float], float]:
    with Client(address, timeout=30) as c:
        c.create_topic(topic, 8)

    async def produce() -> tuple[list[float], float]:
        async with AsyncClient(address, timeout=30) as c:
            await c.send(topic, b"warm")  # (not counted: not a stamped body)

            async def tick(times: list[float]) -> list[float]:
                msgs = [OutMessage(body_at(t)) for t in times]
                results = await c.send_batch(topic, msgs)
                now = time.time()
                assert results.all_ok, results.statuses()
                return [now] * len(times)

            return await open_loop(rate, tick)

    total = int(rate * DURATION_S)  # the consumer counts stamped bodies only (not the warm-up)
    return _with_consumer(_msgstore_consumer, (address, topic, total), produce)


def echo_run(port: int, rate: int) -> tuple[list[float], list[float], float]:
    """The floor under msgstore's send-to-ack row: the same requests on the client's own send
    stream (AsyncSendStream, as AsyncClient uses it) to a gRPC server that stores nothing and
    answers each at once (echo_stream.py). What the Python gRPC round trip alone costs at this
    rate on this machine; no consumer (produce-to-consume is not measured)."""

    async def produce() -> tuple[list[float], float]:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        stream = AsyncSendStream(channel, "echo")
        try:
            await stream.send(encode_send("echo", 0, [OutMessage(b"warm")], None), 0, (), 30)

            async def tick(times: list[float]) -> list[float]:
                await stream.send(encode_send("echo", 0, [OutMessage(body_at(t)) for t in times], None), 0, (), 30)
                now = time.time()
                return [now] * len(times)

            return await open_loop(rate, tick)
        finally:
            await channel.close()

    acks, reached = asyncio.run(produce())
    return acks, [], reached


def official_run(address: str, rate: int, topic: str) -> tuple[list[float], list[float], float]:
    """RocketMQ's official producer: one send_async per message, 64 in flight at most."""
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    with Client(address, timeout=30) as c:
        c.create_topic(topic, 8)
    producer = Producer(ClientConfiguration(address, Credentials()), (topic,))
    producer.startup()

    def message(t: float) -> Message:
        m = Message()
        m.topic = topic
        m.body = body_at(t)
        return m

    async def produce() -> tuple[list[float], float]:
        loop = asyncio.get_running_loop()
        window = asyncio.Semaphore(64)

        async def one(t: float) -> float:
            async with window:
                fut = producer.send_async(message(t))
                await asyncio.wrap_future(fut, loop=loop)
                return time.time()

        async def tick(times: list[float]) -> list[float]:
            return list(await asyncio.gather(*(one(t) for t in times)))

        return await open_loop(rate, tick)

    try:
        total = int(rate * DURATION_S)
        return _with_consumer(_msgstore_consumer, (address, topic, total), produce)
    finally:
        producer.shutdown()


def redis_run(port: int, rate: int, key: str) -> tuple[list[float], list[float], float]:
    import redis.asyncio as aredis

    async def produce() -> tuple[list[float], float]:
        # one connection per tick in flight (a pipeline holds its connection until answered)
        r = aredis.Redis(connection_pool=aredis.BlockingConnectionPool(host="127.0.0.1", port=port, max_connections=64, timeout=None))

        async def tick(times: list[float]) -> list[float]:
            async with r.pipeline(transaction=False) as p:
                for t in times:
                    p.xadd(key, {"b": body_at(t)})
                await p.execute()
            now = time.time()
            return [now] * len(times)

        try:
            return await open_loop(rate, tick)
        finally:
            await r.aclose()

    total = int(rate * DURATION_S)
    return _with_consumer(_redis_consumer, (port, key, total), produce)


def nats_run(port: int, rate: int, subject: str) -> tuple[list[float], list[float], float]:
    import nats

    async def setup() -> None:
        nc = await nats.connect(f"nats://127.0.0.1:{port}")
        await nc.jetstream().add_stream(name=subject.upper(), subjects=[subject])
        await nc.close()

    asyncio.run(setup())

    async def produce() -> tuple[list[float], float]:
        nc = await nats.connect(f"nats://127.0.0.1:{port}")
        js = nc.jetstream()

        window = asyncio.Semaphore(1024)  # publishes in flight (unbounded, 50,000/s buried the client in its own queue)

        async def one(t: float) -> float:
            async with window:
                assert (await js.publish(subject, body_at(t))).seq
                return time.time()

        async def tick(times: list[float]) -> list[float]:
            return list(await asyncio.gather(*(one(t) for t in times)))

        try:
            return await open_loop(rate, tick)
        finally:
            await nc.close()

    total = int(rate * DURATION_S)
    return _with_consumer(_nats_consumer, (port, subject, total), produce)


# ---------------------------------------------------------------------- the suite


def run(workdir: str) -> list[Measure]:
    """Each system ROUNDS times per rate, in rotating order (a round's neighbours on this VM
    differ: single runs' p99s swung 3-10x), each round on a topic, key or stream of its own;
    a row's figures are the medians over its rounds (the report shows their range)."""
    peers.ensure_installed()
    out: list[Measure] = []
    rows: dict[str, dict] = {}
    behind: dict[str, int] = {}
    node = ServerProcess(os.path.join(workdir, "msgstore"), name="latency")
    node.settings = []
    node.start()
    try:
        with peers.redis_server(workdir) as rd, peers.nats_server(workdir) as ns, peers.echo_stream() as echo:
            for rate in RATES:
                systems = {
                    "msgstore (AsyncClient)": lambda r, k: msgstore_run(node.address, r, f"lat-{r}-{k}"),
                    "msgstore (official RocketMQ producer)": lambda r, k: official_run(node.address, r, f"latrmq-{r}-{k}"),
                    "Redis Streams": lambda r, k: redis_run(rd.port, r, f"lat-{r}-{k}"),
                    "NATS JetStream": lambda r, k: nats_run(ns.port, r, f"lat{r}r{k}"),
                    ECHO: lambda r, k: echo_run(echo.port, r),
                }
                rounds: dict[str, list[tuple[dict, dict, float]]] = {}
                for k in range(ROUNDS):
                    names = list(systems)
                    for name in names[k % len(names) :] + names[: k % len(names)]:
                        if name in behind:  # it fell behind at a lower rate: this one would only queue longer
                            continue
                        acks, consumed, reached = systems[name](rate, k)
                        a, p = percentiles(acks), percentiles(consumed)
                        rounds.setdefault(name, []).append((a, p, reached))
                        print(f"  {name} @ {rate}/s, round {k + 1}: ack {a}, consume {p}, reached {reached:,.0f}/s", flush=True)
                        if reached < rate * 0.95 and rate == RATES[0]:
                            behind[name] = rate  # (not run again: a round of it takes minutes)
                for name in systems:
                    if name not in rounds:
                        print(f"  {name} @ {rate}/s: not run (fell behind at {behind[name]:,}/s)", flush=True)
                        continue
                    got = rounds[name]
                    reached = statistics.median(r for _a, _p, r in got)
                    kept = reached >= rate * 0.95
                    row: dict = {"reached": reached, "kept_up": kept, "rounds": len(got)}
                    note = "" if kept else f"could not keep up: reached {reached:,.0f}/s"
                    for kind, i in (("send-to-ack", 0), ("produce-to-consume", 1)):
                        if name == ECHO and i == 1:  # (no consumer)
                            continue
                        key = kind.replace("-", "_")
                        row[key] = {q: statistics.median(g[i][q] for g in got) for q in ("p50", "p99", "p99.9")}
                        row[key + "_by_round"] = [g[i] for g in got]
                        for q in ("p50", "p99", "p99.9"):
                            out.append(Measure(f"latency {rate}/s {kind} {q}: {name}", "ms", [g[i][q] for g in got], notes=note))
                    rows[f"{name} @ {rate}/s"] = row
    finally:
        node.kill()
    with open(os.path.join(RESULTS, "latency_detail.json"), "w") as f:
        json.dump(rows, f, indent=1)
    _plot(rows)
    return out


def _plot(rows: dict[str, dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(rows)
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.45 * len(names) + 2), sharey=True)
    for ax, kind in zip(axes, ("send_to_ack", "produce_to_consume")):
        y = range(len(names))
        for i, (q, color) in enumerate((("p50", "#4c72b0"), ("p99", "#dd8452"), ("p99.9", "#c44e52"))):
            widths = [rows[n][kind][q] if kind in rows[n] else float("nan") for n in names]
            ax.barh([k + i * 0.27 for k in y], widths, height=0.27, color=color, label=q)
        ax.set_xscale("log")
        ax.set_title(kind.replace("_", " ") + " (ms, log scale)")
        ax.set_yticks([k + 0.27 for k in y])
        ax.set_yticklabels([n + ("" if rows[n]["kept_up"] else " (fell behind)") for n in names], fontsize=8)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, "latency.png"), dpi=110)
