"""PullQueues: a consumer's whole share of a node's queues in one call.

A consumer of an 8-queue topic that pulled each queue on its own made eight calls per round:
at 5,000 msg/s those calls, not the messages, held most of the store's and the consumer's CPU
(a gRPC unary call costs the server about as much as reading a few hundred records), and sends
queued behind them (issue 30: ack p50 20–130 ms). One call reads every queue it names, in
order, and long-polls all of them at once: it answers when any has messages. Kafka's Fetch
works the same way (every partition a consumer holds on a broker, in one request).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import grpc

from ..acl.identity import CALLER, Denied, NotReady
from ..store import GetStatus
from ..v1 import msgstore_pb2 as pb
from . import permissions
from . import validation as v
from .convert import varint
from .longpoll import Alarm

if TYPE_CHECKING:
    from .member import Member

MAX_PULLS = 1024
MAX_CALL_BYTES = 32 * 1024 * 1024  # under the 64 MiB message limit even past the budget by a message
_RESULT = b"\x0a"  # PullQueuesResponse.results, length-delimited
# what a long poll waits out; any other status answers at once (the caller must move its offset)
WAITABLE = (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE)


def settled(status: GetStatus, count: int, offset: int, next_offset: int) -> bool:
    """Whether a look at a queue answers a long poll now: it found messages, or it moves the
    caller (a bad offset, a filter's "no match"). An answer that keeps the caller's offset (a
    follower past its end, docs/store-format.md §7) waits like "nothing yet": answered at once,
    it would bring the consumer straight back."""
    return count > 0 or (status not in WAITABLE and next_offset != offset)


class PullQueuesHandlers:
    server: Member

    async def PullQueues(self, request: pb.PullQueuesRequest, context) -> bytes:
        await self._ready(context)  # type: ignore[attr-defined]
        await self._readable(context)  # type: ignore[attr-defined]
        return await self._answer(request, context)

    async def PullQueuesStream(self, requests, context) -> None:
        """PullQueues over one stream, for a consumer that long-polls a trickle: each of its
        calls cost the store an empty gRPC call's 340-360 µs of CPU in Python, a request and
        its answer on a stream 155 µs (measured on this VM, no store behind either). Each
        request is checked as its own PullQueues call would be (the caller's rights too, a
        revoke applying to the next request); a refusal ends the stream with its status."""
        async for request in requests:
            if isinstance(request, v.BadRequest):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)
            try:  # (the caller first, as a call's is checked before it is served: a refusal raises in the consumer)
                caller = self.server.authenticator.refreshed(CALLER.get())
                CALLER.set(caller)
                permissions.require(caller, permissions.V1["PullQueues"](request))
            except (NotReady, Denied) as e:
                await context.abort(*v.refusal(e))
            await self._ready(context)  # type: ignore[attr-defined]
            await self._readable(context)  # type: ignore[attr-defined]
            try:
                answer = await self._answer(request, context)
            except (v.InvalidArgument, v.TopicNotFound) as e:
                await context.abort(*v.refusal(e))
            await context.write(answer)

    async def _answer(self, request: pb.PullQueuesRequest, context) -> bytes:
        """A PullQueuesResponse, serialized; InvalidArgument naming the field."""
        if not request.pulls:
            raise v.InvalidArgument("pulls", "names no queue")
        if len(request.pulls) > MAX_PULLS:
            raise v.InvalidArgument("pulls", f"at most {MAX_PULLS} queues per call, got {len(request.pulls)}")
        pulls = []
        for i, p in enumerate(request.pulls):
            try:
                if p.timeout_ms:
                    raise v.InvalidArgument("timeout_ms", "must be 0: the call's timeout_ms waits for all of them")
                pulls.append((*self._checked_pull(p), self._filter_of(p), p.raw, p.group))  # type: ignore[attr-defined]
            except v.InvalidArgument as e:
                raise v.InvalidArgument(f"pulls[{i}].{e.field}", str(e).partition(": ")[2]) from None
        timeout = v.check_range(request.timeout_ms, "timeout_ms", 0, v.MAX_TIMEOUT_MS) / 1000
        budget = v.check_range(request.max_bytes, "max_bytes", 0, MAX_CALL_BYTES) or v.DEFAULT_PULL_BYTES
        deadline = time.monotonic() + timeout
        waiters = self.server.waiters
        looks: list = [None] * len(pulls)  # each queue's last look (its response)
        stale: list[int] = list(range(len(pulls)))  # the queues to look at (again)
        futures: dict[int, asyncio.Future] = {}
        alarm = Alarm(asyncio.get_running_loop())  # set by any queue's arrival, with its future
        try:
            while True:
                if timeout > 0:  # registered before the look: an arrival after it is not missed
                    for i in stale:
                        futures[i] = waiters.register(pulls[i][0], pulls[i][1], alarm)
                ready = self._look(pulls, stale, looks, budget)
                left = deadline - time.monotonic()
                if ready or left <= 0 or not futures or self.server.stopping:
                    return self._framed(pulls, looks)
                try:
                    async with asyncio.timeout(left):
                        await alarm.fut
                except TimeoutError:
                    pass
                alarm.rearm()
                # Only the queues that had arrivals are looked at again: the others' futures
                # are still pending, so nothing came since their look, and it stands. A
                # consumer of an 8-queue topic woken by one batch otherwise paid eight reads.
                stale = sorted(i for i, fut in futures.items() if fut.done())  # (in request order: the budget goes to earlier queues first)
                if not stale:  # (the timeout)
                    return self._framed(pulls, looks)
                for i in stale:
                    waiters.unregister(pulls[i][0], pulls[i][1], futures.pop(i))
                if context is not None and context.cancelled():
                    return self._framed(pulls, looks)
        finally:
            for i, fut in futures.items():
                waiters.unregister(pulls[i][0], pulls[i][1], fut)

    def _look(self, pulls: list, which: list[int], looks: list, budget: int) -> bool:
        """Look at the queues ``which`` (in order) into ``looks``; whether the call should answer
        now: a queue has messages, or says something other than "nothing yet" (a bad offset).
        The byte budget goes to earlier queues first; the queues not looked at again found
        nothing, so took none of it."""
        ready = False
        for i in which:
            topic, qid, offset, max_msgs, max_bytes, tag_filter, raw, _group = pulls[i]
            if budget <= 0:  # the rest wait for the next call, their offsets unchanged
                looks[i] = pb.PullResponse(next_offset=offset)
                continue
            outcome = self._read_queue(topic, qid, offset, max_msgs, min(max_bytes, budget), tag_filter, raw)  # type: ignore[attr-defined]
            budget -= outcome.size
            ready = ready or settled(outcome.status, outcome.count, offset, outcome.next_offset)
            looks[i] = outcome.response
        return ready

    def _framed(self, pulls: list, looks: list) -> bytes:
        """The PullQueuesResponse: each queue's answer framed as a results entry, in order,
        with its group's generation as of now."""
        parts: list[bytes] = []
        for p, look in zip(pulls, looks):
            response = self._with_generation(p[7], look)  # type: ignore[attr-defined]
            data = response if isinstance(response, bytes) else response.SerializeToString()
            parts += (_RESULT + varint(len(data)), data)
        return b"".join(parts)
