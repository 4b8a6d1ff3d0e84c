"""Reading a system queue a batch at a time, and where a queue offset's record is in the
commit log: what every broker service does with its own queue (delay levels, timer, revive
log, half messages)."""

from __future__ import annotations

from ..record.codec import StoredMessage
from ..store import GetStatus, MessageStore


def read_batch(store: MessageStore, topic: str, queue_id: int, offset: int, n: int = 256) -> tuple[list[StoredMessage], int]:
    """Up to ``n`` messages from ``offset`` (copied out: the result holds no segment) and the
    offset after what was looked at (past it, none found: cleaned away or skipped)."""
    res = store.get_message(None, topic, queue_id, offset, max_msgs=n)
    try:
        return (res.messages() if res.status is GetStatus.FOUND else []), res.next_offset
    finally:
        res.release()


def read_one(store: MessageStore, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
    got, _ = read_batch(store, topic, queue_id, offset, 1)
    return got[0] if got and got[0].queue_offset == offset else None


def phy_of(store: MessageStore, topic: str, queue_id: int, offset: int) -> int | None:
    """The commit-log offset of the record at ``offset`` (the queue's first still held when
    that one is gone), None when the queue holds nothing there or after: what retention keeps."""
    cq = store.consume_queue(topic, queue_id)
    if cq is None:
        return None
    at = max(offset, cq.min_offset)
    unit = cq.unit(at) if at < cq.max_offset else None
    return unit[0] if unit is not None else None
