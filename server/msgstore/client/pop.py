"""Message-level consumption from a client (RocketMQ 5's SimpleConsumer model): receive
messages that then stay invisible to the group, acknowledge each, change its invisibility, or
nack it (it comes back after the group's backoff, its attempt one higher; after the group's
``max_deliveries`` it is set aside in ``%DLQ%<group>``). Calls go to each node's master."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from ..record.receipt import Receipt
from ..v1 import msgstore_pb2 as pb
from .errors import StoreError
from .routing import QueueRef


def holding(nodes: list) -> list:
    """The groups a receive asks: those the route lists queues of the topic on (a topic created
    on some groups only is unknown to the others, which would refuse it); all of them when
    none does, so that a missing topic is still said."""
    return [n for n in nodes if n.queue_ids] or nodes


@dataclass
class Received:
    """One delivery of a message to a member of a group."""

    body: bytes
    topic: str  # the topic it was sent to (a redelivery's too)
    queue: QueueRef  # where it was delivered from (a retry topic's queue for a redelivery)
    queue_offset: int
    msg_id: str
    attempt: int  # 1 for a first delivery
    receipt: str  # what ack / change_invisible / nack take
    invisible_until_ms: int
    tags: str = ""
    keys: list[str] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    born_timestamp: int = 0
    store_timestamp: int = 0


def _received(r: pb.ReceivedMessage, node: str, address: str) -> Received:
    m = r.message
    return Received(
        bytes(m.body),
        m.topic,
        QueueRef(node, address, m.queue_id),
        m.queue_offset,
        m.msg_id,
        r.attempt,
        r.receipt_handle,
        r.invisible_until_ms,
        m.tags,
        list(m.keys),
        dict(m.properties),
        m.born_timestamp,
        m.store_timestamp,
    )


def _receipt(text: str) -> Receipt:
    try:
        return Receipt.decode(text)
    except ValueError as e:
        raise StoreError(grpc.StatusCode.INVALID_ARGUMENT, f"receipt_handle: {e}") from None


def _invisible_ms(invisible: float, least: int) -> int:
    """``invisible`` seconds in ms; INVALID_ARGUMENT below ``least`` ms (0 or less used to become
    1 ms without a word: a message received that way came back at once)."""
    ms = round(invisible * 1000)
    if not ms >= least:
        raise StoreError(grpc.StatusCode.INVALID_ARGUMENT, f"invisible: must be at least {least} ms, got {invisible} s")
    return ms


def _receive_request(group: str, topic: str, n: int, invisible: float, wait: float, tags: str | None, sql: str | None) -> pb.ReceiveRequest:
    return pb.ReceiveRequest(
        group=group,
        topic=topic,
        max_messages=n,
        invisible_ms=_invisible_ms(invisible, 1),
        wait_ms=round(wait * 1000),
        tag_filter=tags or "",
        sql_filter=sql or "",
    )


def _target(text: str) -> tuple[str, QueueRef]:
    """Where a receipt's delivery lives: its topic and its group's queue (the master's)."""
    r = _receipt(text)
    return r.topic, QueueRef(r.node, "", r.queue_id)


def _ack_requests(
    group: str, topic: str, receipts: Sequence[str | Received]
) -> tuple[int, list[tuple[list[int], str, QueueRef, pb.AckRequest]]]:
    """One Ack per node the receipts name: (entry indices, topic, queue, request) each."""
    texts = [r.receipt if isinstance(r, Received) else r for r in receipts]
    by_node: dict[str, list[int]] = {}
    for i, t in enumerate(texts):
        try:
            node = _receipt(t).node
        except StoreError:
            continue  # (its own result: see _unreadable_receipts)
        by_node.setdefault(node, []).append(i)
    return len(texts), [
        (idx, *_target(texts[idx[0]]), pb.AckRequest(group=group, topic=topic, receipt_handles=[texts[i] for i in idx]))
        for idx in by_node.values()
    ]


def _change_invisible_request(
    group: str, topic: str, receipt: str | Received, invisible: float
) -> tuple[str, QueueRef, pb.ChangeInvisibleRequest]:
    text = receipt.receipt if isinstance(receipt, Received) else receipt
    req = pb.ChangeInvisibleRequest(group=group, topic=topic, receipt_handle=text, invisible_ms=_invisible_ms(invisible, 0))
    return (*_target(text), req)


def _unreadable_receipts(receipts: Sequence[str | Received]) -> list[str]:
    """Per receipt, why it is not one (each fails alone; the others are acknowledged), else ''."""
    out = []
    for r in receipts:
        try:
            _receipt(r.receipt if isinstance(r, Received) else r)
            out.append("")
        except StoreError as e:
            out.append(e.details)  # "receipt_handle: why", as the store says it of one it cannot take
    return out


class PopCalls:
    """Mixed into Client (``route``, ``_group_call``, ``master_address``, ``_call``)."""

    def receive(
        self: Any,
        group: str,
        topic: str,
        max_messages: int = 32,
        *,
        invisible: float = 30.0,
        wait: float = 0.0,
        tags: str | None = None,
        sql: str | None = None,
    ) -> list[Received]:
        """Up to ``max_messages`` not yet delivered to ``group`` (redeliveries first), each
        invisible to the group for ``invisible`` seconds; waits up to ``wait`` seconds on the
        last node asked when none has any. ``tags`` (``"a || b"``) or ``sql`` (a SQL92 selector
        on properties, ``"amount > 100"``) picks the messages the group takes here."""
        nodes = holding(self.route(topic).nodes or [])
        out: list[Received] = []
        for i, node in enumerate(nodes):
            if len(out) >= max_messages:
                break
            waits = wait if i == len(nodes) - 1 and not out else 0.0  # (only the last node asked, only when none had any)
            req = _receive_request(group, topic, max_messages - len(out), invisible, waits, tags, sql)
            queue = QueueRef(node.name, node.address, 0)
            resp = self._group_call(topic, queue, "Receive", req, reads=False, timeout=self.timeout + req.wait_ms / 1000)
            address = self.master_address(topic, queue)
            out += [_received(r, node.name, address) for r in resp.messages]
        return out

    def ack(self: Any, group: str, topic: str, receipts: Sequence[str | Received]) -> list[str]:
        """Acknowledge deliveries; per receipt '' or why it no longer could (the delivery is
        over: acknowledged already, or the message came back as a new delivery)."""
        n, calls = _ack_requests(group, topic, receipts)
        errors = _unreadable_receipts(receipts)
        for idx, where, queue, req in calls:
            resp = self._group_call(where, queue, "Ack", req, reads=False)
            for i, res in zip(idx, resp.results):
                errors[i] = "" if res.ok else res.error
        return errors

    def change_invisible(self: Any, group: str, topic: str, receipt: str | Received, invisible: float) -> str:
        """Keep the delivery invisible for ``invisible`` seconds from now instead; its new receipt."""
        where, queue, req = _change_invisible_request(group, topic, receipt, invisible)
        return str(self._group_call(where, queue, "ChangeInvisible", req, reads=False).receipt_handle)

    def nack(self: Any, group: str, topic: str, receipt: str | Received) -> None:
        """Give the delivery up now: it comes back after the group's backoff, attempt + 1."""
        self.change_invisible(group, topic, receipt, 0)

    def update_group(
        self: Any,
        group: str,
        *,
        max_deliveries: int = 0,
        backoff: Sequence[float] = (),
        exponential: tuple[float, float, float] | None = None,
        fifo: bool | None = None,
    ) -> None:
        """A group's retry policy on every node: ``max_deliveries`` before the DLQ (the first
        included: RocketMQ's retryMaxTimes + 1, 17 by default), and the backoff: seconds after delivery k (``backoff[k-1]``, the
        last repeating) or ``exponential=(initial, max, multiplier)`` seconds. ``fifo=True``: each
        message group one message at a time, in order (messages sent with ``message_group=``)."""
        req = _update_group_request(group, max_deliveries, backoff, exponential, fifo)
        for node in self.route("", refresh=True).nodes:
            self._call(node.address, "UpdateGroup", req, node=node.name)

    def delete_group(self: Any, group: str, *, remove_offsets: bool = False) -> bool:
        """Forget a group's settings on every node (order and retry policy back to the
        defaults); its committed positions too with ``remove_offsets``. Whether any node had them."""
        req = pb.DeleteGroupRequest(group=group, remove_offsets=remove_offsets)
        return any([self._call(n.address, "DeleteGroup", req, node=n.name).deleted for n in self.route("", refresh=True).nodes])


def _update_group_request(
    group: str, max_deliveries: int, backoff: Sequence[float], exponential: tuple[float, float, float] | None, fifo: bool | None = None
):
    req = pb.UpdateGroupRequest(group=group, max_deliveries=max_deliveries, backoff_ms=[round(s * 1000) for s in backoff])
    if fifo is not None:
        req.fifo = fifo
    if exponential is not None:
        req.exponential_initial_ms = round(exponential[0] * 1000)
        req.exponential_max_ms = round(exponential[1] * 1000)
        req.exponential_multiplier = exponential[2]
    return req


class AsyncPopCalls:
    """The same on asyncio, mixed into AsyncClient."""

    async def receive(
        self: Any,
        group: str,
        topic: str,
        max_messages: int = 32,
        *,
        invisible: float = 30.0,
        wait: float = 0.0,
        tags: str | None = None,
        sql: str | None = None,
    ) -> list[Received]:
        nodes = holding((await self.route(topic)).nodes or [])
        out: list[Received] = []
        for i, node in enumerate(nodes):
            if len(out) >= max_messages:
                break
            waits = wait if i == len(nodes) - 1 and not out else 0.0
            req = _receive_request(group, topic, max_messages - len(out), invisible, waits, tags, sql)
            queue = QueueRef(node.name, node.address, 0)
            resp = await self._group_call(topic, queue, "Receive", req, reads=False, timeout=self.timeout + req.wait_ms / 1000)
            out += [_received(r, node.name, node.address) for r in resp.messages]
        return out

    async def ack(self: Any, group: str, topic: str, receipts: Sequence[str | Received]) -> list[str]:
        n, calls = _ack_requests(group, topic, receipts)
        errors = _unreadable_receipts(receipts)
        for idx, where, queue, req in calls:
            resp = await self._group_call(where, queue, "Ack", req, reads=False)
            for i, res in zip(idx, resp.results):
                errors[i] = "" if res.ok else res.error
        return errors

    async def change_invisible(self: Any, group: str, topic: str, receipt: str | Received, invisible: float) -> str:
        where, queue, req = _change_invisible_request(group, topic, receipt, invisible)
        resp = await self._group_call(where, queue, "ChangeInvisible", req, reads=False)
        return str(resp.receipt_handle)

    async def nack(self: Any, group: str, topic: str, receipt: str | Received) -> None:
        await self.change_invisible(group, topic, receipt, 0)

    async def update_group(
        self: Any,
        group: str,
        *,
        max_deliveries: int = 0,
        backoff: Sequence[float] = (),
        exponential: tuple[float, float, float] | None = None,
        fifo: bool | None = None,
    ) -> None:
        req = _update_group_request(group, max_deliveries, backoff, exponential, fifo)
        for node in (await self.route("", refresh=True)).nodes:
            await self._call(node.address, "UpdateGroup", req, node=node.name)
