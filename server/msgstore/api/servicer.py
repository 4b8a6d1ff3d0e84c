"""The data plane (``msgstore.v1.MessageStore``): thin handlers over the store."""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc
from google.protobuf.message import DecodeError

from .. import wire
from ..acl.identity import CALLER, Denied
from ..broker.system_topics import is_store_topic
from ..record import codec, crc
from ..record.selector import Selector
from ..store import GetStatus, PutStatus, StoreStateError, TopicNotEmpty, Unavailable
from ..store.limits import ResourceLimit
from ..store.metadata import MESSAGE_TYPES
from ..store.results import GetResult, failed
from ..v1 import msgstore_pb2 as pb
from . import validation as v
from .auth import peer_host
from .convert import PULL_STATUS, SEND_STATUS, message_to_pb, raw_pull_response, varint
from .group_service import GroupHandlers
from .pop_service import PopHandlers
from .pull_queues import PullQueuesHandlers, settled
from .relay import NOT_DONE
from .route import DuplicateNodeName
from .scheduled import BROKER_HANDLED, TRANSACTION_PREFIX, RecallHandlers, Scheduled, schedule_entries
from .transaction_service import TransactionHandlers

if TYPE_CHECKING:
    from .member import Member

log = logging.getLogger(__name__)

DISK_FULL = "disk full"


STREAM_IN_FLIGHT = 1024  # requests of one SendStream stored but not yet answered
INLINE_DISPATCH_BYTES = 16 * 1024  # a send of at most this, alone in waiting, is dispatched on the loop (Dispatcher.dispatch_here)


async def undone(context, code: grpc.StatusCode, message: str) -> None:
    """Fail the call, saying in its trailers that nothing of it was done (relay.NOT_DONE), so
    that a node that passed it on may send it to the group's next master."""
    context.set_trailing_metadata(((NOT_DONE, "1"),))
    await context.abort(code, message)


class Refused(Exception):
    """A send refused as a whole (nothing stored): the status a unary Send fails with."""

    def __init__(self, code: grpc.StatusCode, message: str, nothing_stored: bool = False):
        super().__init__(message)
        self.code = code
        self.message = message
        self.nothing_stored = nothing_stored  # the store took none of it (not one refused after it was stored)


@dataclass(slots=True)
class Accepted:
    """A send request appended, waiting to be answered."""

    groups: list
    outcomes: list
    n: int
    request_id: int
    sync: bool
    visible: bool
    started: float
    replicate: bool = False  # a SYNC master: answer once enough followers hold it
    handles: dict[int, str | Scheduled] | None = None  # by entry index: transaction ids, where delayed entries go
    appended: bool = True  # False: refused before anything was appended (fenced, deposed)

    @property
    def waits(self) -> bool:
        return self.sync or self.visible or self.replicate


def _request_id(request) -> int:
    """The request_id of a request that could not be transcoded (0 when it cannot be read)."""
    if not isinstance(request, (bytes, bytearray)):
        return int(getattr(request, "request_id", 0))
    try:
        return pb.SendRequest.FromString(bytes(request)).request_id
    except Exception:
        return 0


def _refusal(request_id: int, code: grpc.StatusCode, message: str) -> bytes:
    """A SendResponse refusing a streamed request as a whole."""
    return pb.SendResponse(request_id=request_id, error_code=code.value[0], error_message=message).SerializeToString()


@dataclass(slots=True)
class Pulled:
    """A pull's answer (a message, or its bytes in raw mode) and what the caller needs of it."""

    response: object
    status: GetStatus
    next_offset: int
    count: int
    size: int = 0  # bytes of records


