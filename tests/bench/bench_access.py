"""The price of one hop (issue 31): sends through an access point that owns the queue vs one
that forwards them to the node that does.

Two nodes, each its own replica group, both ``--access-point``. The same client work (batched:
500 x 1 KiB per request, three streams; single: one message per send) goes to node B's queues
either through B itself (served where it lands) or through A (passed on, as bytes, to B),
alternately, so both see the same machine state. Goal: forwarded ≥ 0.8x direct, batched.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from msgstore.client import Client, OutMessage
from tests.support.servers import ServerProcess, free_port

from .common import REPEAT, Measure

BODY = os.urandom(1024)
BATCH = 500
STREAMS = 3
BATCHED_TOTAL = 90_000
SINGLES = 3_000


def _pair(workdir: str) -> list[ServerProcess]:
    ports = [free_port(), free_port()]
    nodes = []
    for i, port in enumerate(ports):
        root = tempfile.mkdtemp(dir=workdir)
        other = ports[1 - i]
        node = ServerProcess(os.path.join(root, "data"), port=port, name=f"n{i}", args=["--peers", f"127.0.0.1:{other}", "--access-point"])
        node.settings = []  # the store's defaults, not the test harness's small files
        nodes.append(node)
    for n in nodes:
        n.start(wait=False)
    for n in nodes:
        n.wait_serving()
    return nodes


def _queues_of(client: Client, topic: str, owner: str):
    return [q for q in client.route(topic, refresh=True).queues if q.node == owner]


def batched(client: Client, topic: str, owner: str) -> float:
    import threading

    queues = _queues_of(client, topic, owner)
    msgs = [OutMessage(BODY) for _ in range(BATCH)]
    per = BATCHED_TOTAL // STREAMS // BATCH
    failures: list[str] = []

    def work(k: int) -> None:
        for i in range(per):
            r = client.send_batch(topic, msgs, queue=queues[(k + i) % len(queues)])
            if not r.all_ok:
                failures.append(str(r.statuses()))
                return

    threads = [threading.Thread(target=work, args=(k,)) for k in range(STREAMS)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if failures:
        raise RuntimeError(failures[0])
    return per * STREAMS * BATCH / (time.perf_counter() - t)


def singles(client: Client, topic: str, owner: str) -> float:
    queues = _queues_of(client, topic, owner)
    t = time.perf_counter()
    for i in range(SINGLES):
        r = client.send_batch(topic, [OutMessage(BODY)], queue=queues[i % len(queues)])
        assert r.all_ok
    return SINGLES / (time.perf_counter() - t)


def run(workdir: str) -> list[Measure]:
    a, b = _pair(workdir)
    rates: dict[str, list[float]] = {"batched-direct": [], "batched-forwarded": [], "single-direct": [], "single-forwarded": []}
    try:
        via_b = Client(b.address, timeout=60)  # B owns the queues: served where it lands
        via_a = Client(a.address, timeout=60)  # A does not: every call passed on to B
        for c in (via_a, via_b):
            c.create_topic("hop", 8)
        for r in range(REPEAT):
            order = [("direct", via_b), ("forwarded", via_a)]
            for name, client in order if r % 2 == 0 else order[::-1]:
                rates[f"batched-{name}"].append(batched(client, "hop", "n1"))
                rates[f"single-{name}"].append(singles(client, "hop", "n1"))
        via_a.close()
        via_b.close()
    finally:
        for n in (a, b):
            n.terminate()
            shutil.rmtree(os.path.dirname(n.data_dir), ignore_errors=True)
    ratio_b = [f / d for f, d in zip(rates["batched-forwarded"], rates["batched-direct"])]
    ratio_s = [f / d for f, d in zip(rates["single-forwarded"], rates["single-direct"])]
    return [
        Measure("batched send (500 x 1 KiB, 3 streams), owning node", "msg/s", rates["batched-direct"]),
        Measure("batched send, through a node that forwards (one hop)", "msg/s", rates["batched-forwarded"]),
        Measure("forwarded / direct, batched", "ratio", ratio_b, "goal ≥ 0.8"),
        Measure("single sends (1 KiB, one at a time), owning node", "msg/s", rates["single-direct"]),
        Measure("single sends, through a node that forwards", "msg/s", rates["single-forwarded"]),
        Measure("forwarded / direct, single", "ratio", ratio_s),
    ]
