"""Message-level consumption on the data plane (broker/pop.py): Receive (with long polling),
Ack, ChangeInvisible, and a group's retry policy. Served by a group's master only: a follower
answers UNAVAILABLE, which sends the client to the master, as a commit does."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import TYPE_CHECKING

import grpc

from ..broker.pop import Delivery, PopUnavailable, ReceiptExpired, dlq_topic, retry_topic
from ..broker.retry_policy import DEFAULT_NEXT, RetryPolicy
from ..record import codec
from ..record.receipt import Receipt
from ..v1 import msgstore_pb2 as pb
from . import validation as v
from .convert import message_to_pb
from .scheduled import TAKING_OFFICE_S, broker_taking_office

if TYPE_CHECKING:
    from .member import Member

MAX_INVISIBLE_MS = 12 * 3_600_000  # RocketMQ's limit too
MAX_RECEIVE = 1000


def _received(d: Delivery) -> pb.ReceivedMessage:
    m = message_to_pb(d.message)
    m.topic = d.topic
    return pb.ReceivedMessage(message=m, receipt_handle=d.receipt, attempt=d.attempt, invisible_until_ms=d.invisible_until)


def group_policy(entry: dict) -> pb.GroupPolicy:
    """A group's entry in subscriptionGroup.json as the API shows it."""
    p = RetryPolicy.of_group(entry)
    out = pb.GroupPolicy(fifo=bool(entry.get("consumeMessageOrderly")), max_deliveries=p.max_deliveries)
    if p.initial_ms > 0:
        out.exponential_initial_ms, out.exponential_max_ms, out.exponential_multiplier = p.initial_ms, p.max_ms, p.multiplier
    else:
        out.backoff_ms.extend(p.next_ms)
    return out


MAX_TAKING_OFFICE_S = 15.0  # a receive with a long deadline waits up to this (scheduled.TAKING_OFFICE_S at least)


