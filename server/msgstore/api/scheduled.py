"""Delayed delivery on the data plane: the send path hands a message that asks for a delay to
the broker's scheduler (broker/scheduling.py), and ``Recall`` cancels a timer message.

The compiled send path recognises, where it parses each entry's properties and topic, the
entries that are the broker's (``BROKER_HANDLED``: a delay or timer property, a transaction's
half, a system topic) and hands the request to the protobuf path; ordinary sends pay a few
comparisons per property for this, and a body's content never changes the path.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import grpc

from ..acl.identity import CALLER
from ..broker import DelayRefused, RecallHandle, Scheduler
from ..broker.delivery import ensure_topic
from ..broker.scheduling import SCHEDULE_PROPERTIES
from ..broker.system_topics import PROP_UNIQ_KEY, SYSTEM_TOPIC_PREFIXES, SYSTEM_TOPICS, is_system_topic
from ..broker.timer import RecallFailed, TooLate
from ..broker.transactions import HALF_TOPIC, PROP_PRODUCER_GROUP, PROP_TRANSACTION_PREPARED, is_half, to_half
from ..record import codec
from ..store import PutStatus
from ..store.limits import ResourceLimit
from ..v1 import msgstore_pb2 as pb
from . import validation as v

if TYPE_CHECKING:
    from .member import Member

TRANSACTION_PREFIX = "tx:"  # (in the handles map: a transaction id, not a recall handle)

# (property names, topics, topic prefixes) that make an entry the broker's: Scheduler.wants,
# is_half and is_system_topic, as the compiled transcoder matches them (wire/_native.pyx)
BROKER_HANDLED: tuple[tuple[bytes, ...], tuple[bytes, ...], tuple[bytes, ...]] = (
    tuple(k.encode() for k in (*SCHEDULE_PROPERTIES, PROP_TRANSACTION_PREPARED)),
    tuple(t.encode() for t in SYSTEM_TOPICS),
    tuple(p.encode() for p in SYSTEM_TOPIC_PREFIXES),
)


def _check_destination(server: Member, m: codec.Message, i: int) -> None:
    """The real topic and queue of a message that waits in a system topic: checked now, not
    when it is due (or committed)."""
    if server.store.topics.get(m.topic) is None and not server.store.config.autoCreateTopicEnable:
        raise v.InvalidArgument(f"entries[{i}].topic", f"topic {m.topic} does not exist (autoCreateTopicEnable is off)")
    limit = server.queue_count(m.topic)
    if m.queue_id >= limit:
        raise v.InvalidArgument(f"entries[{i}].queue_id", f"{m.queue_id} is out of range: topic {m.topic} has {limit} queues")


@dataclass(frozen=True)
class Scheduled:
    """What a delayed entry's send result says: where it will be delivered, the id it will
    carry there (its UNIQ_KEY), and a timer message's recall handle."""

    topic: str
    queue_id: int
    uniq_key: str
    recall_handle: str = ""


def schedule_entries(server: Member, msgs: list[codec.Message]) -> dict[int, str | Scheduled]:
    """Move every message that asks for a delay to its system topic (in place): by entry
    index, a half message's transaction handle, or where a delayed one goes (and a timer
    message's recall handle). Raises InvalidArgument naming the field."""
    handles: dict[int, str | Scheduled] = {}
    for i, m in enumerate(msgs):
        if is_half(m):
            handles[i] = TRANSACTION_PREFIX + _half(server, msgs, i)
            continue
        if not Scheduler.wants(m):
            continue
        broker = server.broker
        if broker is None:
            raise v.InvalidArgument(f"entries[{i}].properties", "delayed delivery is not running on this node yet")
        _check_destination(server, m, i)
        try:
            msgs[i], handle = broker.scheduler.prepare(m)
        except DelayRefused as e:
            field = f"entries[{i}].topic" if e.field == "topic" else f"entries[{i}].properties[{e.field!r}]"
            raise v.InvalidArgument(field, e.reason) from None
        broker.ensure_topic_for(msgs[i].topic)
        if msgs[i].topic != m.topic and server.store.topics.get(m.topic) is None:  # created now, as a send would: a
            try:  # pull before it is due finds it empty, not missing
                server.store.create_topic(m.topic, server.queue_count(m.topic))
            except ResourceLimit:
                pass  # (created, or refused by name, when it is due)
        recall = replace(handle, group=server.replica.group if server.replica is not None else server.node_name).encode() if handle else ""
        if msgs[i].topic != m.topic:  # (a level of 0 or a time already past: an ordinary message)
            handles[i] = Scheduled(m.topic, m.queue_id, msgs[i].properties.get(PROP_UNIQ_KEY, ""), recall)
    return handles


