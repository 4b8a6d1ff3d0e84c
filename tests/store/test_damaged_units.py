"""A consume-queue unit that does not point at its record (damaged on disk) is never served as if
it were one (a client would fail to decode it: found by tests/reliability fuzzing); it is written
again from the commit log, which still holds the record, and the record is served (issue 35)."""

import os
import struct

from msgstore.store import GetStatus, Message, MessageStore


def test_a_unit_with_a_wrong_size_is_written_again_and_every_record_served(tmp_path):
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
            assert [m.body for m in res.messages()] == [b"body-%d" % i for i in range(5)]
            assert res.next_offset == 5
        finally:
            res.release()
        assert store.stats["bad_units"] == 0 and store.repairs.repaired == 1
    with open(cq_file, "rb") as f:  # the unit on disk is the record's again
        f.seek(2 * 20 + 8)
        assert struct.unpack(">i", f.read(4))[0] == size


def test_a_unit_whose_record_is_gone_from_the_log_is_skipped(tmp_path):
    """What the commit log no longer holds cannot be written again: skipped, counted, never served."""
    root = str(tmp_path / "s")
    settings = {"mappedFileSizeConsumeQueue": 20 * 64, "mappedFileSizeCommitLog": 4096}
    with MessageStore(root, settings) as store:  # ~5 segments: the first is not among those a restart checks
        for i in range(200):
            assert store.put_messages("t", 0, [Message("t", b"body-%d" % i, queue_id=0)]).ok
        assert store.wait_dispatched(10)
    cq_file = os.path.join(root, "consumequeue", "t", "0", f"{0:020d}")
    with open(cq_file, "rb") as f:
        f.seek(2 * 20)
        phy = struct.unpack(">q", f.read(8))[0]
    with open(os.path.join(root, "commitlog", f"{0:020d}"), "r+b") as f:  # record 2 itself damaged (its magic)
        f.seek(phy + 4)
        f.write(b"\x00\x00\x00\x00")
    with MessageStore(root, settings) as store:
        res = store.get_message(None, "t", 0, 0, max_msgs=5)
        try:
            assert [m.body for m in res.messages()] == [b"body-0", b"body-1", b"body-3", b"body-4", b"body-5"]
        finally:
            res.release()
        assert store.stats["bad_units"] == 1 and store.repairs.repaired == 0
