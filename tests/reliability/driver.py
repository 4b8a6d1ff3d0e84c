"""A producer process for the crash campaign: sends small batches through the real server and
prints one JSON line per acknowledged entry group, until its stdin closes or its time is up.

It never retries a failed call (a retry could store a message twice and blur what "lost"
means); it moves on with fresh message ids instead. Usage: driver.py ADDRESS TOPIC SEED SECONDS RATE (messages per second at most)
"""

from __future__ import annotations

import json
import random
import select
import sys
import time

import grpc

from msgstore.v1 import msgstore_pb2 as pb
from msgstore.v1 import msgstore_pb2_grpc as pbg

QUEUES = 4


def body(i: int) -> bytes:
    """What message ``i`` holds: its id, then filler whose length depends on the id."""
    return b"id=%d|" % i + bytes((i * 7 + k) % 251 for k in range(16 + i % 200))


def main() -> None:
    address, topic, seed, seconds, rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
    rnd = random.Random(seed)
    stub = pbg.MessageStoreStub(grpc.insecure_channel(address))
    deadline = time.monotonic() + seconds
    i = 0
    started = time.monotonic()
    while time.monotonic() < deadline:
        started = max(started, time.monotonic() - i / rate - 0.05)  # no bursts to catch up after a restart
        ahead = i / rate - (time.monotonic() - started)
        if ahead > 0:  # keep the data set (which is re-read after every kill) bounded
            time.sleep(ahead)
        if select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.read(1):
            return  # the test closed our stdin: stop
        q = rnd.randrange(QUEUES)
        ids = list(range(i, i + rnd.randint(1, 8)))
        i += len(ids)
        entries = [pb.SendEntry(topic=topic, queue_id=q, body=body(n), keys=[f"k{n}"], tags=f"q{q}") for n in ids]
        try:
            resp = stub.Send(pb.SendRequest(entries=entries), timeout=5)
        except grpc.RpcError:
            time.sleep(0.01)  # the server is down or recovering
            continue
        acked = [(n, r.queue_offset) for n, r in zip(ids, resp.results) if r.status == pb.PUT_OK]
        if acked:
            print(json.dumps({"q": q, "acked": acked}), flush=True)


if __name__ == "__main__":
    main()
