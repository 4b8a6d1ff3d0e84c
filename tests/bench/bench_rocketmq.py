"""RocketMQ 5's official Python client against our own, on one node (issue 23).

- Producer: one message per call, synchronous (what ``Producer.send`` does), against our
  client's ``send`` of the same bodies; and the official ``send_async`` with a window of
  futures against our asyncio client sending the same window.
- SimpleConsumer: receive 32 + ack each, against our client's receive 32 + ack the batch.
The ratios say what the apache.rocketmq.v2 translation layer and the official client cost
together; the same messages, the same node, in one run.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer

from msgstore.client import AsyncClient, Client

from .bench_scale import Node
from .common import Measure

N = int(os.environ.get("BENCH_RMQ_MESSAGES", "5000"))
WINDOW = 64
BODY = b"z" * 100


def _message(topic: str) -> Message:
    m = Message()
    m.topic, m.body = topic, BODY
    return m


def official_sync(address: str, topic: str) -> float:
    producer = Producer(ClientConfiguration(address, Credentials()), (topic,))
    producer.startup()
    try:
        producer.send(_message(topic))  # (connection and route warmed)
        t = time.perf_counter()
        for _ in range(N):
            producer.send(_message(topic))
        return N / (time.perf_counter() - t)
    finally:
        producer.shutdown()


def official_async(address: str, topic: str) -> float:
    producer = Producer(ClientConfiguration(address, Credentials()), (topic,))
    producer.startup()
    try:
        producer.send(_message(topic))
        t = time.perf_counter()
        pending = []
        for _ in range(N):
            pending.append(producer.send_async(_message(topic)))
            if len(pending) >= WINDOW:
                pending.pop(0).result()
        for f in pending:
            f.result()
        return N / (time.perf_counter() - t)
    finally:
        producer.shutdown()


def ours_sync(address: str, topic: str) -> float:
    with Client(address, timeout=30) as c:
        c.send(topic, BODY)
        t = time.perf_counter()
        for _ in range(N):
            assert c.send(topic, BODY).ok
        return N / (time.perf_counter() - t)


def ours_async(address: str, topic: str) -> float:
    async def go() -> float:
        async with AsyncClient(address, timeout=30) as c:
            await c.send(topic, BODY)
            sem = asyncio.Semaphore(WINDOW)

            async def one() -> None:
                async with sem:
                    assert (await c.send(topic, BODY)).ok

            t = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(N)))
            return N / (time.perf_counter() - t)

    return asyncio.run(go())


def raw_stubs(address: str, topic: str) -> tuple[float, float]:
    """The same one-message send through bare stubs of both protocols: what the translation
    layer costs on the server, without either client."""
    import grpc
    from rocketmq.grpc_protocol import MessagingServiceStub, definition_pb2, service_pb2

    from msgstore.v1 import msgstore_pb2, msgstore_pb2_grpc

    m = definition_pb2.Message(topic=definition_pb2.Resource(name=topic), body=BODY)
    m.system_properties.message_id = "0102FC0000000147B90B193C1300000000"
    m.system_properties.message_type = definition_pb2.NORMAL
    v2_req = service_pb2.SendMessageRequest(messages=[m])
    v1_req = msgstore_pb2.SendRequest(entries=[msgstore_pb2.SendEntry(topic=topic, body=BODY, uniq_key=m.system_properties.message_id)])
    rates = []
    with grpc.insecure_channel(address) as ch:
        v2, v1 = MessagingServiceStub(ch), msgstore_pb2_grpc.MessageStoreStub(ch)
        for call in (lambda: v2.SendMessage(v2_req, timeout=30), lambda: v1.Send(v1_req, timeout=30)):
            call()
            t = time.perf_counter()
            for _ in range(N):
                call()
            rates.append(N / (time.perf_counter() - t))
    return rates[0], rates[1]


def official_receive(address: str, topic: str) -> float:
    consumer = SimpleConsumer(ClientConfiguration(address, Credentials()), "official", {topic: FilterExpression()}, 1)
    consumer.startup()
    try:
        t, done = time.perf_counter(), 0
        while done < N:
            got = consumer.receive(32, 60)
            assert got, "receive ran dry"
            for m in got:
                consumer.ack(m)
            done += len(got)
        return done / (time.perf_counter() - t)
    finally:
        consumer.shutdown()


def ours_receive(address: str, topic: str) -> float:
    with Client(address, timeout=30) as c:
        t, done = time.perf_counter(), 0
        while done < N:
            got = c.receive("ours", topic, 32, invisible=60)
            assert got, "receive ran dry"
            assert not any(c.ack("ours", topic, got))
            done += len(got)
        return done / (time.perf_counter() - t)


def run(workdir: str) -> list[Measure]:
    node = Node(os.path.join(workdir, "rocketmq"))
    node.start()
    try:
        a = node.address
        with Client(a, timeout=30) as c:
            for t in ("s1", "s2", "a1", "a2"):
                c.create_topic(t, 8)
        theirs, mine = official_sync(a, "s1"), ours_sync(a, "s2")
        theirs_async, mine_async = official_async(a, "a1"), ours_async(a, "a2")
        raw_v2, raw_v1 = raw_stubs(a, "a2")
        # both groups receive the N messages of s1 (and the warm-up one)
        received_theirs, received_mine = official_receive(a, "s1"), ours_receive(a, "s1")
    finally:
        node.stop(signal.SIGTERM)
    out = [
        Measure("rocketmq: official Producer.send, one at a time", "msg/s", [theirs], extra={"ratio_to_ours": theirs / mine}),
        Measure("rocketmq: our Client.send, one at a time", "msg/s", [mine]),
        Measure(
            f"rocketmq: official send_async, {WINDOW} in flight",
            "msg/s",
            [theirs_async],
            extra={"ratio_to_ours": theirs_async / mine_async},
        ),
        Measure(f"rocketmq: our AsyncClient.send, {WINDOW} in flight", "msg/s", [mine_async]),
        Measure("rocketmq: bare v2 stub SendMessage, one at a time", "msg/s", [raw_v2], extra={"ratio_to_ours": raw_v2 / raw_v1}),
        Measure("rocketmq: bare v1 stub Send, one at a time", "msg/s", [raw_v1]),
        Measure(
            "rocketmq: official SimpleConsumer receive 32 + ack each",
            "msg/s",
            [received_theirs],
            extra={"ratio_to_ours": received_theirs / received_mine},
        ),
        Measure("rocketmq: our receive 32 + ack the batch", "msg/s", [received_mine]),
    ]
    for m in out:
        print(m.line(), f"ratio {m.extra['ratio_to_ours']:.2f}x ours" if "ratio_to_ours" in m.extra else "", flush=True)
    return out
