"""A commit that a crash cut between its op record and its message (broker/transactions.py):
the next start finds the op record and stores the message, once; a start after that does not
store it again."""

from __future__ import annotations

import pytest

from msgstore.broker.transactions import PROP_PRODUCER_GROUP, TransactionService, to_half
from msgstore.store import GetStatus, Message, MessageStore

SETTINGS = {"mappedFileSizeCommitLog": 1 << 20, "maxHashSlotNum": 1024, "maxIndexNum": 4096}


def committed(store: MessageStore) -> list[bytes]:
    res = store.get_message(None, "orders", 0, 0, max_msgs=100)
    try:
        return [m.body for m in res.messages()] if res.status is GetStatus.FOUND else []
    finally:
        res.release()


class Crash(Exception):
    pass


def test_a_commit_cut_by_a_crash_is_completed_once(tmp_path, monkeypatch):
    store = MessageStore(str(tmp_path / "s"), SETTINGS).start()
    try:
        half = to_half(Message("orders", b"paid", 0, properties={PROP_PRODUCER_GROUP: "pg", "UNIQ_KEY": "U1"}))
        store.create_topic("RMQ_SYS_TRANS_HALF_TOPIC", 1)
        assert store.put_messages(half.topic, 0, [half]).ok
        assert store.wait_dispatched()
        tx = TransactionService(store, lambda: store.config)
        tx.take_new()

        def crash(*_a):
            raise Crash

        with monkeypatch.context() as m:
            m.setattr(TransactionService, "_put_committed", crash)
            with pytest.raises(Crash):
                tx.end("U1", commit=True)  # the op record is written, the message is not
        assert store.wait_dispatched()
        assert committed(store) == []
        again = TransactionService(store, lambda: store.config)  # the next start
        again.load()
        again.take_new()
        assert store.wait_dispatched()
        assert committed(store) == [b"paid"]
        third = TransactionService(store, lambda: store.config)
        third.load()
        third.take_new()
        assert store.wait_dispatched()
        assert committed(store) == [b"paid"]  # once
        assert "U1" not in third.open
    finally:
        store.shutdown()
