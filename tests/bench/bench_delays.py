"""Delayed delivery (issue 22): one node as a user runs it (``msgstore serve``, defaults).

- 10,000 timer messages due in the same second: from that second until the last is visible
  on its topic (target ≤ 1 s), and how late each was stored on it (its store time minus the
  ``TIMER_OUT_MS`` it was due at).
- A million timer messages due in an hour, held: the node's resident memory (not counting
  page cache: RssAnon) beyond what it used before they were sent (target ≤ 256 MiB).
- One consumer receiving and acknowledging (32 at a time) against the same consumer pulling
  and committing the same messages (target: ≥ 0.5x).
- Reading a queue through a SQL92 selector against the same read through a tag filter, half of
  the messages matching (issue 33; target ≥ 0.5x).
- Timer sends (one message a call) beside a backlog of delay-level messages against the same
  sends with none pending (issue 33: 30,000 pending made them 11x slower; target ≥ 0.8x).
"""

from __future__ import annotations

import os
import signal
import statistics
import time

from msgstore.client import Client, OutMessage
from msgstore.client.routing import QueueRef

from .bench_scale import Node
from .common import Measure

DUE_TOGETHER = int(os.environ.get("BENCH_DELAYS_TOGETHER", "10000"))
HELD = int(os.environ.get("BENCH_DELAYS_HELD", "1000000"))
BATCH = 500
POP_MESSAGES = int(os.environ.get("BENCH_POP_MESSAGES", "20000"))
LEVEL_BACKLOG = int(os.environ.get("BENCH_DELAYS_BACKLOG", "30000"))
TIMER_SENDS = 1000


def rss_anon_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return 0.0


def held_on(c: Client, topic: str) -> int:
    return sum(hi for _lo, hi in c.queue_offsets(topic).values())


