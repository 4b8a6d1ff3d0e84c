"""FlushRequest callbacks: how the gRPC server awaits a group commit without a thread."""

import threading

from msgstore.store import MessageStore
from msgstore.store.flush import FlushRequest


def test_callback_runs_once_when_done_or_at_once_if_already_done():
    req = FlushRequest(100)
    seen = []
    req.add_done_callback(lambda r: seen.append(("early", r.ok)))
    assert seen == []
    req.done(True)
    req.add_done_callback(lambda r: seen.append(("late", r.ok)))
    assert seen == [("early", True), ("late", True)] and req.wait(0)


def test_deferred_put_is_confirmed_by_the_group_commit(tmp_path):
    from msgstore.store import Message

    with MessageStore(str(tmp_path), {"flushDiskType": "SYNC_FLUSH"}) as store:
        batch_result = store.put_messages("t", 0, [Message("t", b"x", queue_id=0)])
        assert batch_result.ok
        done = threading.Event()
        req = store.request_flush(batch_result.phy_offset + batch_result.wrote_bytes)
        req.add_done_callback(lambda r: done.set())
        assert done.wait(5) and req.ok
        assert store.commitlog.flushed_offset >= batch_result.phy_offset + batch_result.wrote_bytes
    with MessageStore(str(tmp_path / "async")) as store:
        assert store.request_flush(10) is None  # ASYNC_FLUSH: nothing to wait for
