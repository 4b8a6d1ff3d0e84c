"""One SendStream per node, shared by every thread (or task) of a client.

A unary Send costs a whole gRPC round trip of bookkeeping per call; over a stream a request is
one message on a connection that stays open. Requests that queue up while the previous one is
being written travel together: their SendRequest bytes are concatenated into one request
(protobuf merges repeated fields by concatenation, so the entries simply add up) under one
request_id, the server appends them with one append per queue and lets them share one
group-commit flush, and the answer's results are sliced back to each caller in entry order.
Only requests with the same wait flags are merged. A merged request refused as INVALID_ARGUMENT
(nothing of it was stored: validation runs before any append) fails only the part holding the
entry the error names (renumbered to that caller's own entries) and the other parts go again,
first in line; when the error names no entry, each part goes again on its own.

At most ``max_in_flight`` requests wait for answers (back-pressure: ``submit`` blocks beyond).
When the stream breaks, every pending future fails with a retryable StoreError (UNAVAILABLE) and
the client opens a new stream for the next send.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import itertools
import queue
import re
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from ..v1 import msgstore_pb2 as pb
from ..wire.varint import varint
from .errors import StoreError, error_from

METHOD = "/msgstore.v1.MessageStore/SendStream"
MAX_IN_FLIGHT = 1024
MERGE_BYTES = 4 << 20  # a merged request stays far below the server's request limit
MERGE_PARTS = 512
_CODES = {c.value[0]: c for c in grpc.StatusCode}


@dataclass(slots=True)
class Part:
    """One caller's request: its encoded SendRequest (request_id 0), entry count, wait flags."""

    data: bytes
    entries: int
    flags: tuple
    future: Any  # concurrent.futures.Future or asyncio.Future of list[pb.SendResult]
    alone: bool = False  # resent after its merged request was refused: not merged again


def tagged(parts: list[Part], request_id: int) -> bytes:
    """The parts as one SendRequest carrying ``request_id`` (field 4, varint)."""
    return b"".join(p.data for p in parts) + b"\x20" + varint(request_id)


def refusal(resp: pb.SendResponse, node: str) -> StoreError | None:
    if not resp.error_code:
        return None
    return StoreError(_CODES.get(resp.error_code, grpc.StatusCode.UNKNOWN), resp.error_message, node)


_ENTRY = re.compile(r"^entries\[(\d+)\]")


def blame(batch: list[Part], error: StoreError) -> tuple[list[tuple[Part, StoreError]], list[Part]]:
    """A merged request refused as INVALID_ARGUMENT: (parts to fail with their own error,
    parts to send again). Nothing of the request was stored."""
    m = _ENTRY.match(error.details)
    if m is not None:
        index, start = int(m.group(1)), 0
        for j, part in enumerate(batch):
            if start <= index < start + part.entries:
                own = StoreError(error.code, f"entries[{index - start}]{error.details[m.end() :]}", error.node)
                return [(part, own)], batch[:j] + batch[j + 1 :]
            start += part.entries
    for part in batch:
        part.alone = True
    return [], batch


def split_results(parts: list[Part], resp: pb.SendResponse) -> list[tuple[Part, Sequence[pb.SendResult]]]:
    """Each part's results: the response's own container when one part had it all (the usual
    case: copying 500 results into a list cost more than the rest of reading them)."""
    if len(parts) == 1:
        return [(parts[0], resp.results)]
    out, i = [], 0
    for p in parts:
        out.append((p, resp.results[i : i + p.entries]))
        i += p.entries
    return out


CLOSE: Any = object()  # queued by close(): the request iterator ends
WAKE: Any = object()  # queued after parts were put back in front: look there


class _Batcher:
    """Takes parts off a queue and merges those that wait there together."""

    def __init__(self) -> None:
        self.carry: Part | None = None

    def merge(self, first: Part, more) -> list[Part]:
        """``more()`` returns the next queued part without waiting (None when none is)."""
        batch, size = [first], len(first.data)
        if first.alone:
            return batch
        while size < MERGE_BYTES and len(batch) < MERGE_PARTS:
            nxt = more()
            if nxt is None:
                break
            if nxt is WAKE:
                continue
            if nxt is CLOSE or nxt.alone or nxt.flags != first.flags or size + len(nxt.data) > MERGE_BYTES:
                self.carry = nxt
                break
            batch.append(nxt)
            size += len(nxt.data)
        return batch