class DataPlane(GroupHandlers, RecallHandlers, PopHandlers, PullQueuesHandlers, TransactionHandlers):
    def __init__(self, server: Member):
        self.server = server

    @property
    def store(self):
        return self.server.store

    async def _ready(self, context) -> None:
        reason = self.server.unavailable_reason()
        if reason:
            await undone(context, grpc.StatusCode.UNAVAILABLE, reason)

    # ------------------------------------------------------------------ send

    async def Send(self, request, context) -> pb.SendResponse:
        """``request`` is the raw SendRequest bytes when the compiled transcoder is available
        (see server.RAW_REQUESTS), else a parsed message."""
        await self._ready(context)
        accepted = self._accept(request, peer_host(context))
        self.store.dispatcher.wakeup()  # consumers see the batch without waiting for a poll
        try:
            return await self._complete(accepted)
        except Refused as e:
            # refused before appending, or every append refused by the store (it became a follower
            # after the call was let in, a switchover's race): the group's next master may take it
            if e.code == grpc.StatusCode.UNAVAILABLE and (not accepted.appended or e.nothing_stored):
                await undone(context, e.code, e.message)
            await context.abort(e.code, e.message)

    async def SendStream(self, requests, context) -> None:
        """Requests are stored as they arrive (each append is a copy into the page cache, done
        on the loop); an answer that must wait (a group-commit flush, visibility) waits in a
        task of its own, so the requests behind it are appended meanwhile and share its flush.
        An answer that need not wait is written at once, from the reading loop: no hop through
        a queue (that hop was a fifth of a lone request's round trip). ``requests`` yields raw
        SendRequest bytes (or parsed messages without the compiled transcoder); answers are raw
        SendResponse bytes, each naming its request_id."""
        born = peer_host(context)
        writing = asyncio.Lock()  # gRPC allows one write at a time
        slots = asyncio.Semaphore(STREAM_IN_FLIGHT)
        waiting: set[asyncio.Task] = set()

        async def write(answer: bytes | pb.SendResponse) -> None:
            async with writing:
                await context.write(answer)
            slots.release()

        async def answer_later(accepted: Accepted) -> None:
            try:
                answer = await self._complete(accepted)
            except Refused as e:
                answer = _refusal(accepted.request_id, e.code, e.message)
            await write(answer)

        try:
            async for request in requests:
                await slots.acquire()
                if isinstance(request, v.BadRequest):
                    await write(_refusal(0, grpc.StatusCode.INVALID_ARGUMENT, request.reason))
                    continue
                reason = self.server.unavailable_reason()
                if reason:
                    await write(_refusal(_request_id(request), grpc.StatusCode.UNAVAILABLE, reason))
                    continue
                try:
                    CALLER.set(self.server.authenticator.refreshed(CALLER.get()))  # a revoke applies to the next request
                    accepted = self._accept(request, born)
                except v.InvalidArgument as e:
                    await write(_refusal(_request_id(request), grpc.StatusCode.INVALID_ARGUMENT, str(e)))
                    continue
                except Denied as e:
                    await write(_refusal(_request_id(request), *v.refusal(e)))
                    continue
                if accepted.waits:
                    if not self._dispatch_woken_later(accepted):
                        self.store.dispatcher.wakeup()
                    task = asyncio.ensure_future(answer_later(accepted))
                    waiting.add(task)
                    task.add_done_callback(waiting.discard)
                    continue
                try:
                    try:
                        answer = await self._complete(accepted)
                    except Refused as e:
                        answer = _refusal(accepted.request_id, e.code, e.message)
                    await write(answer)
                finally:  # (an answer that could not be written: what was stored is dispatched all the same)
                    self._dispatch_after_answer(accepted)
            if waiting:
                await asyncio.gather(*waiting)
        finally:
            for task in list(waiting):
                task.cancel()
            self.store.dispatcher.wakeup()  # (a request that failed midway may have appended something)

    def _dispatch_after_answer(self, accepted: Accepted) -> None:
        """After the answer is out, not before: dispatch then runs while the sender reads it,
        instead of holding the GIL between our append and our answer. A trickle's batch, alone
        in waiting, is dispatched right here; anything more (other sends came in meanwhile: the
        loop is busy) by the dispatcher's thread, since on the loop it slowed 64 concurrent
        senders by a tenth. One or the other: the dispatcher polls only for what woke nobody."""
        dispatcher = self.store.dispatcher
        own = sum(res.wrote_bytes for _, res in accepted.outcomes if res.status.stored)
        if 0 < own <= INLINE_DISPATCH_BYTES and dispatcher.dispatch_here(own):
            if self.server.metrics is not None:
                self.server.metrics.dispatched_on_loop.inc()
        else:
            dispatcher.wakeup()

    def _dispatch_woken_later(self, a: Accepted) -> bool:
        """Whether the dispatcher will be woken when what ``a`` waits for happens: its group
        commit (the flusher wakes it), its visibility (that wait wakes it), its followers'
        reports when they bound the dispatch (a report that moves the bound wakes it). Woken
        at the accept as well, it only took the GIL from the loop on the way to the followers'
        stream, to find the bound where it was."""
        replica = self.server.replica
        return a.sync or a.visible or (a.replicate and replica is not None and replica.bounds_dispatch)

    def _accept(self, request, born_host: tuple[str, int]) -> Accepted:
        """Validate, encode and append a SendRequest (no waiting): what :meth:`_complete`
        needs to answer it. Raises InvalidArgument naming the field."""
        t0 = time.perf_counter()
        store = self.store
        born = codec.host_bytes_cached(born_host)
        handles = None
        transcoded = None
        if isinstance(request, (bytes, bytearray)):
            transcoded = wire.native.transcode_send(
                request,
                store.config.maxMessageSize,
                store.commitlog.store_host_bytes,
                store.clock.now_ms(),
                crc.FOR_NATIVE,
                born,
                v.InvalidArgument,
                v.MAX_BATCH,
                BROKER_HANDLED,
            )
            if transcoded is None:  # a delay, a transaction or a system topic: the broker's (protobuf path)
                try:
                    request = pb.SendRequest.FromString(bytes(request))
                except DecodeError:
                    raise v.InvalidArgument("request", v.explain_decode_error(pb.SendRequest, bytes(request))) from None
        if transcoded is not None:
            groups, _wait, visible, request_id, n = transcoded
        else:
            groups, n, handles = self._prepare_parsed(request, born)
            visible, request_id = request.wait_visible, request.request_id
        for topic, qid, _batch, idx in groups:
            limit = self.server.queue_count(topic)
            if qid >= limit:
                raise v.InvalidArgument(f"entries[{idx[0]}].queue_id", f"{qid} is out of range: topic {topic} has {limit} queues")
        caller = CALLER.get()
        if caller.user is not None:  # every topic allowed before anything is stored
            for topic in {g[0] for g in groups}:
                caller.require("topic", topic, "pub")
        # An append is a copy into the page cache, done right here: a thread hop would cost more.
        # Under SYNC_FLUSH the answer then awaits one group-commit request covering all its
        # batches, without parking a thread, so many requests share each fdatasync.
        sync = store.config.flushDiskType == "SYNC_FLUSH"
        replica = self.server.replica
        refusal = replica.refuse_put() if replica is not None else None
        if refusal is not None:  # fenced, or too few members in sync to ever acknowledge: store nothing
            status, reason = refusal
            outcomes = [(idx, failed(status, reason)) for _t, _q, _b, idx in groups]
            return Accepted(groups, outcomes, n, request_id, False, False, t0, handles=handles, appended=False)
        outcomes = self._append_groups(groups, defer_flush=sync)
        replicate = False
        if replica is not None and any(res.status.stored for _, res in outcomes):
            replicate = replica.waits_for_followers  # (the store announced the appends to followers' streams)
        return Accepted(groups, outcomes, n, request_id, sync, visible, t0, replicate, handles)

    async def _complete(self, a: Accepted) -> bytes | pb.SendResponse:
        """Wait for what the request asked (its flush, its visibility), then its answer;
        :class:`Refused` when nothing was stored and the store is full or unavailable."""
        store = self.store
        if a.sync:
            await self._await_flush(a.groups, a.outcomes)
        if a.replicate:  # group commit first, then the followers' acknowledgement (§14)
            await self._await_followers(a.outcomes)
        if a.visible:
            await self._await_visible(a.outcomes)
        outcomes = a.outcomes
        nothing_stored = not any(res.status.stored for _, res in outcomes)  # (before a fence turns stored ones into refusals)
        if self.server.replica is not None:
            self._fence_check(self.server.replica, outcomes)
        if all(not res.status.stored for _, res in outcomes) and all(
            res.status is PutStatus.SERVICE_NOT_AVAILABLE for _, res in outcomes
        ):  # nothing stored: fail the call
            res = outcomes[0][1]
            full = res.unavailable is Unavailable.DISK_FULL
            limit = res.unavailable is Unavailable.RESOURCE_LIMIT
            raise Refused(
                grpc.StatusCode.RESOURCE_EXHAUSTED if full or limit else grpc.StatusCode.UNAVAILABLE,
                f"{DISK_FULL}: {res.reason}" if full else res.reason,
                nothing_stored,
            )
        m = self.server.metrics
        if m is not None:
            m.put_latency.observe(time.perf_counter() - a.started)
            for idx, res in outcomes:
                m.put_messages.labels(res.status.name).inc(len(idx))
                if res.status.stored:
                    m.put_bytes.inc(res.wrote_bytes)
        if wire.native is not None and not a.handles:  # the serialized response (the handler's serializer passes bytes on)
            return wire.native.encode_send_response(
                a.n,
                self.server.node_name,
                [
                    (
                        idx,
                        SEND_STATUS[res.status],
                        qid,
                        res.queue_offset if res.status.stored else -1,
                        res.phy_offset,
                        res.sizes,
                        res.store_host,
                        _error_text(res),
                    )
                    for (topic, qid, _b, idx), (_, res) in zip(a.groups, outcomes)
                ],
                a.request_id,
            )
        del store
        results = self._results(a.groups, outcomes, a.n)
        for i, handle in (a.handles or {}).items():
            if results[i].status == pb.PUT_OK or results[i].message_id:
                if isinstance(handle, Scheduled):  # named by where and as what it will be delivered, not by its system topic
                    results[i].topic, results[i].queue_id, results[i].queue_offset = handle.topic, handle.queue_id, -1
                    results[i].message_id, results[i].recall_handle = handle.uniq_key, handle.recall_handle
                elif handle.startswith(TRANSACTION_PREFIX):
                    results[i].transaction_id = handle[len(TRANSACTION_PREFIX) :]
        return pb.SendResponse(results=results, node=self.server.node_name, request_id=a.request_id)

    @staticmethod
    def _results(groups: list, outcomes: list, n: int) -> list[pb.SendResult]:
        results: list[pb.SendResult | None] = [None] * n
        for (_topic, qid, _batch, idx), (_, res) in zip(groups, outcomes):
            status = SEND_STATUS[res.status]
            if res.status.stored:
                for i, (mid, qoff, phy) in zip(idx, res.entries()):
                    results[i] = pb.SendResult(status=status, message_id=mid, queue_id=qid, queue_offset=qoff, commitlog_offset=phy)
            else:
                for i in idx:
                    results[i] = pb.SendResult(status=status, queue_id=qid, error=_error_text(res))
        return results  # type: ignore[return-value]

    def _prepare_parsed(self, request: pb.SendRequest, born: bytes) -> tuple[list, int, dict[int, str | Scheduled]]:
        """The protobuf path: validate each entry (a delayed one goes to its system topic),
        then encode one batch per (topic, queue); the recall handles of timer messages."""
        n = len(request.entries)
        if not 1 <= n <= v.MAX_BATCH:
            raise v.InvalidArgument("entries", f"must hold 1 to {v.MAX_BATCH} entries, got {n}")
        store = self.store
        max_body = store.config.maxMessageSize
        host = codec.host_from_bytes(born)
        msgs = [v.entry_to_message(e, i, max_body, host) for i, e in enumerate(request.entries)]
        handles = schedule_entries(self.server, msgs)
        no_wait = request.HasField("wait_flush") and not request.wait_flush  # a request option, not stored
        members: dict[tuple[str, int], list[int]] = {}
        for i, m in enumerate(msgs):
            members.setdefault((m.topic, m.queue_id), []).append(i)
        groups = []
        now = store.clock.now_ms()
        for (topic, qid), idx in members.items():
            try:
                batch = codec.prepare_batch(topic, qid, [msgs[i] for i in idx], store.commitlog.store_host_bytes, now, max_body)
            except codec.BatchError as e:
                raise v.InvalidArgument(f"entries[{idx[e.index]}]", e.reason) from None
            if no_wait:
                batch.wait_flush = False
            groups.append((topic, qid, batch, idx))
        return groups, n, handles

    def _append_groups(self, groups: list, defer_flush: bool = False) -> list:
        """Append each queue's batch; (entry indices, PutResult) per group."""
        store = self.store
        return [
            (idx, store.check_destination(topic, qid, len(idx)) or store.put_prepared(batch, defer_flush))
            for topic, qid, batch, idx in groups
        ]

    @staticmethod
    def _fence_check(replica, outcomes: list) -> None:
        """The last look before answering: a master fenced while these puts waited (for their
        flush, their followers) acknowledges none of them. Stored or not, the client is told
        to send them again, to the group's master (a deposed master's copy is cut when it
        rejoins; otherwise a resend is at-least-once)."""
        if not any(res.status.stored for _, res in outcomes):
            return
        why = replica.ack_refusal()
        if not why:
            return
        for _, res in outcomes:
            if res.status.stored:
                res.status, res.reason = PutStatus.SERVICE_NOT_AVAILABLE, why

    async def _await_visible(self, outcomes: list) -> None:
        """Until the stored batches are dispatched (pullable at their offsets, findable by
        key); at most ``syncFlushTimeout``, then the answer goes out anyway (the messages are
        stored: they become visible moments later)."""
        stored = [res for _, res in outcomes if res.status.stored]
        if not stored:
            return
        end = max(r.phy_offset + r.wrote_bytes for r in stored)
        dispatcher = self.store.dispatcher
        deadline = time.monotonic() + self.store.config.syncFlushTimeout / 1000
        while dispatcher.reput_from < end and time.monotonic() < deadline:
            dispatcher.wakeup()
            await asyncio.sleep(0.0005)

    async def _await_followers(self, outcomes: list) -> None:
        """SYNC replication: PUT_OK only once enough followers hold every stored batch; else
        FLUSH_SLAVE_TIMEOUT, or SLAVE_NOT_AVAILABLE with no follower connected (stored on the
        master either way, never rolled back)."""
        stored = [res for _, res in outcomes if res.status is PutStatus.PUT_OK]
        if not stored or self.server.replica is None:
            return
        status = await self.server.replica.await_followers(max(r.phy_offset + r.wrote_bytes for r in stored))
        if status is not PutStatus.PUT_OK:
            for res in stored:
                res.status = status

    async def _await_flush(self, groups: list, outcomes: list) -> None:
        """Wait for the group commit of every stored batch that asked for it; past
        ``syncFlushTimeout`` they report FLUSH_DISK_TIMEOUT (stored, not confirmed on disk)."""
        waiting = [res for (_t, _q, batch, _i), (_, res) in zip(groups, outcomes) if res.status.stored and batch.wait_flush]
        if not waiting:
            return
        req = self.store.request_flush(max(r.phy_offset + r.wrote_bytes for r in waiting))
        if req is None:
            return
        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def wake(r, fut=fut) -> None:
            try:
                loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(r.ok))
            except RuntimeError:  # the loop is gone (shutdown): nobody is waiting any more
                pass

        req.add_done_callback(wake)
        try:
            async with asyncio.timeout(self.store.config.syncFlushTimeout / 1000):  # (awaited as it is: one pass after the flush)
                ok = await fut
        except TimeoutError:  # (a flush done in the timeout's own pass counts: its result is there)
            ok = fut.done() and not fut.cancelled() and bool(fut.result())
        if not ok:
            for res in waiting:
                res.status = PutStatus.FLUSH_DISK_TIMEOUT

    # ------------------------------------------------------------------ pull

    async def _readable(self, context) -> None:
        """A follower serves reads only with slaveReadEnable (its copy may lag the master)."""
        if self.store.follower and not self.store.config.slaveReadEnable:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "this node is a follower and slaveReadEnable is false: read from its master")

    async def Pull(self, request: pb.PullRequest, context) -> pb.PullResponse:
        await self._ready(context)
        await self._readable(context)
        topic, qid, offset, max_msgs, max_bytes = self._checked_pull(request)
        timeout = v.check_range(request.timeout_ms, "timeout_ms", 0, v.MAX_TIMEOUT_MS) / 1000
        selected = self._filter_of(request)
        outcome = await self._pull(topic, qid, offset, max_msgs, max_bytes, selected, timeout, request.raw, context)
        return self._with_generation(request.group, outcome.response)

    def _checked_pull(self, request: pb.PullRequest) -> tuple[str, int, int, int, int]:
        """(topic, queue id, offset, max messages, max bytes) of a pull; InvalidArgument naming the field."""
        topic = v.check_known_topic(self.store, v.check_topic(request.topic))
        qid = v.check_queue_id(request.queue_id)
        offset = v.check_non_negative(request.offset, "offset")
        max_msgs = v.check_range(request.max_messages, "max_messages", 0, v.MAX_PULL_MESSAGES) or v.DEFAULT_PULL_MESSAGES
        max_bytes = v.check_range(request.max_bytes, "max_bytes", 0, v.MAX_PULL_BYTES) or v.DEFAULT_PULL_BYTES
        if request.group:
            v.check_group(request.group)
        return topic, qid, offset, max_msgs, max_bytes

    def _filter_of(self, request) -> str | Selector | None:
        """A read's tag filter or SQL92 selector (request.tag_filter, request.sql_filter)."""
        return v.check_filter(request.tag_filter, request.sql_filter, self.store.config.enablePropertyFilter)

    def _with_generation(self, group: str, response):
        """Members notice a membership change at their next pull: a pull naming its group
        carries the group's generation on this node."""
        generation = self.server.groups.generation(group) if group else 0
        if not generation:
            return response
        if isinstance(response, bytes):
            return response + b"\x40" + varint(generation)
        response.group_generation = generation
        return response

    def _read_queue(self, topic, qid, offset, max_msgs, max_bytes, tag_filter, raw) -> Pulled:
        """One look at a queue, answered as a pull (raw records or decoded messages)."""
        t0 = time.perf_counter()
        result = self.store.get_message(None, topic, qid, offset, max_msgs, max_bytes, tag_filter)
        with result:
            response = raw_pull_response(result) if raw else _pull_response(result)
            outcome = Pulled(response, result.status, result.next_offset, len(result), result.buffer_total)
        if self.server.metrics is not None:
            self.server.metrics.pull_latency.observe(time.perf_counter() - t0)
            self.server.metrics.pull_messages.inc(outcome.count)
        return outcome

    async def _pull(self, topic, qid, offset, max_msgs, max_bytes, tag_filter, timeout, raw, context) -> Pulled:
        deadline = time.monotonic() + timeout
        waiters = self.server.waiters
        while True:
            fut = waiters.register(topic, qid) if timeout > 0 else None
            try:
                outcome = self._read_queue(topic, qid, offset, max_msgs, max_bytes, tag_filter, raw)
                left = deadline - time.monotonic()
                if settled(outcome.status, outcome.count, offset, outcome.next_offset) or left <= 0 or fut is None or self.server.stopping:
                    return outcome
                try:
                    async with asyncio.timeout(left):  # (the waiter is this call's own: cancelled at the timeout)
                        await fut
                except TimeoutError:
                    if not fut.done() or fut.cancelled():
                        return outcome  # (an arrival in the timeout's own pass is looked at: the deadline answers then)
            finally:
                if fut is not None:
                    waiters.unregister(topic, qid, fut)
            if context is not None and context.cancelled():
                return outcome

    async def Subscribe(self, request: pb.SubscribeRequest, context):
        await self._ready(context)
        await self._readable(context)
        topic = v.check_known_topic(self.store, v.check_topic(request.topic))
        qid = v.check_queue_id(request.queue_id)
        if request.offset < -1:
            raise v.InvalidArgument("offset", f"must be >= -1, got {request.offset}")
        max_msgs = v.check_range(request.max_messages, "max_messages", 0, v.MAX_PULL_MESSAGES) or v.DEFAULT_PULL_MESSAGES
        if request.group:
            v.check_group(request.group)
        offset = self.store.max_offset(topic, qid) if request.offset == -1 else request.offset
        while not self.server.stopping:
            got = await self._pull(
                topic, qid, offset, max_msgs, v.DEFAULT_PULL_BYTES, request.tag_filter or None, 1.0, request.raw, context
            )
            # messages, or a move (retention passed us, the queue was reset); nothing to send for "nothing
            # yet" or a follower past its end, which keep the offset
            if got.count or got.next_offset != offset:
                offset = got.next_offset
                yield got.response

    # ------------------------------------------------------------------ lookups

    async def QueryByKey(self, request: pb.QueryByKeyRequest, context) -> pb.QueryByKeyResponse:
        await self._ready(context)
        topic = v.check_topic(request.topic)
        if not request.key:
            raise v.InvalidArgument("key", "must not be empty")
        n = v.check_range(request.max_results, "max_results", 0, v.MAX_QUERY_RESULTS) or v.DEFAULT_QUERY_RESULTS
        begin = v.check_non_negative(request.begin_timestamp, "begin_timestamp")
        end = v.check_non_negative(request.end_timestamp, "end_timestamp") or None
        msgs = self.store.query_message(topic, request.key, n, begin, end)
        return pb.QueryByKeyResponse(messages=[message_to_pb(m) for m in msgs])

    async def GetMessage(self, request: pb.GetMessageRequest, context) -> pb.GetMessageResponse:
        await self._ready(context)
        which = request.WhichOneof("by")
        if which == "msg_id":
            try:
                msg = self.store.message_by_id(request.msg_id)
            except ValueError as e:
                raise v.InvalidArgument("msg_id", str(e)) from None
        elif which == "commitlog_offset":
            msg = self.store.look_message_by_offset(v.check_non_negative(request.commitlog_offset, "commitlog_offset"))
        else:
            raise v.InvalidArgument("by", "give msg_id or commitlog_offset")
        caller = CALLER.get()
        if msg is None or not caller.may("topic", msg.topic, "get"):
            # (a message the caller may not read is answered as one that is not there: a refusal would say it exists, and its topic)
            mine = "" if caller.user is None else f", or not one user {caller.name} may get"
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no message there (never written, or deleted by retention{mine})")
        return pb.GetMessageResponse(message=message_to_pb(msg))

    async def GetQueueOffsets(self, request: pb.GetQueueOffsetsRequest, context) -> pb.GetQueueOffsetsResponse:
        await self._ready(context)
        topic = v.check_topic(request.topic)
        if request.HasField("queue_id"):
            qids = [v.check_queue_id(request.queue_id)]
        else:
            qids = sorted(set(range(self.server.queue_count(topic))) | set(self.store.queues_of(topic)))
        return pb.GetQueueOffsetsResponse(
            queues=[
                pb.QueueOffsets(queue_id=q, min_offset=self.store.min_offset(topic, q), max_offset=self.store.max_offset(topic, q))
                for q in qids
            ]
        )

    async def GetOffsetByTime(self, request: pb.GetOffsetByTimeRequest, context) -> pb.GetOffsetByTimeResponse:
        await self._ready(context)
        topic = v.check_topic(request.topic)
        qid = v.check_queue_id(request.queue_id)
        ts = v.check_non_negative(request.timestamp, "timestamp")
        off = self.store.offset_by_time(topic, qid, ts, upper=request.boundary == pb.UPPER)
        return pb.GetOffsetByTimeResponse(offset=off)

    # ------------------------------------------------------------------ offsets and topics

    async def CommitOffset(self, request: pb.CommitOffsetRequest, context) -> pb.CommitOffsetResponse:
        await self._ready(context)
        if self.store.follower:  # progress lives on the master; followers copy it from there
            await context.abort(grpc.StatusCode.UNAVAILABLE, "this node is a follower: commit on its group's master")
        v.check_group(request.group)
        topic = v.check_topic(request.topic)
        qid = v.check_queue_id(request.queue_id)
        offset = v.check_non_negative(request.offset, "offset")
        # durable before it is acknowledged: the write (and its fsync) runs off the event loop
        await asyncio.get_running_loop().run_in_executor(self.server.executor, self.store.commit_offset, request.group, topic, qid, offset)
        return pb.CommitOffsetResponse()

    async def GetCommittedOffset(self, request: pb.GetCommittedOffsetRequest, context) -> pb.GetCommittedOffsetResponse:
        await self._ready(context)
        v.check_group(request.group)
        topic = v.check_topic(request.topic)
        qid = v.check_queue_id(request.queue_id)
        return pb.GetCommittedOffsetResponse(offset=self.store.query_offset(request.group, topic, qid))

    async def CreateTopic(self, request: pb.CreateTopicRequest, context) -> pb.TopicInfo:
        await self._ready(context)
        topic = v.check_topic(request.topic)
        queues = v.check_range(request.queues, "queues", 0, 1024) or None
        if request.perm not in (0, 2, 4, 6):
            raise v.InvalidArgument("perm", f"6 (read and write), 4 (read only) or 2 (write only), got {request.perm}")
        if request.message_type and request.message_type not in (*MESSAGE_TYPES, "UNSPECIFIED"):
            raise v.InvalidArgument("message_type", f"one of {', '.join(MESSAGE_TYPES)} or UNSPECIFIED, got {request.message_type[:40]!r}")
        try:
            return _topic_pb(self.store.create_topic(topic, queues, request.perm or None, request.message_type or None))
        except ResourceLimit as e:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
            raise

    async def DeleteTopic(self, request: pb.DeleteTopicRequest, context) -> pb.DeleteTopicResponse:
        await self._ready(context)
        topic = v.check_topic(request.topic)
        if is_store_topic(topic):
            raise v.InvalidArgument("topic", f"{topic} is the store's own (system, retry or dead-letter topic): it is not deleted")
        if self.store.follower:  # a follower drops a topic's queues when its master's metadata says it is gone
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "this node is a follower: delete topics on its group's master")
        try:
            deleted, held = await asyncio.get_running_loop().run_in_executor(
                self.server.executor, lambda: self.store.delete_topic(topic, request.force, request.dry_run)
            )
        except TopicNotEmpty as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
            raise
        except StoreStateError as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(e))
            raise
        return pb.DeleteTopicResponse(deleted=deleted, messages=held)

    async def ListTopics(self, request: pb.ListTopicsRequest, context) -> pb.ListTopicsResponse:
        await self._ready(context)
        caller = CALLER.get()  # the topics the caller may use at all (RocketMQ's ACL 2.0 lists all to a Cluster List holder)
        return pb.ListTopicsResponse(topics=[_topic_pb(t) for t in self.store.topic_list() if caller.uses("topic", t.name)])

    async def GetRoute(self, request: pb.GetRouteRequest, context) -> pb.GetRouteResponse:
        if request.topic:
            v.check_topic(request.topic)
        local = self.server.local_route(request.topic)
        if request.local_only:
            return pb.GetRouteResponse(nodes=[local])
        access = self.server.options.access_points
        try:
            nodes = await self.server.route(request.topic, local)
        except DuplicateNodeName as e:
            log.error("%s", e)
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        if request.topic and not any(n.queue_ids for n in nodes) and not self.server.topic_known(request.topic):
            raise v.TopicNotFound(f"topic: no topic {request.topic} on any node (autoCreateTopicEnable is off: create it first)")
        return pb.GetRouteResponse(nodes=nodes, via_access_point=access is not None, access_points=access or ())


def _error_text(res) -> str:
    if res.status.stored:
        return ""
    if res.unavailable is Unavailable.DISK_FULL:
        return f"{DISK_FULL}: {res.reason}"
    return res.reason


def _topic_pb(t) -> pb.TopicInfo:
    return pb.TopicInfo(
        name=t.name, read_queue_nums=t.read_queue_nums, write_queue_nums=t.write_queue_nums, perm=t.perm, message_type=t.message_type
    )


def _pull_response(result: GetResult) -> pb.PullResponse:
    resp = pb.PullResponse(
        status=PULL_STATUS[result.status],
        next_offset=result.next_offset,
        min_offset=result.min_offset,
        max_offset=result.max_offset,
        record_count=len(result),
    )
    for b in result.buffers:
        try:
            m = codec.decode(b)
        except (ValueError, IndexError, struct.error) as e:  # a record damaged on disk past recovery's checks
            log.error("a record cannot be decoded (%s); left out of the pull", e)
            resp.record_count -= 1
            continue
        resp.messages.append(message_to_pb(m))
    return resp


__all__ = ["DataPlane", "PutStatus"]
