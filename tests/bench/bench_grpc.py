"""The server over gRPC, client and server on this machine.

Targets (issue 3): batched send of 1 KiB messages ≥ 100k msg/s with async flush; the
auto-batching producer ≥ 20k msg/s from a loop of single send() calls; pull ≥ 150k msg/s.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable

from msgstore.client import Client, Consumer, OutMessage, Producer
from tests.support.servers import ServerProcess

from .common import Measure

BODY = os.urandom(1024)


def start_server(workdir: str, settings: list[str] | None = None) -> ServerProcess:
    root = tempfile.mkdtemp(dir=workdir)
    proc = ServerProcess(os.path.join(root, "data"), name="bench")
    proc.settings = list(settings or [])  # the store's defaults, not the test harness's small files
    return proc.start()


def batched_send(
    client: Client, topic: str, streams: int, total: int = 150_000, batch: int = 500, body: bytes = BODY, tags: str | None = "t"
) -> tuple[float, int]:
    """(msg/s, messages sent): ``streams`` threads sending batches round the topic's queues."""
    queues = client.route(topic).queues
    batch = min(batch, max(1, total // streams))
    msgs = [OutMessage(body, tags=tags) for _ in range(batch)]
    per = max(1, total // streams // batch)

    def send(k: int, i: int) -> str | None:
        r = client.send_batch(topic, msgs, queue=queues[(k * 3 + i) % len(queues)])
        return None if r[-1].ok else r[-1].status

    dt = timed_batches(streams, per, send, f"batched send to {topic}")
    return per * streams * batch / dt, per * streams * batch


def timed_batches(streams: int, per: int, send: Callable[[int, int], str | None], what: str) -> float:
    """Seconds for ``streams`` threads each calling ``send(thread, i)`` ``per`` times. A send
    that returns a status ends its thread; any failure raises RuntimeError naming ``what``
    (a thread's exception would otherwise vanish, and the rate look fine)."""
    failures: list[str] = []

    def work(k: int) -> None:
        try:
            for i in range(per):
                status = send(k, i)
                if status is not None:
                    failures.append(status)
                    return
        except Exception as e:
            failures.append(repr(e))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(streams)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    dt = time.perf_counter() - t
    if failures:
        raise RuntimeError(f"{what} failed: {failures[:3]}")
    return dt


def producer_singles(client: Client, topic: str, total: int = 100_000, body: bytes = BODY) -> float:
    with Producer(client, linger_ms=5) as p:
        t = time.perf_counter()
        futures = [p.send(topic, body) for _ in range(total)]
        p.flush()
        assert futures[-1].result(30).ok
        return total / (time.perf_counter() - t)


def consume_all(client: Client, topic: str, expected: int, stall_s: float = 2.0) -> float:
    consumer = Consumer(client, None, topic, max_messages=1024)
    n = 0
    t = time.perf_counter()
    while n < expected:
        got = consumer.poll(timeout=stall_s)
        assert got, f"stalled at {n}"
        n += len(got)
    return n / (time.perf_counter() - t)


def run(workdir: str) -> list[Measure]:
    server = start_server(workdir)
    try:
        client = Client(server.address, timeout=30)
        one = [batched_send(client, f"s1-{i}", 1)[0] for i in range(3)]
        three = [batched_send(client, f"s3-{i}", 3)[0] for i in range(3)]
        prod = [producer_singles(client, f"p-{i}") for i in range(3)]
        time.sleep(1)  # let the dispatcher finish before reading back
        pull = [consume_all(client, f"s3-{i}", 150_000) for i in range(3)]
    finally:
        server.terminate()
        shutil.rmtree(os.path.dirname(server.data_dir), ignore_errors=True)
    return [
        Measure("gRPC batched send, 1 KiB x 500, one stream", "msg/s", one, "target ≥ 100k"),
        Measure("gRPC batched send, 1 KiB x 500, three streams", "msg/s", three, "target ≥ 100k"),
        Measure("auto-batching producer, loop of single send()", "msg/s", prod, "target ≥ 20k"),
        Measure("pull (consumer, raw records decoded in the client)", "msg/s", pull, "target ≥ 150k"),
    ]
