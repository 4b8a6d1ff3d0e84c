"""The storage engine embedded: put throughput beside the disk's write rate, and recovery.

Targets (issue 2): ≥ 300k msg/s for batches of 1 KiB messages with async flush and the
dispatcher running; abnormal recovery of 1 GiB of 1 KiB messages ≤ 5 s.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from msgstore.store import Message, MessageStore

from .common import Measure, dd_write_rate, repeat

BODY = os.urandom(1024)


def embedded_put(workdir: str, batch: int = 1000, total: int = 400_000, keys: bool = False) -> tuple[float, float]:
    """(msg/s of the put calls, MB/s of records written) with dispatch running."""
    root = tempfile.mkdtemp(dir=workdir)
    store = MessageStore(root, {}).start()
    try:
        batches = []
        for b in range(40):
            props = [{"TAGS": "tagA", **({"KEYS": f"k-{b}-{i}"} if keys else {})} for i in range(batch)]
            batches.append([Message("bench", BODY, queue_id=b % 8, properties=p) for p in props])
        n = written = 0
        t = time.perf_counter()
        while n < total:
            for msgs in batches:
                r = store.put_messages("bench", msgs[0].queue_id, msgs)
                assert r.ok, r
                n += len(msgs)
                written += r.wrote_bytes
                if n >= total:
                    break
        dt = time.perf_counter() - t
        assert store.wait_dispatched(60)
        return n / dt, written / dt / 1e6
    finally:
        store.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def build_gib(root: str) -> int:
    store = MessageStore(root, {}).start()
    n = 0
    while store.commitlog.max_offset < (1 << 30) - 2_000_000:
        msgs = [Message("bench", BODY, queue_id=n % 8, properties={"TAGS": "tagA", "KEYS": f"k{n}-{i}"}) for i in range(1000)]
        assert store.put_messages("bench", n % 8, msgs).ok
        n += 1
    size = store.commitlog.max_offset
    store.shutdown()
    return size


def abnormal_recovery(root: str) -> float:
    """Seconds per GiB for the worst case: no checkpoint, so every record is re-scanned with
    CRC checks and the whole index is rebuilt."""
    os.unlink(os.path.join(root, "checkpoint"))
    open(os.path.join(root, "abort"), "w").close()
    t = time.perf_counter()
    store = MessageStore(root, {}).start()
    dt = time.perf_counter() - t
    assert store.recovery_report.mode == "abnormal"
    size = store.commitlog.max_offset
    store.shutdown()
    return dt / (size / (1 << 30))


def run(workdir: str) -> list[Measure]:
    out = []
    rates = [embedded_put(workdir) for _ in range(3)]
    out.append(Measure("embedded put, 1 KiB, batches of 1000, async flush", "msg/s", [r[0] for r in rates], "target ≥ 300k"))
    put_mb = [r[1] for r in rates]
    disk = repeat(lambda: dd_write_rate(workdir))
    out.append(Measure("embedded put, MB/s of records", "MB/s", put_mb))
    out.append(Measure("disk sequential write (dd conv=fdatasync)", "MB/s", disk))
    out.append(Measure("ratio: embedded put / disk write", "x", [p / d for p, d in zip(put_mb, disk)], "target ≥ 0.5"))
    out.append(Measure("embedded put with a key per message (index)", "msg/s", [embedded_put(workdir, keys=True)[0] for _ in range(3)]))
    root = tempfile.mkdtemp(dir=workdir)
    try:
        build_gib(root)
        out.append(
            Measure(
                "abnormal recovery, 1 KiB messages, full re-scan + reindex", "s/GiB", repeat(lambda: abnormal_recovery(root)), "target ≤ 5"
            )
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out
