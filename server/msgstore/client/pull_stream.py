"""A consumer's long polls of one node as requests on one stream (PullQueuesStream).

A consumer keeping up with a trickle long-polls once per arrival. As a unary call each cost the
store 340-360 µs of CPU in Python gRPC with nothing behind it; a request and its answer on an
open stream cost it 155 µs (measured on this VM against bare echo servers). At 5,000 msg/s
that was a sixth of the core the store had.

Synchronous gRPC reads a stream's next answer without a timeout, and a call's deadline covers
its whole life. So each stream has a watchdog thread: a pull not answered by its own deadline
cancels the stream (the pull then fails as a timed-out call would, and the consumer opens a new
stream for its next pull). The watchdog wakes at a pull's deadline, not at every pull: it is
notified only when a pull's deadline comes before the time it already sleeps until.
"""

from __future__ import annotations

import asyncio
import math
import queue
import threading
import time
from typing import Any

import grpc

from ..v1 import msgstore_pb2 as pb

_END = object()  # put on the request queue: the stream's requests are over


class StreamEnded(ConnectionError):
    """The node ended the stream without answering a request (it is stopping)."""


class PullStream:
    """One open PullQueuesStream to a node: ``pull`` sends a request and waits for its answer.
    One pull at a time (a consumer's polls are sequential); ``close`` may come from any thread."""

    def __init__(self, method: Any, metadata: tuple | None):
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._call = method(iter(self._requests.get, _END), metadata=metadata or None)
        self._lock = threading.Condition()
        self._due: float | None = None  # the deadline of the pull waiting, if one is
        self._wake_at = math.inf  # when the watchdog wakes next, unless notified
        self.closed = False
        self._watchdog = threading.Thread(target=self._watch, name="msgstore-pull-stream", daemon=True)
        self._watchdog.start()
        self._call.add_done_callback(lambda _call: self.close())  # (ended by the node, or the channel closed)

    def pull(self, request: pb.PullQueuesRequest, within: float) -> pb.PullQueuesResponse:
        """The answer to ``request``; the stream's ``grpc.RpcError`` (CANCELLED past ``within``
        seconds, or closed; the node's status when it ended the stream: UNIMPLEMENTED from a
        node older than it), or StreamEnded. After an error the stream is closed: open another."""
        due = time.monotonic() + within
        with self._lock:
            self._due = due
            if due < self._wake_at:
                self._lock.notify()
        self._requests.put(request)
        try:
            return next(self._call)
        except StopIteration:
            self.close()
            raise StreamEnded("the node ended the pull stream") from None
        except BaseException:
            self.close()
            raise
        finally:
            with self._lock:
                self._due = None

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._lock.notify()
        self._requests.put(_END)
        self._call.cancel()

    def _watch(self) -> None:
        with self._lock:
            while not self.closed:
                now = time.monotonic()
                if self._due is not None and now >= self._due:
                    self._due = None
                    self.close()  # (the pull waiting raises CANCELLED; closed at once, so no next pull takes this stream)
                    return
                self._wake_at = math.inf if self._due is None else self._due
                self._lock.wait(None if self._due is None else self._due - now)


class AsyncPullStream:
    """PullStream for asyncio (AsyncConsumer): the read's timeout is ``asyncio.wait_for``'s, so
    no watchdog. A pull cancelled or timed out leaves its request unanswered on the stream, so
    the stream is closed then (its late answer would be taken for the next request's).

    Requests go through an iterator, as PullStream's, not ``call.write``: a write racing the
    node's end of the stream overwrites its status with "Internal error from Core"
    (grpc/grpc#36066, errors.LOST_STATUS), and a node older than the stream, its UNIMPLEMENTED
    lost so, was asked again at the next polls under load. The iterator's writes go through
    the same ``_write`` in grpc.aio, so that is rarer now, not gone: such a node may be asked
    a second time."""

    def __init__(self, method: Any, metadata: tuple | None):
        self._requests: asyncio.Queue = asyncio.Queue()
        self._call = method(self._each_request(), metadata=metadata or None)
        self.closed = False

    async def _each_request(self):
        while (request := await self._requests.get()) is not _END:
            yield request

    async def pull(self, request: pb.PullQueuesRequest, within: float) -> pb.PullQueuesResponse:
        """The answer to ``request``; the stream's ``grpc.aio.AioRpcError``, TimeoutError past
        ``within`` seconds, or StreamEnded. After any of them the stream is closed."""
        self._requests.put_nowait(request)
        try:
            async with asyncio.timeout(within):  # (not wait_for: its task for the read cost passes of the loop)
                answer = await self._call.read()
        except BaseException:
            self.close()
            raise
        if answer is grpc.aio.EOF:
            self.close()
            raise StreamEnded("the node ended the pull stream")
        return answer  # type: ignore[no-any-return]

    def close(self) -> None:
        self.closed = True
        self._requests.put_nowait(_END)
        self._call.cancel()