def send_timers(c: Client, topic: str, node: str, address: str, count: int, due_ms: int) -> None:
    msg = OutMessage(b"x" * 100, properties={"TIMER_DELIVER_MS": str(due_ms)})
    for start in range(0, count, BATCH):
        n = min(BATCH, count - start)
        res = c.send_batch(topic, [msg] * n, queue=QueueRef(node, address, start // BATCH % 8))
        assert all(r.ok for r in res), res[0]


def due_together(address: str) -> list[Measure]:
    with Client(address, timeout=60) as c:
        c.create_topic("due", 8)
        node = c.route("due", refresh=True).nodes[0].name
        t0 = time.time()
        send_timers(c, "due", node, address, DUE_TOGETHER, 0)  # (a time in the past: ordinary messages; warms the path)
        sending = time.time() - t0
        due_ms = int((time.time() + max(5.0, 3 * sending + 2)) * 1000)
        before = held_on(c, "due")
        send_timers(c, "due", node, address, DUE_TOGETHER, due_ms)
        while time.time() * 1000 < due_ms:
            time.sleep(0.005)
        deadline = time.time() + 120
        while held_on(c, "due") < before + DUE_TOGETHER and time.time() < deadline:
            time.sleep(0.005)
        all_in = time.time() * 1000 - due_ms
        late = []
        for qid in range(8):
            offset = 0
            while True:
                got = c.pull("due", QueueRef(node, address, qid), offset, max_messages=1000)
                if not got.messages:
                    break
                late += [m.store_timestamp - int(m.properties["TIMER_OUT_MS"]) for m in got.messages if "TIMER_OUT_MS" in m.properties]
                offset = got.next_offset
    return [
        Measure(f"delays: {DUE_TOGETHER:,} timers due in one second, all visible after", "ms", [all_in], "target ≤ 1,000"),
        Measure(
            "delays: lateness of each (store time on its topic - due time)",
            "ms",
            [statistics.median(late), sorted(late)[int(len(late) * 0.99)], max(late)],
            "p50 / p99 / max",
            extra={"count": len(late)},
        ),
    ]


def held(node: Node) -> list[Measure]:
    assert node.proc is not None
    base = rss_anon_mib(node.proc.pid)
    with Client(node.address, timeout=60) as c:
        c.create_topic("later", 8)
        name = c.route("later", refresh=True).nodes[0].name
        t0 = time.time()
        send_timers(c, "later", name, node.address, HELD, int((time.time() + 3600) * 1000))
        took = time.time() - t0
        pending = HELD
    # the timer takes them into its heap as they arrive: the measure once its memory stopped growing
    held_rss, steady_since, deadline = rss_anon_mib(node.proc.pid), time.time(), time.time() + 120
    while time.time() - steady_since < 3 and time.time() < deadline:
        time.sleep(0.5)
        now_rss = rss_anon_mib(node.proc.pid)
        if now_rss > held_rss + 1:
            steady_since = time.time()
        held_rss = max(held_rss, now_rss)
    return [
        Measure(f"delays: {HELD:,} timers held, RSS (anon) beyond the node's before", "MiB", [held_rss - base], "target ≤ 256"),
        Measure(f"delays: sending {HELD:,} timer messages (batches of {BATCH})", "msg/s", [pending / took]),
    ]


def receive_vs_pull(address: str) -> list[Measure]:
    n = POP_MESSAGES
    with Client(address, timeout=60) as c:
        c.create_topic("popped", 1)
        node = c.route("popped", refresh=True).nodes[0]
        q = QueueRef(node.name, node.address, 0)
        for start in range(0, n, BATCH):
            assert all(r.ok for r in c.send_batch("popped", [OutMessage(b"y" * 100)] * min(BATCH, n - start), queue=q))
        t = time.perf_counter()
        offset = 0
        while offset < n:
            got = c.pull("popped", q, offset, max_messages=32)
            offset = got.next_offset
            c.commit("pull-group", "popped", q, offset)
        pulled = n / (time.perf_counter() - t)
        t = time.perf_counter()
        done = 0
        while done < n:
            got = c.receive("pop-group", "popped", 32, invisible=60)
            assert got, "receive ran dry"
            assert not any(c.ack("pop-group", "popped", got))
            done += len(got)
        popped = n / (time.perf_counter() - t)
    return [
        Measure("delays: pull + commit, one consumer, 32 a time", "msg/s", [pulled]),
        Measure(
            "delays: receive + ack, one consumer, 32 a time",
            "msg/s",
            [popped],
            "target ≥ 0.5x pull + commit",
            extra={"ratio": popped / pulled},
        ),
    ]


FILTERED = int(os.environ.get("BENCH_FILTERED", "40000"))


def read_through(c: Client, q: QueueRef, **how: str) -> tuple[float, int]:
    """Pull the queue "filtered" from its start to its end: messages looked at per second, and
    how many were taken."""
    t = time.perf_counter()
    offset, taken = 0, 0
    while offset < FILTERED:
        got = c.pull("filtered", q, offset, max_messages=256, **how)  # type: ignore[arg-type]
        taken += len(got.messages)
        offset = got.next_offset
    return FILTERED / (time.perf_counter() - t), taken


def filters(address: str) -> list[Measure]:
    with Client(address, timeout=60) as c:
        c.create_topic("filtered", 1)
        node = c.route("filtered", refresh=True).nodes[0]
        q = QueueRef(node.name, node.address, 0)
        for start in range(0, FILTERED, BATCH):
            batch = [
                OutMessage(b"f" * 100, tags=r, properties={"region": r, "amount": str(i)})
                for i in range(start, min(FILTERED, start + BATCH))
                for r in ["eu" if i % 2 else "us"]
            ]
            assert all(r.ok for r in c.send_batch("filtered", batch, queue=q))
        rates: dict[str, list[float]] = {"none": [], "tag": [], "sql": [], "sql3": []}
        for _ in range(3):  # alternately
            rates["none"].append(read_through(c, q)[0])
            rate, taken = read_through(c, q, tag_filter="eu")
            assert taken == FILTERED // 2
            rates["tag"].append(rate)
            rate, taken = read_through(c, q, sql="region = 'eu'")
            assert taken == FILTERED // 2
            rates["sql"].append(rate)
            rate, taken = read_through(c, q, sql="region IN ('eu', 'apac') AND amount BETWEEN 0 AND 1000000 AND flag IS NULL")
            assert taken == FILTERED // 2
            rates["sql3"].append(rate)
    tag = statistics.median(rates["tag"])
    return [
        Measure(f"filters: pulling {FILTERED:,} messages, no filter", "msg/s looked at", rates["none"]),
        Measure("filters: the same, tag filter (half match)", "msg/s looked at", rates["tag"]),
        Measure(
            "filters: the same, SQL92 region = 'eu' (half match)",
            "msg/s looked at",
            rates["sql"],
            "target ≥ 0.5x tag filter",
            extra={"ratio": statistics.median(rates["sql"]) / tag},
        ),
        Measure(
            "filters: the same, SQL92 with IN, BETWEEN and IS NULL (half match)",
            "msg/s looked at",
            rates["sql3"],
            extra={"ratio": statistics.median(rates["sql3"]) / tag},
        ),
    ]


def timer_sends(c: Client, topic: str, q: QueueRef) -> float:
    """Timer messages sent one a call (due in an hour): messages per second."""
    t = time.perf_counter()
    for _ in range(TIMER_SENDS):
        assert c.send(topic, b"t" * 100, properties={"TIMER_DELAY_SEC": "3600"}, queue=q).ok
    return TIMER_SENDS / (time.perf_counter() - t)


def timers_beside_levels(address: str) -> list[Measure]:
    with Client(address, timeout=60) as c:
        c.create_topic("beside", 8)
        node = c.route("beside", refresh=True).nodes[0]
        q = QueueRef(node.name, node.address, 0)
        alone = timer_sends(c, "beside", q)
        level = OutMessage(b"l" * 100, properties={"DELAY": "18"})  # (2 h: pending throughout)
        for start in range(0, LEVEL_BACKLOG, BATCH):
            assert all(r.ok for r in c.send_batch("beside", [level] * min(BATCH, LEVEL_BACKLOG - start), queue=q))
        beside = timer_sends(c, "beside", q)
    return [
        Measure(f"delays: {TIMER_SENDS:,} timer sends, one a call, nothing else pending", "msg/s", [alone]),
        Measure(
            f"delays: the same beside {LEVEL_BACKLOG:,} pending delay-level messages",
            "msg/s",
            [beside],
            "target ≥ 0.8x nothing pending",
            extra={"ratio": beside / alone},
        ),
    ]


def run(workdir: str) -> list[Measure]:
    node = Node(os.path.join(workdir, "delays"))
    node.start()
    try:
        out = due_together(node.address) + receive_vs_pull(node.address) + filters(node.address)
        out += timers_beside_levels(node.address) + held(node)
    finally:
        node.stop(signal.SIGTERM)
    for m in out:
        print(m.line(), flush=True)
    return out