def _half(server: Member, msgs: list[codec.Message], i: int) -> str:
    """A transactional half message to its system topic (in place); its transaction id."""
    m = msgs[i]
    if is_system_topic(m.topic):
        raise v.InvalidArgument(f"entries[{i}].topic", f"{m.topic} is a system topic")
    group = m.properties.get(PROP_PRODUCER_GROUP, "")
    if not group:
        raise v.InvalidArgument(
            f"entries[{i}].properties['PGROUP']", "a transactional message names its producer group (its check-backs go there)"
        )
    v.check_group(group, f"entries[{i}].properties['PGROUP']")
    if any(k in m.properties for k in ("DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")):
        raise v.InvalidArgument(f"entries[{i}].properties", "a transactional message cannot be delayed too")
    if server.broker is None:
        raise v.InvalidArgument(f"entries[{i}].properties", "transactions are not running on this node yet")
    _check_destination(server, m, i)
    uniq = m.properties.get(PROP_UNIQ_KEY) or uuid.uuid4().hex.upper()
    msgs[i] = to_half(replace(m, properties={**m.properties, PROP_UNIQ_KEY: uniq}))
    ensure_topic(server.store, HALF_TOPIC, 1)
    group_name = server.replica.group if server.replica is not None else server.node_name
    return RecallHandle(m.topic, 0, uniq, group_name).encode()


TAKING_OFFICE_S = 3.0  # how long a call waits, at least, for a just-promoted master's broker services


async def broker_taking_office(server: Member, timeout: float = TAKING_OFFICE_S) -> bool:
    """The broker services are loaded on this master (they are within a second of a
    promotion: asked to look now, and awaited that long)."""
    broker = server.broker
    if broker is None:
        return False
    if broker.active:
        return True
    if not server._broker_master():
        return False
    broker.wakeup()
    deadline = asyncio.get_running_loop().time() + timeout
    while not broker.active and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
    return broker.active


class RecallHandlers:
    """Mixed into the data plane: ``self.server``."""

    server: Member

    async def Recall(self, request: pb.RecallRequest, context) -> pb.RecallResponse:
        await self._ready(context)  # type: ignore[attr-defined]
        try:
            handle = RecallHandle.decode(request.recall_handle)
        except ValueError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"recall_handle: {e}")
        CALLER.get().require("topic", handle.topic, "pub")
        group = self.server.replica.group if self.server.replica is not None else self.server.node_name
        if handle.group != group:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"recall_handle: names group {handle.group}, this node is of {group}")
        broker = self.server.broker
        if broker is None or not self.server._broker_delivers() or not await broker_taking_office(self.server):
            # UNAVAILABLE: the client looks for the group's master again (a failover) and asks it
            await context.abort(grpc.StatusCode.UNAVAILABLE, "this node is not its group's master: recall on the master")
        try:
            res = await asyncio.get_running_loop().run_in_executor(self.server.executor, broker.recall, handle)
        except TooLate as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"too late to recall: {e}")
        except RecallFailed as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"the recall could not be stored: {e}")
        replica = self.server.replica
        if replica is not None and replica.waits_for_followers:  # SYNC: a failover must not forget the recall
            status = await replica.await_followers(res.phy_offset + sum(res.sizes))
            if status is not PutStatus.PUT_OK:
                await context.abort(grpc.StatusCode.UNAVAILABLE, f"the recall is stored but not yet on enough members ({status.name})")
        return pb.RecallResponse()
