"""The asyncio client: the same routing and failover as :class:`Client`, on grpc.aio."""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Sequence

import grpc

from ..record.recall_handle import RecallHandle
from ..v1 import msgstore_pb2 as pb
from ..v1 import msgstore_pb2_grpc as pbg
from . import access
from .client import (
    ACCESS_RETRY_S,
    NOTHING_STORED,
    RETRYABLE,
    ROUTE_TTL_S,
    OutMessage,
    PullResult,
    SendResult,
    StoreError,
    check_queue,
    check_topic,
    encode_send,
    pull_queues_request,
    pull_request,
    pull_result,
)
from .connection import Security, aio_channel, split_endpoints
from .delays import delay_properties, group_properties
from .errors import error_from
from .pop import AsyncPopCalls
from .pull_stream import AsyncPullStream
from .routing import (
    PROBE_TIMEOUT_S,
    REFUSED,
    REROUTE,
    KeyQueueDown,
    QueueRef,
    Route,
    Suspects,
    confirmed,
    known_addresses,
    merge_answers,
    nodes_of,
    on_master,
    replicated,
)
from .send_results import SendResults
from .stream import AsyncSendStream
from .transactions import AsyncTransactionProducer, end_transaction_async


class AsyncClient(AsyncPopCalls):
    def __init__(
        self,
        endpoints: str | list[str],
        *,
        token: str | None = None,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        server_name: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        timeout: float = 10.0,
        failover_timeout: float = 15.0,
    ):
        """``failover_timeout``: how long a send to a replicated group whose master fails waits
        for the group's new master, as :class:`Client`'s."""
        self.endpoints = split_endpoints(endpoints)
        self.security = Security(token, None, tls_ca, tls_cert, tls_key, server_name, access_key, secret_key)
        self.timeout = timeout
        self.failover_timeout = failover_timeout
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, pbg.MessageStoreStub] = {}  # one per channel (see Client.stub)
        self._routes: dict[str, Route] = {}
        self._streams: dict[str, AsyncSendStream] = {}
        self._unary_only: set[str] = set()
        self._suspects = Suspects()

    def _channel(self, address: str) -> grpc.aio.Channel:
        ch = self._channels.get(address)
        if ch is None:
            ch = self._channels[address] = aio_channel(address, self.security)
        return ch

    def stub(self, address: str) -> pbg.MessageStoreStub:
        st = self._stubs.get(address)
        if st is None:
            st = self._stubs[address] = pbg.MessageStoreStub(self._channel(address))
        return st

    async def _call(self, address: str, method: str, request, timeout: float | None = None, node: str = ""):
        try:
            return await getattr(self.stub(address), method)(
                request, timeout=timeout or self.timeout, metadata=self.security.data_metadata() or None
            )
        except grpc.aio.AioRpcError as e:
            raise error_from(e, node or address) from None

    async def close(self) -> None:
        for stream in self._streams.values():
            await stream.close()
        self._streams.clear()
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()
        self._stubs.clear()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def route(self, topic: str = "", refresh: bool = False) -> Route:
        """As :meth:`Client.route`: the other members are asked at once while an answer cannot
        vouch for a group's master."""
        cached = self._routes.get(topic)
        if cached is not None and not refresh and time.monotonic() - cached.fetched_at < ROUTE_TTL_S:
            return cached
        last: Exception | None = None
        answers: list[list[pb.NodeRoute]] = []
        asked: set[str] = set()

        async def ask(address: str, timeout: float) -> list[pb.NodeRoute] | StoreError:
            try:
                resp = await self._call(address, "GetRoute", pb.GetRouteRequest(topic=topic), timeout=timeout)
            except StoreError as e:
                if e.code in RETRYABLE:
                    self._suspects.mark(address)
                return e
            self._suspects.clear(address)
            point = access.access_of(resp, address)
            if point is not None:  # every member through the access point (as Client.route)
                vias.append(point)
                return access.rewrite(list(resp.nodes), point)
            return list(resp.nodes)

        vias: list[str] = []
        for address in self._suspects.order(known_addresses(self.endpoints, list(self._routes.values()))):
            asked.add(address)
            got = await ask(address, min(self.timeout, 5.0))
            if isinstance(got, StoreError):
                last = got
                continue
            answers.append(got)
            break
        if answers and not vias and not confirmed(merge_answers(answers)):
            others = [a for a in known_addresses(self.endpoints, list(self._routes.values()), answers) if a not in asked]
            for got in await asyncio.gather(*(ask(a, PROBE_TIMEOUT_S * 2) for a in others)):
                if not isinstance(got, StoreError):
                    answers.append(got)
        if not answers:
            raise last or StoreError(grpc.StatusCode.UNAVAILABLE, "no endpoint answered")
        route = Route(topic, nodes_of(merge_answers(answers)))
        self._routes[topic] = route
        return route

    async def send(
        self,
        topic: str,
        body: bytes | str,
        *,
        key: str | None = None,
        tags: str | None = None,
        properties: dict[str, str] | None = None,
        keys: Sequence[str] = (),
        visible: bool = False,
        reorder: bool = False,
        delay: float | datetime.timedelta | None = None,
        deliver_at: float | datetime.datetime | None = None,
        delay_level: int | None = None,
        message_group: str | None = None,
    ) -> SendResult:
        """As Client.send: ``delay``/``deliver_at``/``delay_level`` deliver it later."""
        if isinstance(body, str):
            body = body.encode()
        props = {**(properties or {}), **delay_properties(delay, deliver_at, delay_level), **group_properties(message_group)}
        msg = OutMessage(body, key, keys, tags, props)
        return (await self.send_batch(topic, [msg], key=message_group or key, visible=visible, reorder=reorder))[0]

    async def send_batch(
        self,
        topic: str,
        messages: Sequence[OutMessage],
        *,
        key: str | None = None,
        queue: QueueRef | None = None,
        visible: bool = False,
        reorder: bool = False,
    ) -> SendResults:
        """As :meth:`Client.send_batch`: a key's messages go to its queue only, unless
        ``reorder``; a replicated group's new master is waited for up to ``failover_timeout``,
        and an answer saying "not master" or "replicas missing" sends again to the master the
        route names now."""
        check_topic(topic)
        if queue is not None:
            check_queue(queue)
        deadline = time.monotonic() + self.failover_timeout
        route = await self.route(topic)
        tried: set[str] = set()
        if queue is not None:
            target = queue
        else:
            route, target = await self._first_target(topic, route, key, reorder, deadline)
        while True:
            try:
                results = SendResults(await self._send_to(target, topic, messages, visible), target.node, target.address)
            except StoreError as e:
                if e.code not in RETRYABLE:
                    raise
                if access.split(target.address)[1]:  # (as Client.send_batch)
                    await self._drop_stream(target.address)
                route.mark_down(target.address)
                self._suspects.mark(target.address)
                tried.add(target.address)
                moved = await self._await_new_master(topic, target, deadline)
                if moved is not None and time.monotonic() >= deadline:
                    raise  # (a member the route calls master that keeps failing the send: not forever)
                if moved is not None:  # the same queue, on its group's new master: order and key kept
                    target = moved
                    route = await self.route(topic)
                    continue
                if queue is not None:
                    raise
                if key is not None and not reorder:
                    raise StoreError(e.code, f"{KeyQueueDown(key, target)} ({e.details})", target.node) from None
                route = await self.route(topic, refresh=True)
                if not [q for q in route.usable() if q.address not in tried]:
                    raise
                target = route.pick(key, exclude=tried, reorder=reorder)
                continue
            if not results.all_ok and results.statuses() & REROUTE and time.monotonic() < deadline:
                if access.split(target.address)[1] and replicated(route, target) and results.statuses() <= NOTHING_STORED:
                    await self._drop_stream(target.address)
                    await asyncio.sleep(ACCESS_RETRY_S)
                    continue
                if results.statuses() & REFUSED and replicated(route, target):
                    found = on_master(await self.route(topic, refresh=True), target)
                    if found is None:  # fenced, without lease or quorum: wait for the group's master
                        self._suspects.mark(target.address)
                        moved = await self._await_new_master(topic, target, deadline)
                    else:  # its own refusal (a full disk): answered as it is
                        moved = found if found.address != target.address else None
                else:
                    moved = on_master(await self.route(topic, refresh=True), target)
                    moved = moved if moved is not None and moved.address != target.address else None
                if moved is not None:
                    target = moved
                    continue
            return results

    async def _first_target(self, topic: str, route: Route, key: str | None, reorder: bool, deadline: float) -> tuple[Route, QueueRef]:
        while True:
            try:
                return route, route.pick(key, reorder=reorder)
            except LookupError as e:
                if time.monotonic() >= deadline or not any(len(n.members) > 1 for n in route.nodes):
                    raise StoreError(grpc.StatusCode.UNAVAILABLE, str(e)) from None
            await asyncio.sleep(0.1)
            try:
                route = await self.route(topic, refresh=True)
            except StoreError as e:  # no member answers now: keep the last route until the deadline
                if e.code not in RETRYABLE or time.monotonic() >= deadline:
                    raise

    async def _await_new_master(self, topic: str, target: QueueRef, deadline: float) -> QueueRef | None:
        if not replicated(await self.route(topic), target):
            return None
        while True:
            try:
                found = on_master(await self.route(topic, refresh=True), target)
            except StoreError as e:  # no member answers now (paused, restarting): the failover is not over
                if e.code not in RETRYABLE:
                    raise
                found = None
            if found is not None and found.address == target.address and found.address in self._suspects:
                found = found if await self._answers(found.address) else None  # routes can name a paused master a while
            if found is not None:
                if found.address == target.address:
                    await asyncio.sleep(0.05)
                return found
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(0.1)

    async def _answers(self, address: str) -> bool:
        try:
            await self._call(address, "GetRoute", pb.GetRouteRequest(), timeout=PROBE_TIMEOUT_S)
        except StoreError:
            return False
        self._suspects.clear(address)
        return True

    async def _send_to(self, target: QueueRef, topic: str, messages: Sequence[OutMessage], visible: bool):
        """Over the node's SendStream (unary Send to a server without it), as Client._send_to."""
        req = encode_send(topic, target.queue_id, messages, None, visible)
        if target.address not in self._unary_only:
            try:
                return await self._stream(target).send(req, len(messages), (None, visible), self.timeout)
            except StoreError as e:
                if e.code != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                self._unary_only.add(target.address)
        send = self._channel(target.address).unary_unary(
            "/msgstore.v1.MessageStore/Send", request_serializer=None, response_deserializer=pb.SendResponse.FromString
        )
        try:
            return (await send(req, timeout=self.timeout, metadata=self.security.data_metadata() or None)).results
        except grpc.aio.AioRpcError as e:
            raise error_from(e, target.node) from None

    async def _drop_stream(self, address: str) -> None:
        stream = self._streams.pop(address, None)
        if stream is not None:
            await stream.close()

    def _stream(self, target: QueueRef) -> AsyncSendStream:
        stream = self._streams.get(target.address)
        if stream is None or stream.broken is not None:
            stream = self._streams[target.address] = AsyncSendStream(
                self._channel(target.address), target.node, self.security.data_metadata()
            )
        return stream

    async def pull(
        self,
        topic: str,
        queue: QueueRef,
        offset: int,
        *,
        max_messages: int = 32,
        timeout_ms: int = 0,
        tag_filter: str | None = None,
        group: str = "",
        sql: str | None = None,
    ) -> PullResult:
        resp = await self.pull_response(
            topic, queue, offset, max_messages=max_messages, timeout_ms=timeout_ms, tag_filter=tag_filter, group=group, sql=sql
        )
        return pull_result(resp, queue.node)

    async def pull_response(
        self,
        topic: str,
        queue: QueueRef,
        offset: int,
        *,
        max_messages: int = 32,
        timeout_ms: int = 0,
        tag_filter: str | None = None,
        group: str = "",
        sql: str | None = None,
    ) -> pb.PullResponse:
        """A pull's PullResponse as it came (its records not yet decoded)."""
        req = pull_request(topic, queue, offset, max_messages, timeout_ms, tag_filter, group, sql=sql)
        return await self._group_call(topic, queue, "Pull", req, reads=True, timeout=self.timeout + timeout_ms / 1000)  # type: ignore[no-any-return]

    async def pull_queues(
        self,
        topic: str,
        address: str,
        queues: list[tuple[QueueRef, int]],
        *,
        max_messages: int = 32,
        timeout_ms: int = 0,
        tag_filter: str | None = None,
        group: str = "",
        sql: str | None = None,
    ) -> list[tuple[QueueRef, pb.PullResponse]]:
        """As Client.pull_queues_future: several queues read at ``address`` in one call, each
        with its answer; ``timeout_ms`` waits until any has messages."""
        req = pull_queues_request(topic, queues, max_messages, timeout_ms, tag_filter, group, sql)
        resp = await self._call(address, "PullQueues", req, timeout=self.timeout + timeout_ms / 1000)
        return list(zip((q for q, _ in queues), resp.results))

    def pull_stream(self, address: str) -> AsyncPullStream:
        """As Client.pull_stream: a PullQueuesStream opened to ``address``."""
        return AsyncPullStream(self.stub(address).PullQueuesStream, self.security.data_metadata())

    async def heartbeat(
        self, address: str, request: pb.HeartbeatRequest, node: str = "", timeout: float | None = None
    ) -> pb.HeartbeatResponse:
        return await self._call(address, "Heartbeat", request, timeout=timeout, node=node)  # type: ignore[no-any-return]

    async def unregister(self, address: str, group: str, client_id: str, node: str = "") -> None:
        await self._call(address, "Unregister", pb.UnregisterRequest(group=group, client_id=client_id), timeout=5.0, node=node)

    async def read_address(self, topic: str, queue: QueueRef) -> str:
        """Where to read the queue: its master, else a follower serving reads."""
        return await self._address(topic, queue, True)

    async def _address(self, topic: str, queue: QueueRef, reads: bool, refresh: bool = False) -> str:
        route = await self.route(topic, refresh=refresh)
        if not reads:
            return route.write_address(queue)
        found = route.read_address(queue)
        if found is None and not refresh:  # nobody ready as far as the cached route knows: look again
            found = (await self.route(topic, refresh=True)).read_address(queue)
        return found or queue.address

    def transaction_producer(self, group: str, check) -> AsyncTransactionProducer:
        """As Client.transaction_producer, on asyncio (``async with``); ``check`` may be async."""
        return AsyncTransactionProducer(self, group, check)

    async def end_transaction(self, transaction_id: str, resolution: str) -> None:
        await end_transaction_async(self, transaction_id, resolution)

    async def recall(self, handle: str | SendResult) -> None:
        """As Client.recall: cancel a message sent with ``delay``/``deliver_at`` before its time."""
        text = handle.recall_handle if isinstance(handle, SendResult) else handle
        try:
            h = RecallHandle.decode(text)
        except ValueError as e:
            raise StoreError(grpc.StatusCode.INVALID_ARGUMENT, f"recall_handle: {e}") from None
        await self._group_call(h.topic, QueueRef(h.group, "", 0), "Recall", pb.RecallRequest(recall_handle=text), reads=False)

    async def _group_call(self, topic: str, queue: QueueRef, method: str, request, *, reads: bool, timeout: float | None = None):
        """As :meth:`Client._group_call`: the queue's master (or, for reads, whoever serves
        them); when that member does not answer, the member a fresh route names, once."""
        check_queue(queue)
        address = await self._address(topic, queue, reads)
        try:
            return await self._call(address, method, request, timeout, node=queue.node)
        except StoreError as e:
            if e.code != grpc.StatusCode.UNAVAILABLE:
                raise
            again = await self._address(topic, queue, reads, refresh=True)
            if again == address:
                raise
            return await self._call(again, method, request, timeout, node=queue.node)

    async def commit(self, group: str, topic: str, queue: QueueRef, offset: int) -> None:
        check_queue(queue)
        req = pb.CommitOffsetRequest(group=group, topic=topic, queue_id=queue.queue_id, offset=offset)
        await self._group_call(topic, queue, "CommitOffset", req, reads=False)

    async def committed(self, group: str, topic: str, queue: QueueRef) -> int:
        check_queue(queue)
        req = pb.GetCommittedOffsetRequest(group=group, topic=topic, queue_id=queue.queue_id)
        resp = await self._group_call(topic, queue, "GetCommittedOffset", req, reads=False)
        return resp.offset  # type: ignore[no-any-return]

    async def queue_offsets(self, topic: str, skip_unavailable: bool = False) -> dict[QueueRef, tuple[int, int]]:
        out = {}
        for n in (await self.route(topic)).nodes:
            if n.ready:
                try:
                    resp = await self._call(n.address, "GetQueueOffsets", pb.GetQueueOffsetsRequest(topic=topic), node=n.name)
                except StoreError as e:
                    if skip_unavailable and e.code in RETRYABLE:
                        continue
                    raise
                for q in resp.queues:
                    out[QueueRef(n.name, n.address, q.queue_id)] = (q.min_offset, q.max_offset)
        return out
