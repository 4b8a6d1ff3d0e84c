"""A writer process for crash tests: prints one line per acknowledged batch, forever, until
the test kills it with SIGKILL. Usage: crash_child.py ROOT FLUSH_TYPE SEED"""

import json
import random
import sys

from msgstore.store import Message, MessageStore

SETTINGS = {
    "mappedFileSizeCommitLog": 32 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 256,
    "maxHashSlotNum": 512,
    "maxIndexNum": 2048,
    "flushIntervalCommitLog": 10,
    "flushIntervalConsumeQueue": 10,
}


def body(i: int) -> bytes:
    return (b"m%08d-" % i) * (1 + i % 7)


def main() -> None:
    root, flush, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rnd = random.Random(seed)
    store = MessageStore(root, {**SETTINGS, "flushDiskType": flush}).start()
    print(json.dumps({"ready": True, "recovery": store.recovery_report.mode}), flush=True)
    i = seed * 1_000_000  # unique message numbers per run
    while True:
        q = rnd.randrange(4)
        n = rnd.randint(1, 12)
        msgs = [Message("crash", body(i + k), queue_id=q, properties={"KEYS": f"k{i + k}", "TAGS": f"q{q}"}) for k in range(n)]
        r = store.put_messages("crash", q, msgs)
        if r.ok:
            print(json.dumps({"q": q, "offset": r.queue_offset, "first": i, "n": n}), flush=True)
        i += n


if __name__ == "__main__":
    main()