class PopHandlers:
    """Mixed into the data plane: ``self.server``, ``self._ready``."""

    server: Member

    async def _pop_master(self, context) -> None:
        await self._ready(context)  # type: ignore[attr-defined]
        broker = self.server.broker
        left = context.time_remaining()  # a master just promoted loads its deliveries: waited for within the call's deadline
        wait = TAKING_OFFICE_S if left is None else max(TAKING_OFFICE_S, min(MAX_TAKING_OFFICE_S, left - 1.0))
        if broker is None or not self.server._broker_delivers() or not await broker_taking_office(self.server, wait):
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, "this node is not its group's master (or is just taking office): receive on the master"
            )

    def _receipts(self, handles, group: str, topic: str) -> list[Receipt]:
        """Every handle as a Receipt; InvalidArgument naming the first that is not one of ours."""
        out = []
        for i, r in enumerate(self._each_receipt(handles, group, topic)):
            if isinstance(r, str):
                raise v.InvalidArgument(f"receipt_handles[{i}]", r)
            out.append(r)
        return out

    def _each_receipt(self, handles, group: str, topic: str) -> list[Receipt | str]:
        """Each handle as a Receipt, or why it is not one this node gave out for ``group``/``topic``."""
        out: list[Receipt | str] = []
        node = self.server.replica.group if self.server.replica is not None else self.server.node_name
        for text in handles:
            try:
                r = Receipt.decode(text)
            except ValueError as e:
                out.append(str(e))
                continue
            if r.group != group:
                out.append(f"is a delivery to group {r.group}, not {group}")
            elif r.topic != topic and r.topic != retry_topic(group, topic):
                out.append(f"is a delivery of topic {r.topic}, not {topic}")
            elif r.node != node:
                out.append(f"was given out by {r.node}; this node is {node}")
            else:
                out.append(r)
        return out

    async def Receive(self, request: pb.ReceiveRequest, context) -> pb.ReceiveResponse:
        group = v.check_group(request.group)
        topic = v.check_known_topic(self.server.store, v.check_topic(request.topic))
        n = request.max_messages or 32
        v.check_range(n, "max_messages", 1, MAX_RECEIVE)
        if request.invisible_ms <= 0:  # (0 used to mean 30 s: a client that forgot it was never told)
            raise v.InvalidArgument(
                "invisible_ms", f"required: how long a received message stays invisible, 1 ms to 12 h (got {request.invisible_ms})"
            )
        invisible = v.check_range(request.invisible_ms, "invisible_ms", 1, MAX_INVISIBLE_MS)
        wait_ms = v.check_range(request.wait_ms, "wait_ms", 0, 60_000)
        for made in (retry_topic(group, topic), dlq_topic(group)):
            err = codec.topic_error(made)
            if err:
                raise v.InvalidArgument("group", f"with topic {topic} it names {made[:40]}...: {err}")
        selected = v.check_filter(request.tag_filter, request.sql_filter, self.server.store.config.enablePropertyFilter)
        await self._pop_master(context)
        server = self.server
        pop = server.broker.pop  # type: ignore[union-attr]
        store = server.store
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + wait_ms / 1000
        # every queue the topic has (a queue gets its consume queue with its first message)
        queues = [(topic, q) for q in range(server.queue_count(topic))] + [(retry_topic(group, topic), 0)]
        while True:
            futures = [(t, q, server.waiters.register(t, q)) for t, q in queues] if wait_ms else []  # before the look
            try:
                try:
                    got = await loop.run_in_executor(
                        server.executor, pop.receive, group, topic, n, invisible, store.clock.now_ms(), selected
                    )
                except PopUnavailable as e:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, f"nothing received: {e}")
                left = deadline - time.monotonic()
                if got or left <= 0 or server.stopping:
                    return pb.ReceiveResponse(messages=[_received(d) for d in got], node=server.node_name)
                due = pop.fifo_next_due(store.clock.now_ms())  # a lapsed FIFO message comes back with no arrival
                if due is not None:
                    left = min(left, due / 1000 + 0.001)
                await asyncio.wait([f for _t, _q, f in futures], timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t, q, f in futures:
                    server.waiters.unregister(t, q, f)

    async def Ack(self, request: pb.AckRequest, context) -> pb.AckResponse:
        group = v.check_group(request.group)
        topic = v.check_topic(request.topic)
        if not 1 <= len(request.receipt_handles) <= MAX_RECEIVE:
            raise v.InvalidArgument("receipt_handles", f"must hold 1 to {MAX_RECEIVE} handles, got {len(request.receipt_handles)}")
        # each handle its own result: one that is not a receipt of ours fails alone, named, and the rest are acknowledged
        each = self._each_receipt(request.receipt_handles, group, topic)
        receipts = [r for r in each if not isinstance(r, str)]
        await self._pop_master(context)
        done: list[str] = []
        if receipts:
            try:
                done = await asyncio.get_running_loop().run_in_executor(self.server.executor, self.server.broker.pop.ack, receipts)  # type: ignore[union-attr]
            except PopUnavailable as e:
                await context.abort(grpc.StatusCode.UNAVAILABLE, f"nothing acknowledged: {e}")
        answers = iter(done)
        errors = [f"receipt_handle: {r}" if isinstance(r, str) else next(answers) for r in each]
        return pb.AckResponse(
            results=[pb.AckResult(receipt_handle=h, ok=not err, error=err) for h, err in zip(request.receipt_handles, errors)]
        )

    async def ChangeInvisible(self, request: pb.ChangeInvisibleRequest, context) -> pb.ChangeInvisibleResponse:
        group = v.check_group(request.group)
        topic = v.check_topic(request.topic)
        v.check_range(request.invisible_ms, "invisible_ms", 0, MAX_INVISIBLE_MS)
        try:
            (receipt,) = self._receipts([request.receipt_handle], group, topic)
        except v.InvalidArgument as e:
            raise v.InvalidArgument("receipt_handle", str(e).split(": ", 1)[1]) from None
        await self._pop_master(context)
        broker = self.server.broker
        assert broker is not None
        invisible = request.invisible_ms
        if invisible == 0:  # a nack: back after the group's backoff for this delivery (the only wait it gets)
            policy = RetryPolicy.of_group(self.server.store.groups.groups.get(group))
            # (its last delivery: to the DLQ at once, not after a backoff that leads nowhere)
            invisible = policy.backoff_ms(receipt.attempt) if receipt.attempt < policy.max_deliveries else 0
        try:
            handle, until = await asyncio.get_running_loop().run_in_executor(
                self.server.executor, broker.pop.change_invisible, receipt, invisible, self.server.store.clock.now_ms()
            )
        except ReceiptExpired as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"receipt_handle: {e}")
        except PopUnavailable as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"invisibility not changed: {e}")
        broker.wakeup()  # (its new time may be the earliest)
        return pb.ChangeInvisibleResponse(receipt_handle=handle, invisible_until_ms=until)

    async def UpdateGroup(self, request: pb.UpdateGroupRequest, context) -> pb.UpdateGroupResponse:
        group = v.check_group(request.group)
        v.check_range(request.max_deliveries, "max_deliveries", 0, 1001)
        for i, ms in enumerate(request.backoff_ms):
            v.check_range(ms, f"backoff_ms[{i}]", 0, MAX_INVISIBLE_MS)
        if request.exponential_initial_ms:
            if request.backoff_ms:
                raise v.InvalidArgument("backoff_ms", "give backoff_ms or the exponential_* fields, not both")
            v.check_range(request.exponential_initial_ms, "exponential_initial_ms", 1, MAX_INVISIBLE_MS)
            v.check_range(
                request.exponential_max_ms or request.exponential_initial_ms,
                "exponential_max_ms",
                request.exponential_initial_ms,
                MAX_INVISIBLE_MS,
            )
            if request.exponential_multiplier and not 1.0 <= request.exponential_multiplier <= 100.0:
                raise v.InvalidArgument("exponential_multiplier", f"must be between 1 and 100, got {request.exponential_multiplier}")
        await self._pop_master(context)
        groups = self.server.store.groups
        groups.ensure(group)
        with groups.lock:
            entry = groups.groups[group]
            current = RetryPolicy.of_group(entry)
            most = request.max_deliveries or current.max_deliveries
            if request.exponential_initial_ms:
                initial = request.exponential_initial_ms
                policy = RetryPolicy(
                    most, DEFAULT_NEXT, initial, request.exponential_max_ms or initial, request.exponential_multiplier or 2.0
                )
            elif request.backoff_ms:
                policy = RetryPolicy(most, tuple(request.backoff_ms))
            else:
                policy = replace(current, max_deliveries=most)
            entry.update(policy.as_entry())
            if request.HasField("fifo") and bool(entry.get("consumeMessageOrderly")) != request.fifo:
                entry["consumeMessageOrderly"] = request.fifo
                pop = self.server.broker.pop  # type: ignore[union-attr]
                with pop.lock:
                    pop.fifo.forget(group)  # its FIFO state starts over from its position
            groups.data_version += 1
            groups.changed()
        await asyncio.get_running_loop().run_in_executor(self.server.executor, groups.persist)
        return pb.UpdateGroupResponse(policy=group_policy(entry))

    async def DeleteGroup(self, request: pb.DeleteGroupRequest, context) -> pb.DeleteGroupResponse:
        group = v.check_group(request.group)
        await self._pop_master(context)
        store = self.server.store
        loop = asyncio.get_running_loop()
        deleted = await loop.run_in_executor(self.server.executor, store.groups.delete, group)
        pop = self.server.broker.pop  # type: ignore[union-attr]
        with pop.lock:
            pop.fifo.forget(group)  # (a FIFO group's state: it orders no more)
        if request.remove_offsets:
            deleted = bool(await loop.run_in_executor(self.server.executor, store.offsets.drop_group, group)) or deleted
        return pb.DeleteGroupResponse(deleted=deleted)
