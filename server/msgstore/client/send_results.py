"""What a send answers, per message, built only when looked at.

A batch of 500 came back as 500 protobuf results turned into 500 ``SendResult`` objects at
1.9 µs each (eight field reads through upb, then a dataclass): 40 % of a batched producer's CPU
(issue 30), mostly for results nobody reads beyond "were they all stored". ``SendResults`` keeps
the response's results and makes a ``SendResult`` the first time one is asked for; the statuses
alone are read without making any."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

from ..v1 import msgstore_pb2 as pb


@dataclass
class SendResult:
    status: str
    message_id: str
    node: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    error: str = ""
    address: str = ""  # the member that answered (a replica group's master at the time)
    recall_handle: str = ""  # a message with a delivery time: what recall() takes to cancel it
    transaction_id: str = ""  # a transactional half message: what commit/rollback take
    topic: str = ""  # a delayed or timed message: where it will be delivered (message_id: its UNIQ_KEY there)

    @property
    def ok(self) -> bool:
        return self.status == "PUT_OK"

    @property
    def queue(self) -> tuple[str, int]:
        return self.node, self.queue_id


STATUS_NAMES = {v.number: v.name for v in pb.SendStatus.DESCRIPTOR.values}


def send_result(r: pb.SendResult, node: str, address: str = "") -> SendResult:
    return SendResult(
        STATUS_NAMES[r.status],
        r.message_id,
        node,
        r.queue_id,
        r.queue_offset,
        r.commitlog_offset,
        r.error,
        address,
        r.recall_handle,
        r.transaction_id,
        r.topic,
    )


class SendResults(Sequence[SendResult]):
    """A read-only list of one send's results, in request order (indexing, slicing, iteration,
    ``len``, equality with a list all behave as a list's)."""

    __slots__ = ("_raw", "_node", "_address", "_made")

    def __init__(self, raw: Sequence[pb.SendResult], node: str, address: str = ""):
        self._raw = raw
        self._node = node
        self._address = address
        self._made: list[SendResult | None] | None = None

    def __len__(self) -> int:
        return len(self._raw)

    @overload
    def __getitem__(self, i: int) -> SendResult: ...

    @overload
    def __getitem__(self, i: slice) -> list[SendResult]: ...

    def __getitem__(self, i: int | slice) -> SendResult | list[SendResult]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self._raw)))]
        made = self._made
        if made is None:
            made = self._made = [None] * len(self._raw)
        r = made[i]  # IndexError as a list's
        if r is None:
            r = made[i] = send_result(self._raw[i], self._node, self._address)
        return r

    def __iter__(self) -> Iterator[SendResult]:
        for i in range(len(self._raw)):
            yield self[i]

    def statuses(self) -> set[str]:
        """The statuses present, read without making a result per message."""
        return {STATUS_NAMES[s] for s in {r.status for r in self._raw}}

    @property
    def all_ok(self) -> bool:
        return all(r.status == pb.PUT_OK for r in self._raw)

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, (SendResults, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # as a list's

    def __repr__(self) -> str:
        return repr(list(self))
