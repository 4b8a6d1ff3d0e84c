"""A writer process SIGKILLed mid-write, then recovered (docs/store-format.md §8)."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from msgstore.record import codec
from msgstore.store import GetStatus, MessageStore

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from crash_child import SETTINGS, body  # noqa: E402


def _run_and_kill(root: str, flush: str, seed: int, acks_before_kill: int) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "crash_child.py"), root, flush, str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    acks = []
    deadline = time.monotonic() + 60
    try:
        first = json.loads(proc.stdout.readline() or "{}")
        assert first.get("ready"), proc.stderr.read()
        while len(acks) < acks_before_kill and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            acks.append(json.loads(line))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert len(acks) >= acks_before_kill, proc.stderr.read()
    return acks


def _read_queue(store: MessageStore, q: int) -> list[codec.StoredMessage]:
    out = []
    off = store.min_offset("crash", q)
    while True:
        with store.get_message("g", "crash", q, off, max_msgs=64) as r:
            if r.status is not GetStatus.FOUND:
                break
            for view in r.buffers:
                size, ok = codec.check(view, 0, len(view), True)
                assert ok and size == len(view), "a corrupt record was served"
            out.extend(r.messages())
            off = r.next_offset
    return out


@pytest.mark.parametrize("flush,seed", [("SYNC_FLUSH", 1), ("SYNC_FLUSH", 2), ("ASYNC_FLUSH", 3), ("ASYNC_FLUSH", 4)])
def test_sigkill_mid_write_then_recover(tmp_path, flush, seed):
    root = str(tmp_path / "store")
    rnd = random.Random(seed)
    acked: dict[int, dict[int, int]] = {q: {} for q in range(4)}  # queue → offset → message number
    for round_ in range(2):
        for a in _run_and_kill(root, flush, seed * 10 + round_, rnd.randint(50, 300)):
            for k in range(a["n"]):
                acked[a["q"]][a["offset"] + k] = a["first"] + k
        assert os.path.exists(os.path.join(root, "abort"))
        store = MessageStore(root, {**SETTINGS, "flushDiskType": flush}).start()
        try:
            assert store.recovery_report.mode == "abnormal"
            for q in range(4):
                msgs = _read_queue(store, q)
                offsets = [m.queue_offset for m in msgs]
                assert offsets == list(range(store.min_offset("crash", q), store.max_offset("crash", q)))  # no gaps, no dups
                by_offset = {m.queue_offset: m for m in msgs}
                for m in msgs:
                    n = int(m.properties["KEYS"][1:])  # the key carries the message number
                    assert m.body == body(n) and m.queue_id == q
                # SIGKILL keeps the page cache, so async acknowledgements survive a process
                # crash too; only a power loss can take the unflushed async tail.
                for off, n in acked[q].items():
                    assert off in by_offset, f"acknowledged message {n} at {q}/{off} lost"
                    assert by_offset[off].body == body(n)
            for q in range(4):
                if acked[q]:
                    off, n = max(acked[q].items())
                    assert [m.body for m in store.query_message("crash", f"k{n}")] == [body(n)]
        finally:
            store.shutdown()
