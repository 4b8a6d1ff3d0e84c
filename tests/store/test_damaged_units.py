"""A consume-queue unit that does not point at a record (damaged on disk) is skipped, never
served as if it were one: a client would fail to decode it (found by tests/reliability fuzzing)."""

import os
import struct

from msgstore.store import GetStatus, Message, MessageStore


def test_a_unit_with_a_wrong_size_is_skipped_and_the_rest_served(tmp_path):
    root = str(tmp_path / "s")
    with MessageStore(root, {"mappedFileSizeConsumeQueue": 20 * 64}) as store:
        for i in range(5):
            assert store.put_messages("t", 0, [Message("t", b"body-%d" % i, queue_id=0)]).ok
        assert store.wait_dispatched(10)
    cq_file = os.path.join(root, "consumequeue", "t", "0", f"{0:020d}")
    with open(cq_file, "r+b") as f:  # unit 2: keep its offset, shrink its size
        f.seek(2 * 20 + 8)
        size = struct.unpack(">i", f.read(4))[0]
        f.seek(2 * 20 + 8)
        f.write(struct.pack(">i", size - 3))
    with MessageStore(root, {"mappedFileSizeConsumeQueue": 20 * 64}) as store:
        res = store.get_message(None, "t", 0, 0, max_msgs=32)
        try:
            assert res.status is GetStatus.FOUND
            assert [m.body for m in res.messages()] == [b"body-0", b"body-1", b"body-3", b"body-4"]
            assert res.next_offset == 5
        finally:
            res.release()
        assert store.stats["bad_units"] == 1
