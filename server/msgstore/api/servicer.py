"""The data plane (``msgstore.v1.MessageStore``): thin handlers over the store."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

import grpc

from ..store import GetStatus, PutStatus, Unavailable, codec
from ..store.results import GetResult
from ..v1 import msgstore_pb2 as pb
from . import validation as v
from .convert import PULL_STATUS, SEND_STATUS, message_to_pb

if TYPE_CHECKING:
    from .server import StoreServer

log = logging.getLogger(__name__)

DISK_FULL = "disk full"
WAITABLE = (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE)


class DataPlane:
    def __init__(self, server: "StoreServer"):
        self.server = server

    @property
    def store(self):
        return self.server.store

    async def _ready(self, context) -> None:
        reason = self.server.unavailable_reason()
        if reason:
            await context.abort(grpc.StatusCode.UNAVAILABLE, reason)

    # ------------------------------------------------------------------ send

    async def Send(self, request: pb.SendRequest, context) -> pb.SendResponse:
        await self._ready(context)
        t0 = time.perf_counter()
        n = len(request.entries)
        if not 1 <= n <= v.MAX_BATCH:
            raise v.InvalidArgument("entries", f"must hold 1 to {v.MAX_BATCH} entries, got {n}")
        store = self.store
        born_host = _peer_host(context)
        max_body = store.config.maxMessageSize
        msgs = [v.entry_to_message(e, i, max_body, born_host) for i, e in enumerate(request.entries)]
        if request.HasField("wait_flush") and not request.wait_flush:
            for m in msgs:
                m.properties[codec.PROP_WAIT] = "false"
        groups: dict[tuple[str, int], list[int]] = {}
        for i, m in enumerate(msgs):
            groups.setdefault((m.topic, m.queue_id), []).append(i)
        for (topic, qid), idx in groups.items():
            limit = self.server.queue_count(topic)
            if qid >= limit:
                raise v.InvalidArgument(f"entries[{idx[0]}].queue_id", f"{qid} is out of range: topic {topic} has {limit} queues")
        loop = asyncio.get_running_loop()
        results = await loop.run_in_executor(self.server.executor, self._put_groups, groups, msgs)
        store.dispatcher.wakeup()  # once per call: consumers see the batch without waiting a poll
        if all(r.status == pb.SERVICE_NOT_AVAILABLE for r in results):  # nothing stored: fail the call
            full = results[0].error.startswith(DISK_FULL)
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED if full else grpc.StatusCode.UNAVAILABLE, results[0].error)
        m = self.server.metrics
        if m is not None:
            m.put_latency.observe(time.perf_counter() - t0)
            for r in results:
                m.put_messages.labels(pb.SendStatus.Name(r.status)).inc()
        return pb.SendResponse(results=results, node=self.server.node_name)

    def _put_groups(self, groups: dict[tuple[str, int], list[int]], msgs: list[codec.Message]) -> list[pb.SendResult]:
        results: list[pb.SendResult | None] = [None] * len(msgs)
        store = self.store
        for (topic, qid), idx in groups.items():
            res = store.put_messages(topic, qid, [msgs[i] for i in idx])
            status = SEND_STATUS[res.status]
            if res.status.stored:
                if self.server.metrics is not None:
                    self.server.metrics.put_bytes.inc(res.wrote_bytes)
                for i, (mid, qoff, phy) in zip(idx, res.entries()):
                    results[i] = pb.SendResult(status=status, message_id=mid, queue_id=qid, queue_offset=qoff, commitlog_offset=phy)
            else:
                error = res.reason
                if res.unavailable is Unavailable.DISK_FULL:
                    error = f"{DISK_FULL}: {res.reason}"
                for i in idx:
                    results[i] = pb.SendResult(status=status, queue_id=qid, error=error)
        return results  # type: ignore[return-value]

    # ------------------------------------------------------------------ pull

    async def Pull(self, request: pb.PullRequest, context) -> pb.PullResponse:
        await self._ready(context)
        topic = v.check_topic(request.topic)
        qid = v.check_queue_id(request.queue_id)
        offset = v.check_non_negative(request.offset, "offset")
        max_msgs = v.check_range(request.max_messages, "max_messages", 0, v.MAX_PULL_MESSAGES) or v.DEFAULT_PULL_MESSAGES
        max_bytes = v.check_range(request.max_bytes, "max_bytes", 0, v.MAX_PULL_BYTES) or v.DEFAULT_PULL_BYTES
        timeout = v.check_range(request.timeout_ms, "timeout_ms", 0, v.MAX_TIMEOUT_MS) / 1000
        if request.group:
            v.check_group(request.group)
        return await self._pull(topic, qid, offset, max_msgs, max_bytes, request.tag_filter or None, timeout, request.raw, context)

    async def _pull(self, topic, qid, offset, max_msgs, max_bytes, tag_filter, timeout, raw, context) -> pb.PullResponse:
        deadline = time.monotonic() + timeout
        waiters = self.server.waiters
        while True:
            fut = waiters.register(topic, qid) if timeout > 0 else None
            try:
                t0 = time.perf_counter()
                result = self.store.get_message(None, topic, qid, offset, max_msgs, max_bytes, tag_filter)
                with result:
                    response = _pull_response(result, raw)
                if self.server.metrics is not None:
                    self.server.metrics.pull_latency.observe(time.perf_counter() - t0)
                    self.server.metrics.pull_messages.inc(response.record_count)
                left = deadline - time.monotonic()
                if result.status not in WAITABLE or left <= 0 or fut is None or self.server.stopping:
                    return response
                try:
                    await asyncio.wait_for(asyncio.shield(fut), left)
                except asyncio.TimeoutError:
                    return response
            finally:
                if fut is not None:
                    waiters.unregister(topic, qid, fut)
            if context is not None and context.cancelled():
                return response

    async def Subscribe(self, request: pb.SubscribeRequest, context):
        await self._ready(context)
        topic = v.check_topic(request.topic)
        qid = v.check_queue_id(request.queue_id)
        if request.offset < -1:
            raise v.InvalidArgument("offset", f"must be >= -1, got {request.offset}")
        max_msgs = v.check_range(request.max_messages, "max_messages", 0, v.MAX_PULL_MESSAGES) or v.DEFAULT_PULL_MESSAGES
        if request.group:
            v.check_group(request.group)
        offset = self.store.max_offset(topic, qid) if request.offset == -1 else request.offset
        while not self.server.stopping:
            resp = await self._pull(topic, qid, offset, max_msgs, v.DEFAULT_PULL_BYTES, request.tag_filter or None, 1.0,
                                    request.raw, context)
            if resp.status == pb.OFFSET_TOO_SMALL or resp.status == pb.OFFSET_OVERFLOW_BADLY:
                offset = resp.next_offset  # retention moved past us, or the queue was reset
                yield resp
                continue
            if resp.record_count or resp.next_offset != offset:
                offset = resp.next_offset
                yield resp

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
        if msg is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no message there (never written, or deleted by retention)")
        return pb.GetMessageResponse(message=message_to_pb(msg))

    async def GetQueueOffsets(self, request: pb.GetQueueOffsetsRequest, context) -> pb.GetQueueOffsetsResponse:
        await self._ready(context)
        topic = v.check_topic(request.topic)
        if request.HasField("queue_id"):
            qids = [v.check_queue_id(request.queue_id)]
        else:
            qids = sorted(set(range(self.server.queue_count(topic))) | set(self.store.queues_of(topic)))
        return pb.GetQueueOffsetsResponse(queues=[
            pb.QueueOffsets(queue_id=q, min_offset=self.store.min_offset(topic, q), max_offset=self.store.max_offset(topic, q))
            for q in qids])

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
        v.check_group(request.group)
        topic = v.check_topic(request.topic)
        qid = v.check_queue_id(request.queue_id)
        offset = v.check_non_negative(request.offset, "offset")
        self.store.commit_offset(request.group, topic, qid, offset)
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
        return _topic_pb(self.store.create_topic(topic, queues))

    async def ListTopics(self, request: pb.ListTopicsRequest, context) -> pb.ListTopicsResponse:
        await self._ready(context)
        return pb.ListTopicsResponse(topics=[_topic_pb(t) for t in self.store.topic_list()])

    async def GetRoute(self, request: pb.GetRouteRequest, context) -> pb.GetRouteResponse:
        if request.topic:
            v.check_topic(request.topic)
        local = self.server.local_route(request.topic)
        if request.local_only:
            return pb.GetRouteResponse(nodes=[local])
        return pb.GetRouteResponse(nodes=await self.server.route(request.topic, local))


def _topic_pb(t) -> pb.TopicInfo:
    return pb.TopicInfo(name=t.name, read_queue_nums=t.read_queue_nums, write_queue_nums=t.write_queue_nums, perm=t.perm)


def _pull_response(result: GetResult, raw: bool) -> pb.PullResponse:
    resp = pb.PullResponse(status=PULL_STATUS[result.status], next_offset=result.next_offset,
                           min_offset=result.min_offset, max_offset=result.max_offset, record_count=len(result))
    if len(result):
        if raw:
            resp.records = result.raw()
        else:
            resp.messages.extend(message_to_pb(codec.decode(b)) for b in result.buffers)
    return resp


def _peer_host(context) -> tuple[str, int]:
    """The client's address as BORNHOST (ipv4:1.2.3.4:5 / ipv6:[::1]:5 in gRPC's notation)."""
    peer = context.peer() if context is not None else ""
    try:
        kind, _, rest = peer.partition(":")
        if kind == "ipv4":
            ip, _, port = rest.rpartition(":")
            return ip, int(port)
        if kind == "ipv6":
            ip, _, port = rest.rpartition(":")
            return ip.strip("[]").replace("%25", "%").split("%")[0], int(port)
    except ValueError:
        pass
    return "127.0.0.1", 0


__all__ = ["DataPlane", "PutStatus"]
