"""Any node serves any msgstore.v1 call: one hop to the replica group's master (issue 31).

A client that reaches the store through one address (a Service, a port-forward, a load
balancer; ``serve --access-point``) cannot pick the node that owns a queue, so it names the
queue's replica group in the call's metadata (``x-msgstore-node``) and whichever node the
address leads to sends the call on, unchanged, to that group's master: unary calls, server
streams (Subscribe) and SendStream pass through as bytes, under the caller's deadline and
credentials. RocketMQ 5's proxy in cluster mode does the same for its clients. A call that was
forwarded once is served where it lands (never a second hop); a call without the header is
served here, as before. While a group has no master (a failover), the call waits for the
election within its deadline instead of failing: clients see the election as latency."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any, Protocol

import grpc

from ..acl.identity import CALLER, origin_headers
from ..client.errors import status_of
from ..record import codec
from ..v1 import msgstore_pb2
from .auth import peer_host
from .validation import BadRequest


class Host(Protocol):
    """What the relay needs of the member it runs in (member.py's Member)."""

    options: Any
    advertise: str
    stopping: bool

    def _group_name(self) -> str: ...
    def _broker_master(self) -> bool: ...
    def _broker_delivers(self) -> bool: ...
    def _master_takes_writes(self) -> bool: ...
    def _ha_channel(self, address: str) -> grpc.aio.Channel: ...
    def local_route(self, topic: str) -> msgstore_pb2.NodeRoute: ...
    async def route(self, topic: str, local: msgstore_pb2.NodeRoute) -> list[msgstore_pb2.NodeRoute]: ...


NODE_KEY = "x-msgstore-node"  # the replica group a call is for (set by clients using an access point)
FORWARDED = "x-msgstore-forwarded"  # set on a forwarded call: served where it lands
NOT_DONE = "x-msgstore-not-done"  # in a failed call's trailers: refused before anything was done (not master, stopping)
PASSED_ON = ("authorization", "x-mq-date-time")  # the caller's credentials travel with the call
DEFAULT_TIMEOUT_S = 30.0  # a call without a deadline
MASTER_POLL_S = 0.2
MASTER_CACHE_S = 0.5
UNKNOWN_GRACE_S = 2.0  # a group no route names yet: looked for this long before NOT_FOUND
# what only reads what a master holds: served by a master that may not acknowledge now (fenced: its
# lease or quorum away), as it is when asked directly, instead of waiting for one that may
READS = frozenset(
    {
        "Pull",
        "PullQueues",
        "PullQueuesStream",
        "Subscribe",
        "GetQueueOffsets",
        "GetOffsetByTime",
        "GetCommittedOffset",
        "GetMessage",
        "QueryByKey",
        "ListTopics",
    }
)
# what may be sent again when its master failed with it in flight: the unary reads, a receive (what
# the dead master handed out comes back after its invisible time) and an ack (taken again, or
# refused as done)
REPEATABLE = (READS - {"Subscribe"}) | {"Receive", "Ack"}
NEVER_RELAYED = frozenset({"GetRoute"})  # answered by any node for the whole store
DATA_SERVICE_NAME = "msgstore.v1.MessageStore"


class Relay:
    def __init__(self, server: Host):
        self.server = server
        self._masters: dict[tuple[str, bool], tuple[float, str | None]] = {}  # (group, reads) -> (valid until, master's address)

    async def target(self, context, group: str = "", reads: bool = False) -> str | None:
        """Where the call goes: None to serve it here, else the address of the master of its
        group (``group``, else the one its metadata names). Aborts the call when the group has
        no master within the call's deadline. ``reads``: a fenced master will do."""
        for k, value in context.invocation_metadata() or ():
            if k == FORWARDED:
                return None
            if k == NODE_KEY and not group:
                group = value
        server = self.server
        if not group or (group == server._group_name() and (server._broker_master() if reads else server._broker_delivers())):
            return None
        start = time.monotonic()
        deadline = start + (_timeout(context) or DEFAULT_TIMEOUT_S)
        while True:
            address, known = await self.master_of(group, reads)
            if address is not None:
                return None if address == server.advertise else address
            if not known and time.monotonic() - start >= UNKNOWN_GRACE_S:  # (not a peer that has yet to answer)
                await context.abort(grpc.StatusCode.NOT_FOUND, f"{NODE_KEY}: the store has no replica group {group!r}")
            if time.monotonic() + MASTER_POLL_S >= deadline or server.stopping:
                await context.abort(grpc.StatusCode.UNAVAILABLE, f"replica group {group} has no master now (a failover in progress)")
            await asyncio.sleep(MASTER_POLL_S)

    async def master_of(self, group: str, reads: bool = False) -> tuple[str | None, bool]:
        """The group's ready, unfenced master of the newest epoch, and whether the group is known
        (``reads``: a fenced master will do)."""
        server = self.server
        hit = self._masters.get((group, reads))
        if hit is not None and time.monotonic() < hit[0]:
            if reads or hit[1] != server.advertise or server._master_takes_writes():
                return hit[1], True
            # the cache names this node, fenced since (a switchover): a write served here would
            # be refused at once; the route, which marks this node fenced, is asked instead
            # (a read is served by a fenced master)
            self._masters.pop((group, reads), None)
        best = None
        known = False
        for n in await server.route("", server.local_route("")):
            if (n.group or n.name) != group:
                continue
            known = True
            if n.ready and n.role == "MASTER" and (reads or not n.fenced) and (best is None or n.epoch > best.epoch):
                best = n
        address = best.address if best is not None else None
        if address is not None:
            self._masters[(group, reads)] = (time.monotonic() + MASTER_CACHE_S, address)
        return address, known

    async def group_storing(self, msg_id: str) -> str:
        """The replica group of the member an offset message id names ('' when the id does not
        decode or the route knows no such member): a lookup by id is served there, whichever
        node the caller's connection reached."""
        try:
            host, _offset = codec.decode_message_id(msg_id)
        except ValueError:
            return ""
        address = codec.host_str(host)
        server = self.server
        return next((n.group or n.name for n in await server.route("", server.local_route("")) if n.address == address), "")

    def _metadata(self, context) -> list[tuple[str, str]]:
        """The caller's credentials and address go with the call: the serving node checks them."""
        passed = [(k, v) for k, v in context.invocation_metadata() or () if k in PASSED_ON]
        return [(FORWARDED, "1"), *passed, *self.origin(context)]

    def origin(self, context) -> list[tuple[str, str]]:
        source = CALLER.get().source or peer_host(context)[0]
        return origin_headers(self.server.authenticator.cluster_secret(), source, context.invocation_metadata())

    async def on_master(self, group: str, method: str, request: Any, context) -> bytes | None:
        """For the RocketMQ 5 service, whose calls become msgstore.v1 requests: the answer of
        ``group``'s master to ``request`` (a v1 ``method``), or None to serve it here. A
        client that still sends to a deposed master (RocketMQ 5 clients refresh routes every
        30 s) is served by the new one instead of failing until then."""
        address = await self.target(context, group, method in READS)
        if address is None:
            return None
        # (the caller's own signature goes with it: the master checks the caller itself, §20)
        return await self.unary(f"/{DATA_SERVICE_NAME}/{method}", request, context, address, self._metadata(context), group)

    async def unary(self, path: str, request: Any, context, address: str, metadata: list | None = None, group: str = "") -> bytes | None:
        """The master's answer; None when it turns out the call is to be served here (this node
        took office meanwhile). A master that could not even be connected to (it died, the
        failover is under way) never saw the call: the group's master is looked up again and
        the call sent there, within the caller's deadline. A call that reached it is never
        sent twice: its failure is the caller's."""
        payload = _bytes(request)
        end = time.monotonic() + (_timeout(context) or DEFAULT_TIMEOUT_S)  # one deadline for every attempt
        while True:
            call = self.server._ha_channel(address).unary_unary(path, request_serializer=None, response_deserializer=None)
            try:
                return await call(payload, metadata=metadata or self._metadata(context), timeout=_timeout(context))
            except grpc.aio.AioRpcError as e:
                self._suspect(e, address)
                repeatable = path.rsplit("/", 1)[-1] in REPEATABLE and e.code() == grpc.StatusCode.UNAVAILABLE
                if not (never_sent(e) or repeatable or not_done(e)) or time.monotonic() >= end:
                    await context.abort(status_of(e)[0], _details(e, address))
                    raise
            await asyncio.sleep(MASTER_POLL_S)  # (the route may name the dead master a moment longer)
            again = await self.target(context, group, path.rsplit("/", 1)[-1] in READS)
            if again is None:
                return None
            address = again

    async def server_stream(self, path: str, request: Any, context, address: str) -> AsyncIterator[bytes]:
        call = self.server._ha_channel(address).unary_stream(path, request_serializer=None, response_deserializer=None)
        try:
            async for item in call(_bytes(request), metadata=self._metadata(context), timeout=_timeout(context, None)):
                yield item
        except grpc.aio.AioRpcError as e:
            self._suspect(e, address)
            await context.abort(status_of(e)[0], _details(e, address))

    async def bidi(self, path: str, requests, context, address: str) -> None:
        """A bidirectional stream passed through: requests on as they come, answers back."""
        call = self.server._ha_channel(address).stream_stream(path, request_serializer=None, response_deserializer=None)
        bad: list[str] = []  # a request that could not be decoded: the requests end there, then the stream

        async def upstream():
            async for r in requests:
                if isinstance(r, BadRequest):
                    bad.append(r.reason)
                    return
                yield _bytes(r)

        try:
            async for answer in call(upstream(), metadata=self._metadata(context), timeout=_timeout(context, None)):
                await context.write(answer)
        except grpc.aio.AioRpcError as e:
            self._suspect(e, address)
            await context.abort(status_of(e)[0], _details(e, address))
        if bad:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, bad[0])

    def _suspect(self, e: grpc.aio.AioRpcError, address: str) -> None:
        """A master the call could not get through to (down, deposed, slow) is looked up again;
        one that answered with a verdict of its own (a bad argument, a missing topic) is not."""
        if status_of(e)[0] in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.FAILED_PRECONDITION):
            self.forget(address)

    def forget(self, address: str) -> None:
        """A master that failed a call is looked up again for the next one."""
        for key, (_until, a) in list(self._masters.items()):
            if a == address:
                self._masters.pop(key, None)


def _bytes(request: Any) -> bytes:
    return request if isinstance(request, bytes) else request.SerializeToString()


def _timeout(context, default: float | None = DEFAULT_TIMEOUT_S) -> float | None:
    """The caller's deadline, passed on (``default`` when it set none)."""
    left = context.time_remaining()
    return default if left is None else max(0.001, left)


def never_sent(e: grpc.aio.AioRpcError) -> bool:
    """The call failed to connect (gRPC's words for it): the other end never saw it."""
    text = (e.details() or "").lower()
    return e.code() == grpc.StatusCode.UNAVAILABLE and ("failed to connect" in text or "connection refused" in text)


def not_done(e: grpc.aio.AioRpcError) -> bool:
    """The master refused the call before doing anything of it (fenced by a switchover, deposed,
    shutting down in a roll): the group's next master may be sent it."""
    return any(k == NOT_DONE for k, _v in e.trailing_metadata() or ())


def _details(e: grpc.aio.AioRpcError, address: str) -> str:
    return f"{status_of(e)[1]} (forwarded to {address})"
