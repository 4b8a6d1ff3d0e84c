"""Reading a system queue a batch at a time, and where a queue offset's record is in the
commit log: what every broker service does with its own queue (delay levels, timer, revive
log, half messages)."""

from __future__ import annotations

from collections.abc import Iterator

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


def batches_from(store: MessageStore, topic: str, queue_id: int, start: int, n: int = 256) -> Iterator[tuple[list[StoredMessage], int]]:
    """The queue from ``start`` to its end, a batch at a time, each with the offset a reader
    stands at after it (a run the store skipped comes as an empty batch: passed over)."""
    at = start
    while at < store.max_offset(topic, queue_id):
        got, nxt = read_batch(store, topic, queue_id, at, n)
        if not got and nxt <= at:
            return  # (a unit ahead of its record: looked at again next time)
        at = got[-1].queue_offset + 1 if got else nxt
        yield got, at


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
