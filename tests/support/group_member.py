"""A consumer-group member in a process of its own, as a service would run one.

``python tests/support/group_member.py ENDPOINTS GROUP TOPIC OUT [--heartbeat S] [--expiry S]``

Each message processed is one line ``node queue offset body`` appended to OUT (flushed) before
the batch is committed, so OUT is what the member processed even when it is SIGKILLed. SIGTERM
closes the consumer cleanly (commit, leave the group) and exits 0.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "server"))

from msgstore.client import Client, Consumer


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("endpoints")
    p.add_argument("group")
    p.add_argument("topic")
    p.add_argument("out")
    p.add_argument("--heartbeat", type=float, default=0.3)
    p.add_argument("--expiry", type=float, default=1.5)
    p.add_argument("--max", type=int, default=16)
    p.add_argument("--client-id")
    p.add_argument("--mode", default="clustering")
    p.add_argument("--quiet", action="store_true", help="write only the count of messages processed, at exit")
    args = p.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    client = Client(args.endpoints, timeout=10)
    consumer = Consumer(
        client,
        args.group,
        args.topic,
        max_messages=args.max,
        long_poll_ms=200,
        heartbeat_s=args.heartbeat,
        expiry_s=args.expiry,
        client_id=args.client_id,
        mode=args.mode,
    )
    count = 0
    with open(args.out, "a") as out:
        while not stop.is_set():
            records = consumer.poll(timeout=0.2)
            count += len(records)
            if not args.quiet:
                for r in records:
                    out.write(f"{r.queue.node} {r.queue.queue_id} {r.message.queue_offset} {r.message.body.decode()}\n")
                out.flush()
            if records:
                consumer.commit()
        if args.quiet:
            out.write(f"{count}\n")
    consumer.close()
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
