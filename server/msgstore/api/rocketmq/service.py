"""apache.rocketmq.v2.MessagingService, served on the same port as msgstore.v1.

Every call is translated into the msgstore.v1 request that does the same thing and handed to
the same handler (``DataPlane``): one implementation of sending, receiving, acknowledging,
transactions, offsets and routes behind two protocols. What differs is only the shape of the
answer: v2 puts a ``Status`` (StatusCode.md's codes) in every response instead of failing the
call, so refusals from the v1 handlers are caught here and turned into that status.

How RocketMQ's model maps onto ours (docs/store-format.md §18):
- a RocketMQ broker is a replica group (a node without replicas is a group of one) and its
  master's address is the broker's endpoint; message queues are the topic's queues on it;
- receive/ack/change-invisible are the pop semantics of broker/pop.py (a consumer receives from
  every queue of the topic on that broker, so an assignment names the broker, queue id -1);
- a transactional message's producer group is its topic (RocketMQ 5 producers have none).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import message_factory

from ...acl.identity import CALLER, Denied, NotReady
from ...broker.pop import PopUnavailable, ReceiptExpired
from ...record.recall_handle import RecallHandle
from ...record.receipt import Receipt
from ...v1 import msgstore_pb2 as pb
from .. import permissions
from .. import validation as v
from ..auth import peer_host
from . import messages
from .context import CallContext, client_id
from .forwarding import Forwarder
from .protocol import SERVICE
from .protocol import definition as d
from .protocol import service as s
from .renewal import Renewals
from .status import SEND_CODES, Refusal, field_code, send_refusal, status
from .telemetry import Telemetry

if TYPE_CHECKING:
    from ..member import Member
    from ..servicer import DataPlane

log = logging.getLogger(__name__)

ALL_TYPES = (d.NORMAL, d.FIFO, d.DELAY, d.TRANSACTION)
TYPE_OF = {"NORMAL": d.NORMAL, "FIFO": d.FIFO, "DELAY": d.DELAY, "TRANSACTION": d.TRANSACTION}  # a topic's message.type (MIXED: every type)
MAX_BATCH = 1024
DEFAULT_POLL_MS = 20_000
POLL_RESERVE_MS = 500  # a long poll answers this long before the caller's deadline


def endpoints(address: str) -> Any:
    """``host:port`` → v2 Endpoints (IPv4, IPv6 or a domain name)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if ":" in host:
        scheme = d.IPv6
    elif host.replace(".", "").isdigit() and host.count(".") == 3:
        scheme = d.IPv4
    else:
        scheme = d.DOMAIN_NAME
    return d.Endpoints(scheme=scheme, addresses=[d.Address(host=host, port=int(port or 0))])


def _resource(r: Any, field: str, check: Callable[[str, str], str]) -> str:
    if r.resource_namespace:
        raise Refusal(d.BAD_REQUEST, f"{field}.resource_namespace: namespaces are not supported (got {r.resource_namespace[:40]!r})")
    try:
        return check(r.name, f"{field}.name")
    except v.InvalidArgument as e:
        raise Refusal(field_code(field.rsplit(".", 1)[-1]), str(e)) from None


def topic_of(r: Any, field: str = "topic") -> str:
    return _resource(r, field, v.check_topic)


def group_of(r: Any, field: str = "group") -> str:
    return _resource(r, field, v.check_group)


def _duration_ms(dur: Any) -> int:
    return dur.seconds * 1000 + dur.nanos // 1_000_000


def _group_of_receipt(handle: str) -> str:
    """The replica group that gave out a receipt ('' when it is not one: answered here)."""
    try:
        return Receipt.decode(handle).node
    except ValueError:
        return ""


def _group_of_handle(handle: str) -> str:
    """The replica group of a transaction id or recall handle ('' when it is not one)."""
    try:
        return RecallHandle.decode(handle).group
    except ValueError:
        return ""


def _reason(error: str) -> str:
    """A msgstore.v1 result's error without the field it names (said again before it)."""
    return error.removeprefix("receipt_handle: ")


def _failure(name: str, e: Exception, count_error: Callable[[str, str], None]) -> Any:
    """The v2 status a call that raised ``e`` answers with (and the error it counts)."""
    if isinstance(e, Refusal):
        code, message = e.code, e.message
    elif isinstance(e, v.InvalidArgument):
        code, message = field_code(e.field), str(e)
    elif isinstance(e, v.TopicNotFound):
        code, message = d.TOPIC_NOT_FOUND, str(e)
    elif isinstance(e, Denied):
        code, message = d.UNAUTHORIZED if e.unauthenticated else d.FORBIDDEN, e.message
    else:  # our bug: say so in the status, keep serving
        log.error("v2 %s failed", name, exc_info=e)
        code, message = d.INTERNAL_ERROR, f"internal error: {type(e).__name__}: {e}"
    count_error(f"v2.{name}", d.Code.Name(code))
    return status(code, message)


