"""What the web console costs the store, and how fast it finds a message (issue 34).

- cost: batched sends (3 streams of 500 x 1 KiB) with the console closed, and with it open the
  way a person leaves it: a browser's worth of requests (the consumer-group page every 5 s, its
  lag plot's data every 2 s, the cluster page every 10 s), 6 rounds each in the order closed,
  open, open, closed, ... in one run; the ratio of the medians; goal >= 0.95x. On this machine
  the console, the store and the senders share 2 cores;
- search: a search by key among 1,000,000 messages with distinct keys, through the console's
  page (HTTP, as the browser asks), p50/p99 over 50 random keys; goal <= 1 s.

BENCH_SCALE shrinks both (0.1: 100,000 messages).
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from msgstore.client import Client, OutMessage
from tests.support.servers import ROOT, free_port, wait_until

from .bench_grpc import batched_send, start_server
from .common import Measure

SCALE = float(os.environ.get("BENCH_SCALE", "1"))
ROUNDS = 6
SEARCH_MESSAGES = int(1_000_000 * SCALE)


class Console:
    def __init__(self, server: str, workdir: str):
        self.port = free_port()
        self.log = open(os.path.join(workdir, "console.log"), "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "msgstore.cli", "console", "--server", server, "--port", str(self.port), "--sample-interval", "5"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server")),
        )
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        wait_until(lambda: self.get("/healthz") == "ok", 30, what="the console")

    def get(self, path: str) -> str:
        try:
            with self.opener.open(f"http://127.0.0.1:{self.port}{path}", timeout=30) as r:
                return r.read().decode()
        except OSError:
            return ""

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self.log.close()


def _browse(console: Console, stop: threading.Event) -> None:
    """A person with the console open on a group page: what its browser asks for."""
    t0 = time.monotonic()
    last = {"page": -1e9, "plot": -1e9, "cluster": -1e9}
    while not stop.is_set():
        now = time.monotonic() - t0
        if now - last["page"] >= 5:
            console.get("/groups/bench-group")
            last["page"] = now
        if now - last["plot"] >= 2:
            console.get("/api/series?name=lag:bench-group")
            last["plot"] = now
        if now - last["cluster"] >= 10:
            console.get("/")
            last["cluster"] = now
        stop.wait(0.2)


def run(workdir: str) -> list[Measure]:
    out: list[Measure] = []
    node = start_server(workdir)
    console = None
    try:
        with Client(node.address, timeout=30) as c:
            c.create_topic("bench", 8)
            c.commit("bench-group", "bench", c.route("bench").queues[0], 0)
            batched_send(c, "bench", 3, total=30_000)  # warm-up
            console = Console(node.address, tempfile.mkdtemp(dir=workdir))
            closed, opened = [], []
            # closed, open, open, closed, ...: a drift over the run (the page cache filling) weighs on both alike
            order = [False, True, True, False] * ((ROUNDS + 1) // 2)
            for with_console in order[: 2 * ROUNDS]:
                stop = threading.Event()
                browser = threading.Thread(target=_browse, args=(console, stop), daemon=True) if with_console else None
                if browser:
                    browser.start()
                rate, _ = batched_send(c, "bench", 3, total=int(600_000 * max(SCALE, 0.1)))
                stop.set()
                if browser:
                    browser.join(30)
                (opened if with_console else closed).append(rate)
                print(f"  batched sends, console {'open' if with_console else 'closed'}: {rate:,.0f} msg/s", flush=True)
            out.append(Measure("console cost: batched sends, console closed", "msg/s", closed))
            out.append(Measure("console cost: batched sends, console open and refreshing", "msg/s", opened))
            ratio = statistics.median(opened) / statistics.median(closed)
            out.append(Measure("console cost: open / closed (medians)", "x", [ratio], target=">= 0.95"))

            # search by key among SEARCH_MESSAGES messages, each with its own key
            c.create_topic("search", 8)
            batch = 500
            t = time.perf_counter()
            for start in range(0, SEARCH_MESSAGES, batch):
                msgs = [OutMessage(b"m%d" % k, key=f"key-{k}") for k in range(start, min(start + batch, SEARCH_MESSAGES))]
                assert c.send_batch("search", msgs).all_ok
            print(f"  {SEARCH_MESSAGES:,} keyed messages stored in {time.perf_counter() - t:.1f} s", flush=True)
            wait_until(lambda: c.query("search", f"key-{SEARCH_MESSAGES - 1}"), 120, what="the last key indexed")
        times = []
        rng = random.Random(7)
        for _ in range(50):
            k = rng.randrange(SEARCH_MESSAGES)
            t = time.perf_counter()
            page = console.get(f"/messages?mode=key&topic=search&key=key-{k}")
            times.append(time.perf_counter() - t)
            assert 'id="result-count">1 message' in page, page[:2000]
        times.sort()
        p50, p99 = statistics.median(times), times[min(len(times) - 1, int(0.99 * len(times)))]
        out.append(Measure(f"console search by key among {SEARCH_MESSAGES:,} messages, p50", "ms", [p50 * 1000]))
        out.append(Measure(f"console search by key among {SEARCH_MESSAGES:,} messages, p99", "ms", [p99 * 1000], target="<= 1000"))
        print(f"  search by key: p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms", flush=True)
    finally:
        if console is not None:
            console.stop()
        node.kill()
    return out
