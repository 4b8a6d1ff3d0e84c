"""Power-loss simulation: the data directory is copied at random moments while a writer runs,
and in the copy everything past the last flushed commit-log offset is replaced by random garbage
(what a machine that lost power may leave of unflushed pages). Recovering the copy must keep
every record before that offset and serve nothing after it."""

from __future__ import annotations

import os
import random
import shutil
import threading
import time

import pytest

from msgstore.store import GetStatus, Message, MessageStore
from tests.reliability.conftest import scale
from tests.reliability.driver import body
from tests.support.servers import wait_until

TOPIC = "power"
QUEUES = 4
SETTINGS = {
    "mappedFileSizeCommitLog": 128 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 500,
    "maxHashSlotNum": 1024,
    "maxIndexNum": 4096,
    "flushIntervalCommitLog": 20,
    "flushIntervalConsumeQueue": 20,
    "cleanResourceInitialDelay": 3_600_000,
}
SNAPSHOTS = scale(8, 60)


class Writer:
    def __init__(self, store: MessageStore, seed: int, limit: int = 200_000):
        self.store = store
        self.rnd = random.Random(seed)
        self.acked: dict[int, tuple[int, int, int, int]] = {}  # id -> (queue, queue offset, phy offset, size)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.limit = limit
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        i = 0
        while not self.stop.is_set() and i < self.limit:
            q = self.rnd.randrange(QUEUES)
            ids = list(range(i, i + self.rnd.randint(1, 8)))
            i += len(ids)
            r = self.store.put_messages(TOPIC, q, [Message(TOPIC, body(n), queue_id=q, properties={"KEYS": f"k{n}"}) for n in ids])
            assert r.ok, r
            phy = r.phy_offset
            with self.lock:
                for k, (n, size) in enumerate(zip(ids, r.sizes)):
                    self.acked[n] = (q, r.queue_offset + k, phy, size)
                    phy += size
            time.sleep(0.0005 * self.rnd.random())

    def snapshot(self) -> dict[int, tuple[int, int, int, int]]:
        with self.lock:
            return dict(self.acked)


def damage(copy: str, flushed: int, rnd: random.Random) -> int:
    """Replace every commit-log byte at or past ``flushed`` by garbage then zeros; return how
    many garbage bytes were written."""
    cl = os.path.join(copy, "commitlog")
    size = SETTINGS["mappedFileSizeCommitLog"]
    garbage = 0
    for name in sorted(os.listdir(cl)):
        start = int(name)
        if start + size <= flushed:
            continue
        pos = max(flushed - start, 0)
        length = rnd.randint(0, min(8192, size - pos))
        with open(os.path.join(cl, name), "r+b") as f:
            f.seek(pos)
            f.write(rnd.randbytes(length) + bytes(size - pos - length))
        garbage += length
    return garbage


def served(store: MessageStore) -> dict[int, tuple[int, int, int, int]]:
    out = {}
    for q in range(QUEUES):
        offset = store.min_offset(TOPIC, q)
        while True:
            res = store.get_message(None, TOPIC, q, offset, max_msgs=256)
            try:
                if res.status is not GetStatus.FOUND:
                    break
                for m in res.messages():
                    n = int(m.properties["KEYS"][1:])
                    assert m.queue_offset == offset and m.body == body(n), f"queue {q} offset {offset}: wrong record"
                    out[n] = (q, m.queue_offset, m.commitlog_offset, m.store_size)
                    offset += 1
            finally:
                res.release()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_power_loss_keeps_everything_before_the_damage_and_nothing_after(tmp_path, flush):
    rnd = random.Random(2026 if flush == "ASYNC_FLUSH" else 2027)
    store = MessageStore(str(tmp_path / "live"), {**SETTINGS, "flushDiskType": flush}).start()
    writer = Writer(store, seed=rnd.randrange(1 << 30), limit=25_000 * SNAPSHOTS)  # (writing through every snapshot)
    writer.thread.start()
    # (the commit log's first segment, and its directory, come with the first put: a loaded
    # machine may not have run one before the first snapshot)
    wait_until(lambda: writer.snapshot() or not writer.thread.is_alive(), timeout=30, what="the writer's first put")
    checked = 0
    try:
        for k in range(SNAPSHOTS):
            time.sleep(rnd.uniform(0.02, 0.2))
            assert writer.thread.is_alive(), "the writer stopped"
            flushed = store.commitlog.flushed_offset
            copy = str(tmp_path / f"copy{k}")
            shutil.copytree(store.root, copy, ignore=shutil.ignore_patterns("lock"))
            acked = writer.snapshot()
            damage(copy, flushed, rnd)
            with MessageStore(copy, {**SETTINGS, "flushDiskType": flush}).start() as recovered:
                assert recovered.recovery_report.mode == "abnormal"
                assert recovered.commitlog.max_offset == flushed, "recovery must end exactly at the damage"
                got = served(recovered)
                before = {n: v for n, v in acked.items() if v[2] + v[3] <= flushed}
                missing = [n for n in before if got.get(n) != before[n]]
                assert not missing, f"{len(missing)} records before the damage lost or moved, e.g. {missing[:5]}"
                beyond = [n for n, v in got.items() if v[2] + v[3] > flushed]
                assert not beyond, f"served records past the damage: {beyond[:5]}"
                # the index must not answer with anything past the damage either
                after = [n for n, v in acked.items() if v[2] >= flushed][:20]
                for n in after:
                    assert recovered.query_message(TOPIC, f"k{n}") == []
                checked += len(before)
            shutil.rmtree(copy)
    finally:
        writer.stop.set()
        writer.thread.join(10)
        store.shutdown()
    print(f"\n{flush}: {SNAPSHOTS} snapshots, {checked} records checked before the damage")
    assert checked > SNAPSHOTS