# without an access point these are served where they land, as before the relay
DIRECT_HERE = frozenset({"Pull", "CommitOffset", "GetCommittedOffset", "GetOffsetByTime", "GetQueueOffsets"})
# v1 calls a v2 call becomes that refuse, before doing anything, on a member that is not (or no
# longer) its group's master: sent on to the master when that happens between the look and the call
AGAIN_ON_MASTER = frozenset({"Receive", "Pull", "CommitOffset", "GetCommittedOffset", "GetOffsetByTime", "GetQueueOffsets"})


class MessagingService:
    def __init__(self, server: Member, data: DataPlane):
        self.server = server
        self.data = data
        self.telemetry = Telemetry(self)
        self.forwarder = Forwarder(self)
        self.renewals = Renewals(self)
        self._turn = itertools.count()

    @property
    def store(self):
        return self.server.store

    def authorize(self, method: str, request: Any, context: grpc.aio.ServicerContext) -> None:
        """The caller signed in and may make this call (acl/, permissions.v2_needs), else a
        Refusal: UNAUTHORIZED (who it is is unknown) or FORBIDDEN naming user, resource, action.
        The caller is kept for the msgstore.v1 handlers the call runs through."""
        try:
            identity = self.server.authenticator.identify(context.invocation_metadata(), peer_host(context)[0])
            if request is not None:
                permissions.require(identity, permissions.v2_needs(method, request))
        except Denied as e:
            raise Refusal(d.UNAUTHORIZED if e.unauthenticated else d.FORBIDDEN, e.message) from None
        except NotReady as e:  # (a node that cannot serve now: the client tries another)
            raise Refusal(d.INTERNAL_SERVER_ERROR, str(e)) from None
        CALLER.set(identity)

    # ------------------------------------------------------------------ routes

    async def _brokers(self, topic: str, context, asked: Any = None) -> list[tuple[Any, list[int]]]:
        """(v2 Broker, queue ids) for each replica group: its ready master with the newest epoch
        (a peer may still remember a deposed one as master). A group whose master is gone and
        not yet replaced keeps its queues, at the address its followers still follow: sends
        there fail and are retried, but a FIFO message group keeps hashing to the same queue
        (dropping the group would move every message group of the topic)."""
        route = await self.data.GetRoute(pb.GetRouteRequest(topic=topic), CallContext(context))
        masters: dict[str, pb.NodeRoute] = {}
        orphaned: dict[str, tuple[str, list[int]]] = {}
        for n in route.nodes:
            group = n.group or n.name
            if n.ready and n.role == "MASTER" and not n.fenced:
                if group not in masters or n.epoch > masters[group].epoch:
                    masters[group] = n
            elif n.ready and n.master_address and n.queue_ids:
                orphaned.setdefault(group, (n.master_address, list(n.queue_ids)))
        out = {group: (n.address, list(n.queue_ids)) for group, n in masters.items()}
        for group, known in orphaned.items():
            out.setdefault(group, known)
        if not masters:
            raise Refusal(d.HA_NOT_AVAILABLE, f"no master serving topic {topic} is ready now (starting, or a failover in progress)")
        access = self.server.options.access_points
        if access is not None:  # every broker through the access point the client used (or the configured one)
            via = asked if asked is not None and asked.addresses else (endpoints(access[0]) if access else None)
            if via is not None:
                return [(d.Broker(name=group, id=0, endpoints=via), qids) for group, (_a, qids) in sorted(out.items())]
        return [(d.Broker(name=group, id=0, endpoints=endpoints(address)), qids) for group, (address, qids) in sorted(out.items())]

    async def _on_master(self, method: str, request: Any, context, here: Callable, group: str = "") -> Any:
        """``here(request)`` on the master of ``group`` (default this node's): served here when
        this node is it, else passed on (relay.py) — a client still sending to a deposed
        master, or one that reached a follower through an access point, is served without an
        error."""
        ctx = CallContext(context)
        own = self.server._group_name()
        group = group or own
        if group == own and method in DIRECT_HERE and self.server.options.access_points is None:
            return await here(request, ctx)  # (direct routes: served where the client chose, followers' reads included)
        answer = await self.server.relay.on_master(group, method, request, ctx)
        if answer is not None:
            return answer
        try:
            return await here(request, ctx)
        except Refusal:
            # this node stopped taking writes between the look and the call (a switchover fenced
            # it): a refusal from before anything was done (a receive checks first; a send says
            # so) goes, once, to the group's master, as a call reaching a follower would have
            if group != own or self.server._broker_delivers() or not (method in AGAIN_ON_MASTER or ctx.not_done):
                raise
        answer = await self.server.relay.on_master(group, method, request, ctx)
        return answer if answer is not None else await here(request, ctx)

    async def _queue_group(self, queue: Any) -> str:
        """The replica group a call on ``queue`` (a MessageQueue from a route or an assignment)
        is for: its broker's name, which is the group. Through an access point every broker
        has the same endpoints, so the connection may reach any node; a name no route knows
        (another client's convention) means this node's group, as before."""
        own = self.server._group_name()
        name = queue.broker.name
        if not name or name == own or self.server.options.access_points is None:
            return own
        _address, known = await self.server.relay.master_of(name, reads=True)
        return name if known else own

    async def _fifo_placement(self, topic: str, request: Any, context) -> tuple[str, list[int]] | None:
        """Through an access point with several replica groups, a FIFO message group's queue is
        chosen over every group's queues, as RocketMQ's proxy does: it stays in one queue
        whichever node the client's connection reaches. (group, queue per message); None:
        this node's group decides (no access point, one group, or no message group)."""
        if self.server.options.access_points is None:
            return None
        keys = [m.system_properties.message_group if m.system_properties.HasField("message_group") else "" for m in request.messages]
        if not any(keys):
            return None
        brokers = await self._brokers(topic, context)
        if len(brokers) < 2:
            return None
        pairs = [(b.name, q) for b, qids in brokers for q in qids]
        first = pairs[zlib.crc32(next(k for k in keys if k).encode()) % len(pairs)]
        out = []
        for i, key in enumerate(keys):
            group, q = pairs[zlib.crc32(key.encode()) % len(pairs)] if key else first
            if group != first[0]:
                raise Refusal(d.BAD_REQUEST, f"messages[{i}].system_properties.message_group: a batch goes to one message group")
            out.append(q)
        return first[0], out

    async def _elsewhere(self, topic: str, request: Any, context) -> tuple[str, list[int]] | None:
        """Through an access point, a send for a topic this node's group does not have (created
        on other groups only) goes to a group that has it, its queues taken in turn; None:
        stored in this node's group, as always."""
        if self.server.options.access_points is None:
            return None
        try:
            v.check_known_topic(self.store, topic)
            return None
        except v.TopicNotFound:
            pass
        own = self.server._group_name()
        holders = [(b.name, qids) for b, qids in await self._brokers(topic, context) if qids and b.name != own]
        if not holders:
            return None  # (refused here by name, as before)
        group, qids = holders[next(self._turn) % len(holders)]
        return group, [qids[next(self._turn) % len(qids)] for _ in request.messages]

    def _known(self, topic: str, field: str = "topic.name") -> str:
        """RocketMQ's proxy answers TOPIC_NOT_FOUND for a topic no send would create."""
        try:
            return v.check_known_topic(self.store, topic)
        except v.TopicNotFound:
            raise Refusal(d.TOPIC_NOT_FOUND, f"{field}: no topic {topic} (autoCreateTopicEnable is off: create it first)") from None

    def _known_here(self, topic: str, group: str) -> str:
        """The topic checked here when this node's group serves the call (another group's
        master checks it there)."""
        return self._known(topic, "message_queue.topic.name") if group == self.server._group_name() else topic

    async def _routed(self, topic: str, context, asked: Any = None) -> list[tuple[Any, list[int]]]:
        """The topic's brokers (``_brokers``), TOPIC_NOT_FOUND when none has it and no send would
        create it: a topic created on some groups only is found through any node."""
        try:
            self._known(topic)
        except Refusal as missing:
            try:
                brokers = await self._brokers(topic, context, asked)
            except v.TopicNotFound:
                raise missing from None  # (no node has it: said for the request's field)
            if not any(qids for _b, qids in brokers):
                raise missing from None
            return brokers
        return await self._brokers(topic, context, asked)

    def _queue_terms(self, topic: str) -> tuple[int, tuple[int, ...]]:
        """The route's permission and accepted message types, from the topic's ``perm`` and
        ``message.type`` attribute as this node has them (RocketMQ 5's proxy reads the same)."""
        tc = self.store.topics.get(topic)
        if tc is None:
            return d.READ_WRITE, ALL_TYPES
        readable, writable = bool(tc.perm & 4), bool(tc.perm & 2)  # (RocketMQ's PermName bits; 1 is "inherit")
        permission = d.READ_WRITE if readable and writable else d.READ if readable else d.WRITE if writable else d.NONE
        one = TYPE_OF.get(tc.message_type)
        return permission, (one,) if one is not None else ALL_TYPES

    async def QueryRoute(self, request, context):
        topic = topic_of(request.topic)
        queues = []
        permission, types = self._queue_terms(topic)
        for broker, qids in await self._routed(topic, context, request.endpoints):
            for q in qids:
                queues.append(
                    d.MessageQueue(topic=d.Resource(name=topic), id=q, permission=permission, broker=broker, accept_message_types=types)
                )
        return s.QueryRouteResponse(status=status(), message_queues=queues)

    async def QueryAssignment(self, request, context):
        topic = topic_of(request.topic)
        group_of(request.group)
        assignments = [
            d.Assignment(
                message_queue=d.MessageQueue(
                    topic=d.Resource(name=topic), id=-1, permission=d.READ_WRITE, broker=broker, accept_message_types=ALL_TYPES
                )
            )
            for broker, qids in await self._routed(topic, context, request.endpoints)
            if qids  # (a group without the topic would only refuse it)
        ]
        return s.QueryAssignmentResponse(status=status(), assignments=assignments)

    async def Heartbeat(self, request, context):
        if request.HasField("group") and request.group.name:
            group_of(request.group)
        await self.data._ready(CallContext(context))
        self.renewals.hear(client_id(context))
        return s.HeartbeatResponse(status=status())

    async def NotifyClientTermination(self, request, context):
        self.renewals.forget_client(client_id(context))  # its deliveries lapse and go to others
        return s.NotifyClientTerminationResponse(status=status())

    # ------------------------------------------------------------------ send

    def _queue_for(self, topic: str, message: Any) -> int:
        n = self.server.queue_count(topic)
        if n <= 0:
            raise Refusal(d.FORBIDDEN, f"topic {topic} has no write queues on this node")
        mg = message.system_properties.message_group
        if message.system_properties.HasField("message_group") and mg:
            return zlib.crc32(mg.encode()) % n  # one message group, one queue: its order holds
        return next(self._turn) % n

    async def SendMessage(self, request, context):
        if not 1 <= len(request.messages) <= MAX_BATCH:
            raise Refusal(d.BAD_REQUEST, f"messages: must hold 1 to {MAX_BATCH} messages, got {len(request.messages)}")
        topic = topic_of(request.messages[0].topic, "messages[0].topic")
        for i, m in enumerate(request.messages):
            if i and topic_of(m.topic, f"messages[{i}].topic") != topic:
                raise Refusal(d.BAD_REQUEST, f"messages[{i}].topic: a batch goes to one topic ({topic}), got {m.topic.name}")
        placed = await self._fifo_placement(topic, request, context) or await self._elsewhere(topic, request, context)
        replica = self.server.replica
        if placed is None and (replica is None or replica.is_master):
            # stored in this node's group, whose master this is: refused here, as RocketMQ's proxy
            # refuses it (a follower's copy of the topics may be a second old: its master says it)
            self._known(topic, "messages[0].topic.name")
        self._check_types(topic, request)  # (wherever it goes: nothing where this node lacks the topic)
        group, queues = placed if placed is not None else (self.server._group_name(), [self._queue_for(topic, m) for m in request.messages])
        if any(messages.compressed(m) for m in request.messages):  # (inflating is work: off the loop)
            entries = await asyncio.get_running_loop().run_in_executor(self.server.executor, self._entries, request, topic, queues)
        else:
            entries = self._entries(request, topic, queues)
        try:
            answer = await self._on_master("Send", pb.SendRequest(entries=entries), context, self.data.Send, group)
        except v.InvalidArgument as e:
            if "not running on this node" in str(e):  # (starting: a moment later it is; the client retries)
                raise Refusal(d.INTERNAL_SERVER_ERROR, str(e)) from None
            raise send_refusal(e) from None
        resp = answer if isinstance(answer, pb.SendResponse) else pb.SendResponse.FromString(bytes(answer))
        out = []
        for m, r in zip(request.messages, resp.results):
            code = SEND_CODES.get(r.status, d.INTERNAL_SERVER_ERROR)
            if r.status == pb.MESSAGE_ILLEGAL and r.error.endswith("does not exist"):  # (its master's answer)
                code = d.TOPIC_NOT_FOUND
            out.append(
                s.SendResultEntry(
                    status=status(code, "OK" if code == d.OK else f"{pb.SendStatus.Name(r.status)}: {r.error}"),
                    message_id=m.system_properties.message_id,
                    transaction_id=r.transaction_id,
                    offset=r.queue_offset,
                    recall_handle=r.recall_handle,
                )
            )
        failed = [e.status for e in out if e.status.code != d.OK]
        if not failed:
            top = status()
        elif len(failed) == len(out) or len(out) == 1:
            top = failed[0]
        else:
            top = status(d.MULTIPLE_RESULTS, f"{len(failed)} of {len(out)} messages were not stored: see the entries")
        return s.SendMessageResponse(status=top, entries=out)

    def _check_types(self, topic: str, request: Any) -> None:
        """A topic whose ``message.type`` is one type takes messages of that type only
        (MESSAGE_PROPERTY_CONFLICT_WITH_TYPE), as RocketMQ's proxy checks (its
        enableTopicMessageTypeCheck); MIXED or unset: every type (RocketMQ takes unset as NORMAL)."""
        tc = self.store.topics.get(topic)
        expected = TYPE_OF.get(tc.message_type) if tc is not None else None
        if expected is None:
            return
        for i, m in enumerate(request.messages):
            got = m.system_properties.message_type
            if got != expected:
                name = d.MessageType.Name(got) if got in d.MessageType.values() else str(got)
                raise Refusal(
                    d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                    f"messages[{i}].system_properties.message_type: topic {topic} takes {tc.message_type} messages only, not {name}",
                )

    def _entries(self, request: Any, topic: str, queues: list[int]) -> list[pb.SendEntry]:
        config = self.store.config
        now = self.store.clock.now_ms()
        entries, total = [], 0
        for i, (m, q) in enumerate(zip(request.messages, queues)):
            entry = messages.send_entry(m, i, topic, q, config.maxMessageSize, config.timerMaxDelaySec * 1000, now)
            total += len(entry.body)
            if total > v.MAX_REQUEST_BYTES:  # (compressed bodies: what a request may hold once inflated)
                raise Refusal(d.MESSAGE_BODY_TOO_LARGE, f"messages[{i}].body: the request is over {v.MAX_REQUEST_BYTES} bytes uncompressed")
            entries.append(entry)
        return entries

    async def RecallMessage(self, request, context):
        topic_of(request.topic)
        try:
            handle = RecallHandle.decode(request.recall_handle)
        except ValueError:
            raise Refusal(d.BAD_REQUEST, "recall_handle: not a recall handle this store gave out") from None
        forwarded = await self.forwarder.forward("RecallMessage", request, context, handle.group)
        if forwarded is not None:
            return forwarded
        await self.data.Recall(pb.RecallRequest(recall_handle=request.recall_handle), CallContext(context))
        return s.RecallMessageResponse(status=status(), message_id=handle.uniq_key)

    async def EndTransaction(self, request, context):
        topic_of(request.topic)
        # (unspecified: not known yet, as RocketMQ's proxy takes it: checked back later)
        resolution = {d.COMMIT: pb.COMMIT, d.ROLLBACK: pb.ROLLBACK, d.TRANSACTION_RESOLUTION_UNSPECIFIED: pb.UNKNOWN}.get(
            request.resolution
        )
        if resolution is None:
            raise Refusal(d.BAD_REQUEST, f"resolution: must be COMMIT or ROLLBACK, got {request.resolution}")
        forwarded = await self.forwarder.forward("EndTransaction", request, context, _group_of_handle(request.transaction_id))
        if forwarded is not None:
            return forwarded
        await self.data.EndTransaction(
            pb.EndTransactionRequest(transaction_id=request.transaction_id, resolution=resolution), CallContext(context)
        )
        return s.EndTransactionResponse(status=status())

    # ------------------------------------------------------------------ receive

    def _poll_ms(self, request, context) -> int:
        wanted = _duration_ms(request.long_polling_timeout) if request.HasField("long_polling_timeout") else DEFAULT_POLL_MS
        if wanted < 0 or wanted > v.MAX_TIMEOUT_MS:
            raise Refusal(d.ILLEGAL_POLLING_TIME, f"long_polling_timeout: must be 0 to {v.MAX_TIMEOUT_MS // 1000} s, got {wanted} ms")
        remaining = context.time_remaining()
        if remaining is not None:
            wanted = min(wanted, max(0, int(remaining * 1000) - POLL_RESERVE_MS))
        return wanted

    def _filters(self, expression: Any) -> dict[str, str]:
        """The msgstore.v1 read's ``tag_filter`` or ``sql_filter`` for a FilterExpression (a
        SQL92 one checked here, so that its error names the v2 field and the column)."""
        if expression.type == d.SQL:
            text = expression.expression
            if not self.store.config.enablePropertyFilter:
                raise Refusal(d.UNSUPPORTED, "filter_expression: SQL92 selectors are off on this store (enablePropertyFilter is false)")
            try:
                v.check_filter("", text, True, "filter_expression.expression")
            except v.InvalidArgument as e:
                raise Refusal(d.ILLEGAL_FILTER_EXPRESSION, str(e)) from None
            return {"sql_filter": text}
        return {"tag_filter": self._tag_filter(expression)}

    @staticmethod
    def _tag_filter(expression: Any) -> str:
        text = expression.expression.strip()
        if any(not t.strip() for t in text.split("||")) and text not in ("", "*"):
            raise Refusal(
                d.ILLEGAL_FILTER_EXPRESSION, f"filter_expression.expression: not a tag expression ('a || b' or '*'): {text[:60]!r}"
            )
        return text

    async def ReceiveMessage(self, request, context) -> AsyncIterator[Any]:
        group = group_of(request.group)
        where = await self._queue_group(request.message_queue)
        topic = self._known_here(topic_of(request.message_queue.topic, "message_queue.topic"), where)
        batch = request.batch_size or 32
        if not 1 <= batch <= 1000:
            raise Refusal(d.BAD_REQUEST, f"batch_size: must be 1 to 1000, got {request.batch_size}")
        renew = request.auto_renew  # renewed until the client is done with it (renewal.py)
        if request.HasField("invisible_duration"):
            invisible = _duration_ms(request.invisible_duration)
        elif renew:
            invisible = self.renewals.invisible_ms()
        else:
            raise Refusal(d.ILLEGAL_INVISIBLE_TIME, "invisible_duration: required unless auto_renew")
        if not 1 <= invisible <= 12 * 3_600_000:
            raise Refusal(d.ILLEGAL_INVISIBLE_TIME, f"invisible_duration: must be 1 ms to 12 h, got {invisible} ms")
        filters = self._filters(request.filter_expression)
        wait = self._poll_ms(request, context)
        got = await self._on_master(
            "Receive",
            pb.ReceiveRequest(group=group, topic=topic, max_messages=batch, invisible_ms=invisible, wait_ms=wait, **filters),
            context,
            self.data.Receive,
            where,
        )
        if isinstance(got, bytes):
            got = pb.ReceiveResponse.FromString(got)
        if not got.messages:
            yield s.ReceiveMessageResponse(status=status(d.MESSAGE_NOT_FOUND, "no new message"))
            return
        now = self.store.clock.now_ms()
        if renew:
            client = client_id(context)
            for r in got.messages:
                self.renewals.hold(client, group, topic, r.receipt_handle, r.invisible_until_ms, now)
        try:
            yield s.ReceiveMessageResponse(delivery_timestamp=messages._ts(now))
            for r in got.messages:
                yield s.ReceiveMessageResponse(message=messages.received(r, invisible))
            yield s.ReceiveMessageResponse(status=status())
        except BaseException:  # the stream broke: a client keeps none of an unfinished answer
            asyncio.ensure_future(self.renewals.give_back(group, topic, [r.receipt_handle for r in got.messages]))
            raise

    async def AckMessage(self, request, context):
        group = group_of(request.group)
        topic = topic_of(request.topic)
        if not 1 <= len(request.entries) <= 1000:
            raise Refusal(d.BAD_REQUEST, f"entries: must hold 1 to 1000 entries, got {len(request.entries)}")
        if self.forwarder.elsewhere(_group_of_receipt(request.entries[0].receipt_handle)):
            newest = s.AckMessageRequest()
            newest.CopyFrom(request)
            async with self.renewals.using([e.receipt_handle for e in request.entries]) as current:
                for e, r in zip(newest.entries, current):  # (a delivery renewed here before a switchover: its newest receipt)
                    e.receipt_handle = r
                forwarded = await self.forwarder.forward("AckMessage", newest, context, _group_of_receipt(current[0]))
            if forwarded is not None:
                for e, res in zip(request.entries, forwarded.entries):
                    res.receipt_handle = e.receipt_handle  # (the client's, as it sent it)
                    if res.status.code == d.OK:
                        self.renewals.release(e.receipt_handle)
                return forwarded
        firsts = [e.receipt_handle for e in request.entries]
        try:
            async with self.renewals.using(firsts) as current:
                got = await self.data.Ack(pb.AckRequest(group=group, topic=topic, receipt_handles=current), CallContext(context))
        except v.InvalidArgument as e:
            raise Refusal(d.INVALID_RECEIPT_HANDLE, str(e).replace("receipt_handles", "entries", 1)) from None
        for first, r in zip(firsts, got.results):
            if r.ok:
                self.renewals.release(first)
        entries = [
            s.AckMessageResultEntry(
                message_id=e.message_id,
                receipt_handle=e.receipt_handle,
                status=status() if r.ok else status(d.INVALID_RECEIPT_HANDLE, f"entries[{i}].receipt_handle: {_reason(r.error)}"),
            )
            for i, (e, r) in enumerate(zip(request.entries, got.results))
        ]
        failed = [e.status for e in entries if e.status.code != d.OK]
        if not failed:
            top = status()
        elif len(failed) == len(entries):
            top = failed[0]
        else:
            top = status(d.MULTIPLE_RESULTS, f"{len(failed)} of {len(entries)} not acknowledged: see the entries")
        return s.AckMessageResponse(status=top, entries=entries)

    async def ChangeInvisibleDuration(self, request, context):
        group = group_of(request.group)
        topic = topic_of(request.topic)
        invisible = _duration_ms(request.invisible_duration)
        if not 0 <= invisible <= 12 * 3_600_000:
            raise Refusal(d.ILLEGAL_INVISIBLE_TIME, f"invisible_duration: must be 0 to 12 h, got {invisible} ms")
        forwarded = await self._forward_newest("ChangeInvisibleDuration", request, context)
        if forwarded is not None:
            return forwarded
        try:
            async with self.renewals.using([request.receipt_handle]) as (current,):
                got = await self.data.ChangeInvisible(  # 0 is 'visible now' here, as RocketMQ's (v1's 0 is a nack)
                    pb.ChangeInvisibleRequest(group=group, topic=topic, receipt_handle=current, invisible_ms=max(invisible, 1)),
                    CallContext(context),
                )
        except v.InvalidArgument as e:
            raise Refusal(field_code(e.field), str(e)) from None
        self.renewals.release(request.receipt_handle)  # its time is the client's to choose now
        return s.ChangeInvisibleDurationResponse(status=status(), receipt_handle=got.receipt_handle)

    async def _forward_newest(self, method: str, request: Any, context) -> Any | None:
        """A call on one receipt, sent on to its group's master with the delivery's newest receipt
        (None: it runs here)."""
        if not self.forwarder.elsewhere(_group_of_receipt(request.receipt_handle)):
            return None
        newest = type(request)()
        newest.CopyFrom(request)
        async with self.renewals.using([request.receipt_handle]) as (newest.receipt_handle,):
            forwarded = await self.forwarder.forward(method, newest, context, _group_of_receipt(newest.receipt_handle))
        if forwarded is not None and forwarded.status.code == d.OK:
            self.renewals.release(request.receipt_handle)
        return forwarded

    async def ForwardMessageToDeadLetterQueue(self, request, context):
        group = group_of(request.group)
        topic = topic_of(request.topic)
        forwarded = await self._forward_newest("ForwardMessageToDeadLetterQueue", request, context)
        if forwarded is not None:
            return forwarded
        async with self.renewals.using([request.receipt_handle]) as (current,):
            try:
                (receipt,) = self.data._receipts([current], group, topic)
            except v.InvalidArgument as e:
                raise Refusal(d.INVALID_RECEIPT_HANDLE, "receipt_handle: " + str(e).split(": ", 1)[1]) from None
            await self.data._pop_master(CallContext(context))
            broker = self.server.broker
            assert broker is not None
            try:
                await asyncio.get_running_loop().run_in_executor(self.server.executor, broker.pop.dead_letter, receipt)
            except ReceiptExpired as e:
                raise Refusal(d.INVALID_RECEIPT_HANDLE, f"receipt_handle: {e}") from None
            except PopUnavailable as e:
                raise Refusal(d.INTERNAL_SERVER_ERROR, f"not set aside: {e}") from None
        self.renewals.release(request.receipt_handle)
        return s.ForwardMessageToDeadLetterQueueResponse(status=status())

    # ------------------------------------------------------------------ offsets

    async def PullMessage(self, request, context) -> AsyncIterator[Any]:
        group_of(request.group)
        where = await self._queue_group(request.message_queue)
        topic = self._known_here(topic_of(request.message_queue.topic, "message_queue.topic"), where)
        qid = request.message_queue.id
        if qid < 0:
            raise Refusal(d.BAD_REQUEST, f"message_queue.id: must be >= 0, got {qid}")
        if request.offset < 0:
            raise Refusal(d.ILLEGAL_OFFSET, f"offset: must be >= 0, got {request.offset}")
        batch = request.batch_size or 32
        if not 1 <= batch <= v.MAX_PULL_MESSAGES:
            raise Refusal(d.BAD_REQUEST, f"batch_size: must be 1 to {v.MAX_PULL_MESSAGES}, got {request.batch_size}")
        filters = self._filters(request.filter_expression)
        wait = self._poll_ms(request, context)
        got = await self._on_master(
            "Pull",
            pb.PullRequest(topic=topic, queue_id=qid, offset=request.offset, max_messages=batch, timeout_ms=wait, **filters),
            context,
            self.data.Pull,
            where,
        )
        if isinstance(got, (bytes, bytearray)):
            got = pb.PullResponse.FromString(bytes(got))
        if got.status == pb.FOUND:
            for m in got.messages:
                yield s.PullMessageResponse(message=messages.to_v2(m))
            yield s.PullMessageResponse(status=status())
        elif got.status in (pb.OFFSET_TOO_SMALL, pb.OFFSET_OVERFLOW_BADLY, pb.MESSAGE_WAS_REMOVING) and got.next_offset != request.offset:
            yield s.PullMessageResponse(
                status=status(
                    d.ILLEGAL_OFFSET,
                    f"offset: {request.offset} is outside the queue ({got.min_offset} to {got.max_offset}); go on from {got.next_offset}",
                )
            )
        else:  # (a follower past its end keeps the offset: nothing new there yet, as RocketMQ's slave)
            yield s.PullMessageResponse(status=status(d.MESSAGE_NOT_FOUND, "no new message"))
        yield s.PullMessageResponse(next_offset=got.next_offset)

    async def UpdateOffset(self, request, context):
        group = group_of(request.group)
        topic = topic_of(request.message_queue.topic, "message_queue.topic")
        if request.offset < 0:
            raise Refusal(d.ILLEGAL_OFFSET, f"offset: must be >= 0, got {request.offset}")
        await self._on_master(
            "CommitOffset",
            pb.CommitOffsetRequest(group=group, topic=topic, queue_id=request.message_queue.id, offset=request.offset),
            context,
            self.data.CommitOffset,
            await self._queue_group(request.message_queue),
        )
        return s.UpdateOffsetResponse(status=status())

    async def GetOffset(self, request, context):
        group = group_of(request.group)
        topic = topic_of(request.message_queue.topic, "message_queue.topic")
        got = await self._on_master(
            "GetCommittedOffset",
            pb.GetCommittedOffsetRequest(group=group, topic=topic, queue_id=request.message_queue.id),
            context,
            self.data.GetCommittedOffset,
            await self._queue_group(request.message_queue),
        )
        if isinstance(got, bytes):
            got = pb.GetCommittedOffsetResponse.FromString(got)
        if got.offset < 0:
            return s.GetOffsetResponse(status=status(d.OFFSET_NOT_FOUND, f"{group} has no offset for {topic}/{request.message_queue.id}"))
        return s.GetOffsetResponse(status=status(), offset=got.offset)

    async def QueryOffset(self, request, context):
        topic = topic_of(request.message_queue.topic, "message_queue.topic")
        qid = request.message_queue.id
        group = await self._queue_group(request.message_queue)
        if request.query_offset_policy == d.TIMESTAMP:
            if not request.HasField("timestamp"):
                raise Refusal(d.BAD_REQUEST, "timestamp: required with query_offset_policy TIMESTAMP")
            got = await self._on_master(
                "GetOffsetByTime",
                pb.GetOffsetByTimeRequest(topic=topic, queue_id=qid, timestamp=messages._ms(request.timestamp)),
                context,
                self.data.GetOffsetByTime,
                group,
            )
            if isinstance(got, bytes):
                got = pb.GetOffsetByTimeResponse.FromString(got)
            return s.QueryOffsetResponse(status=status(), offset=got.offset)
        queues = await self._on_master(
            "GetQueueOffsets", pb.GetQueueOffsetsRequest(topic=topic, queue_id=qid), context, self.data.GetQueueOffsets, group
        )
        if isinstance(queues, bytes):
            queues = pb.GetQueueOffsetsResponse.FromString(queues)
        q = queues.queues[0] if queues.queues else pb.QueueOffsets()
        return s.QueryOffsetResponse(status=status(), offset=q.min_offset if request.query_offset_policy == d.BEGINNING else q.max_offset)

    async def SyncLiteSubscription(self, request, context):
        return s.SyncLiteSubscriptionResponse(status=status(d.UNSUPPORTED, "lite topics are not supported by this store"))

    # ------------------------------------------------------------------ wiring

    def handlers(self, count_error: Callable[[str, str], None]) -> grpc.GenericRpcHandler:
        out = {}
        for method in SERVICE.methods:
            req_cls = message_factory.GetMessageClass(method.input_type)
            resp_cls = message_factory.GetMessageClass(method.output_type)
            if method.name == "Telemetry":
                out[method.name] = grpc.stream_stream_rpc_method_handler(self._telemetry, req_cls.FromString, resp_cls.SerializeToString)
            elif method.server_streaming:
                out[method.name] = grpc.unary_stream_rpc_method_handler(
                    self._streaming(method.name, getattr(self, method.name), resp_cls, count_error),
                    req_cls.FromString,
                    resp_cls.SerializeToString,
                )
            else:
                out[method.name] = grpc.unary_unary_rpc_method_handler(
                    self._unary(method.name, getattr(self, method.name), resp_cls, count_error),
                    req_cls.FromString,
                    resp_cls.SerializeToString,
                )
        return grpc.method_handlers_generic_handler(SERVICE.full_name, out)

    def _unary(self, name: str, fn: Callable[[Any, Any], Awaitable[Any]], resp_cls, count_error):
        async def handler(request, context):
            try:
                self.authorize(name, request, context)
                return await fn(request, context)
            except (asyncio.CancelledError, grpc.aio.AbortError):
                raise
            except Exception as e:
                return resp_cls(status=_failure(name, e, count_error))

        return handler

    def _streaming(self, name: str, fn: Callable[[Any, Any], AsyncIterator[Any]], resp_cls, count_error):
        async def handler(request, context):
            try:
                self.authorize(name, request, context)
                async for item in fn(request, context):
                    yield item
            except (asyncio.CancelledError, grpc.aio.AbortError):
                raise
            except Exception as e:
                yield resp_cls(status=_failure(name, e, count_error))

        return handler

    async def _telemetry(self, requests, context) -> None:
        try:
            self.authorize("Telemetry", None, context)
        except Refusal as e:
            await context.write(s.TelemetryCommand(status=status(e.code, e.message)))
            return
        await self.telemetry.serve(requests, context)