class SendStream:
    """The thread-safe stream of the synchronous client."""

    def __init__(self, channel: grpc.Channel, node: str, metadata: tuple = (), max_in_flight: int = MAX_IN_FLIGHT):
        self.node = node
        self._pending: dict[int, list[Part]] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._outbox: queue.SimpleQueue[Part] = queue.SimpleQueue()
        self._again: collections.deque[Part] = collections.deque()  # refused merged parts, sent first
        self._batcher = _Batcher()
        self.broken: StoreError | None = None
        call = channel.stream_stream(METHOD, request_serializer=None, response_deserializer=pb.SendResponse.FromString)
        self._call = call(self._requests(), metadata=metadata or None)
        self._reader = threading.Thread(target=self._read, name=f"msgstore-send-stream-{node}", daemon=True)
        self._reader.start()

    def submit(self, data: bytes, entries: int, flags: tuple = ()) -> concurrent.futures.Future[list[pb.SendResult]]:
        """Queue the encoded SendRequest ``data`` (``entries`` entries); the future gets its
        results, or a StoreError (the request refused as a whole, or the stream broken)."""
        if self.broken is not None:
            raise self.broken
        self._slots.acquire()
        fut: concurrent.futures.Future[list[pb.SendResult]] = concurrent.futures.Future()
        with self._lock:  # queued before the stream is marked broken, or refused: never lost
            if self.broken is not None:
                self._slots.release()
                raise self.broken
            self._outbox.put(Part(data, entries, flags, fut))
        return fut

    def send(self, data: bytes, entries: int, flags: tuple, timeout: float) -> list[pb.SendResult]:
        """:meth:`submit` and wait; DEADLINE_EXCEEDED after ``timeout`` (the request may still
        be stored: a retry is at-least-once, as with a unary Send)."""
        try:
            return self.submit(data, entries, flags).result(timeout)
        except concurrent.futures.TimeoutError:
            raise StoreError(grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer on the send stream within {timeout:g} s", self.node) from None

    def _next_queued(self) -> Part | None:
        if self._again:
            return self._again.popleft()
        try:
            return self._outbox.get_nowait()
        except queue.Empty:
            return None

    def _requests(self) -> Iterator[bytes]:
        """Runs on gRPC's request thread: while it writes one request, the next ones queue."""
        while True:
            first, self._batcher.carry = self._batcher.carry, None
            if first is None:
                first = self._next_queued() or self._outbox.get()
            if first is CLOSE:
                return
            if first is WAKE:
                continue
            batch = self._batcher.merge(first, self._next_queued)
            rid = next(self._ids)
            with self._lock:
                failure = self.broken
                if failure is None:
                    self._pending[rid] = batch
            if failure is not None:
                self._settle(batch, failure)
                continue
            yield tagged(batch, rid)

    def _read(self) -> None:
        try:
            for resp in self._call:
                with self._lock:
                    batch = self._pending.pop(resp.request_id, None)
                if batch is None:
                    continue
                error = refusal(resp, self.node)
                if error is None:
                    for part, results in split_results(batch, resp):
                        self._slots.release()
                        part.future.set_result(results)
                elif error.code == grpc.StatusCode.INVALID_ARGUMENT and len(batch) > 1:
                    failed, again = blame(batch, error)
                    for part, own in failed:
                        self._settle([part], own)
                    self._again.extend(again)
                    self._outbox.put(WAKE)  # the request thread may be waiting on the outbox
                else:
                    self._settle(batch, error)
            failure = StoreError(grpc.StatusCode.UNAVAILABLE, "the send stream ended", self.node)
        except grpc.RpcError as e:
            failure = error_from(e, self.node)
            if failure.code == grpc.StatusCode.CANCELLED:
                failure = StoreError(grpc.StatusCode.UNAVAILABLE, "the send stream was closed", self.node)
        self._fail(failure)

    def _settle(self, batch: list[Part], error: StoreError) -> None:
        for part in batch:
            self._slots.release()
            if not part.future.done():
                part.future.set_exception(error)

    def _fail(self, failure: StoreError) -> None:
        with self._lock:
            self.broken = failure
            pending, self._pending = self._pending, {}
        for batch in pending.values():
            self._settle(batch, failure)
        while (part := self._next_queued()) is not None:  # queued, never written
            if part is not CLOSE and part is not WAKE:
                self._settle([part], failure)
        self._outbox.put(CLOSE)  # the request iterator must not wait for parts that never come

    def close(self) -> None:
        self._outbox.put(CLOSE)
        self._call.cancel()
        self._reader.join(5)


def _time_out(fut: asyncio.Future, timeout: float, node: str) -> None:
    if not fut.done():
        fut.set_exception(StoreError(grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer on the send stream within {timeout:g} s", node))


class AsyncSendStream:
    """The same stream for :class:`~msgstore.client.aio.AsyncClient`, on one event loop."""

    def __init__(self, channel: grpc.aio.Channel, node: str, metadata: tuple = (), max_in_flight: int = MAX_IN_FLIGHT):
        self.node = node
        self._pending: dict[int, list[Part]] = {}
        self._ids = itertools.count(1)
        self._slots = asyncio.Semaphore(max_in_flight)
        self._outbox: asyncio.Queue[Part] = asyncio.Queue()
        self._again: collections.deque[Part] = collections.deque()
        self._batcher = _Batcher()
        self.broken: StoreError | None = None
        call = channel.stream_stream(METHOD, request_serializer=None, response_deserializer=pb.SendResponse.FromString)
        self._call = call(self._requests(), metadata=metadata or None)
        self._reader = asyncio.ensure_future(self._read())

    async def send(self, data: bytes, entries: int, flags: tuple, timeout: float | None) -> list[pb.SendResult]:
        if self.broken is not None:
            raise self.broken
        await self._slots.acquire()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[list[pb.SendResult]] = loop.create_future()
        self._outbox.put_nowait(Part(data, entries, flags, fut))
        # The answer's own future, awaited as it is: the caller runs on the loop's next pass
        # after the reader sets it (through asyncio.wait_for and asyncio.shield, two passes
        # later, each behind every other ready task). Past the timeout the future fails;
        # the reader skips a future that is done, and so would a cancelled caller's.
        timer = loop.call_later(timeout, _time_out, fut, timeout, self.node) if timeout is not None else None
        try:
            return await fut
        finally:
            if timer is not None:
                timer.cancel()

    def _next_queued(self) -> Part | None:
        if self._again:
            return self._again.popleft()
        try:
            return self._outbox.get_nowait()
        except asyncio.QueueEmpty:
            return None

    async def _requests(self) -> AsyncIterator[bytes]:
        while True:
            first, self._batcher.carry = self._batcher.carry, None
            if first is None:
                first = self._next_queued() or await self._outbox.get()
            if first is CLOSE:
                return
            if first is WAKE:
                continue
            batch = self._batcher.merge(first, self._next_queued)
            if self.broken is not None:
                self._settle(batch, self.broken)
                continue
            rid = next(self._ids)
            self._pending[rid] = batch
            yield tagged(batch, rid)

    async def _read(self) -> None:
        try:
            async for resp in self._call:
                batch = self._pending.pop(resp.request_id, None)
                if batch is None:
                    continue
                error = refusal(resp, self.node)
                if error is None:
                    for part, results in split_results(batch, resp):
                        self._slots.release()
                        if not part.future.done():
                            part.future.set_result(results)
                elif error.code == grpc.StatusCode.INVALID_ARGUMENT and len(batch) > 1:
                    failed, again = blame(batch, error)
                    for part, own in failed:
                        self._settle([part], own)
                    self._again.extend(again)
                    self._outbox.put_nowait(WAKE)
                else:
                    self._settle(batch, error)
            failure = StoreError(grpc.StatusCode.UNAVAILABLE, "the send stream ended", self.node)
        except grpc.aio.AioRpcError as e:
            failure = error_from(e, self.node)
            if failure.code == grpc.StatusCode.CANCELLED:
                failure = StoreError(grpc.StatusCode.UNAVAILABLE, "the send stream was closed", self.node)
        except asyncio.CancelledError:
            failure = StoreError(grpc.StatusCode.UNAVAILABLE, "the send stream was closed", self.node)
        self.broken = failure
        pending, self._pending = self._pending, {}
        for batch in pending.values():
            self._settle(batch, failure)
        while (part := self._next_queued()) is not None:
            if part is not CLOSE and part is not WAKE:
                self._settle([part], failure)
        self._outbox.put_nowait(CLOSE)

    def _settle(self, batch: list[Part], error: StoreError) -> None:
        for part in batch:
            self._slots.release()
            if not part.future.done():
                part.future.set_exception(error)

    async def close(self) -> None:
        self._outbox.put_nowait(CLOSE)
        self._call.cancel()
        try:
            await self._reader
        except asyncio.CancelledError:
            pass
