"""A producer that batches single ``send()`` calls in the background (like Kafka's).

``send()`` only queues the message and returns a future; a sender thread collects what
arrived within ``linger_ms`` (or ``max_batch`` messages), splits it by target queue and sends
each batch, the batches for different queues in parallel. A loop of single sends thus costs one
RPC per batch instead of one per message. Messages without a key fill one queue's batch
(``max_batch``), then the next queue's (Kafka's sticky partitioner), so batches stay large
and keyless load spreads evenly over every (node, queue) over time; keyed messages go by key
hash.

``send()`` is kept cheap on purpose: a lock-free append, and a future that allocates nothing
to wait on until someone actually waits (``concurrent.futures.Future`` builds a Condition and
an RLock per message, more than the rest of ``send()`` together).
"""

from __future__ import annotations

import collections
import concurrent.futures
import datetime
import itertools
import threading
import time
from collections.abc import Callable, Sequence

import grpc

from .client import Client, OutMessage, SendResult, StoreError
from .delays import delay_properties, group_properties
from .routing import QueueRef, first_turn


class SendFuture:
    """The result of one queued message; ``result()`` blocks until it is answered."""

    __slots__ = ("_producer", "_result", "_exception", "_done", "_callbacks")

    def __init__(self, producer: Producer):
        self._producer = producer
        self._result: SendResult | None = None
        self._exception: BaseException | None = None
        self._done = False
        self._callbacks: list[Callable[[SendFuture], None]] | None = None

    def done(self) -> bool:
        return self._done

    def result(self, timeout: float | None = None) -> SendResult:
        if not self._done:
            self._producer._wait_for(self, timeout)
        if self._exception is not None:
            raise self._exception
        return self._result  # type: ignore[return-value]

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._done:
            self._producer._wait_for(self, timeout)
        return self._exception

    def add_done_callback(self, fn: Callable[[SendFuture], None]) -> None:
        with self._producer._done_cond:
            if not self._done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        fn(self)


class Producer:
    def __init__(
        self,
        client: Client,
        *,
        linger_ms: float = 5,
        max_batch: int = 1000,
        max_buffered: int = 100_000,
        parallelism: int = 4,
        reorder: bool = False,
    ):
        """``reorder``: a keyed message whose queue is down goes to another queue instead of
        failing (retryably), which breaks its key's order (see :meth:`Client.send_batch`)."""
        self.client = client
        self.reorder = reorder
        self.linger_s = linger_ms / 1000
        self.max_batch = max_batch
        self.max_buffered = max_buffered
        self._items: collections.deque = collections.deque()
        self._turn = itertools.count(first_turn())  # the next keyless batch's queue, round robin
        self._wake = threading.Event()
        self._idle = False
        self._closed = False
        self._in_flight = 0
        self._done_cond = threading.Condition()
        self._space = threading.Condition()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=parallelism, thread_name_prefix="msgstore-producer")
        self._thread = threading.Thread(target=self._run, name="msgstore-producer", daemon=True)
        self._thread.start()

    def send(
        self,
        topic: str,
        body: bytes | str,
        *,
        key: str | None = None,
        keys: Sequence[str] = (),
        tags: str | None = None,
        properties: dict[str, str] | None = None,
        uniq_key: str | None = None,
        delay: float | datetime.timedelta | None = None,
        deliver_at: float | datetime.datetime | None = None,
        delay_level: int | None = None,
        message_group: str | None = None,
    ) -> SendFuture:
        """Queue one message; the future resolves to its :class:`SendResult` (``delay`` and
        the rest: as Client.send)."""
        if self._closed:
            raise RuntimeError("producer is closed")
        if isinstance(body, str):
            body = body.encode()
        fut = SendFuture(self)
        if len(self._items) >= self.max_buffered:
            with self._space:
                self._space.wait_for(lambda: len(self._items) < self.max_buffered or self._closed)
        props = {**(properties or {}), **delay_properties(delay, deliver_at, delay_level), **group_properties(message_group)}
        self._items.append((topic, message_group or key, OutMessage(body, key, keys, tags, props, uniq_key), fut))
        if self._idle:
            self._wake.set()
        return fut

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far has been answered."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._wake.set()
        with self._done_cond:
            while self._items or self._in_flight:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._done_cond.wait(min(left, 0.1) if left is not None else 0.1)
        return True

    def close(self, timeout: float | None = 30) -> None:
        self.flush(timeout)
        self._closed = True
        self._wake.set()
        self._thread.join(5)
        self._pool.shutdown(wait=True)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ futures

    def _wait_for(self, fut: SendFuture, timeout: float | None) -> None:
        self._wake.set()
        with self._done_cond:
            if not self._done_cond.wait_for(lambda: fut._done, timeout):
                raise concurrent.futures.TimeoutError()

    def _resolve(self, pairs: list[tuple[SendFuture, SendResult | None, BaseException | None]]) -> None:
        callbacks = []
        with self._done_cond:
            for fut, res, exc in pairs:
                fut._result, fut._exception, fut._done = res, exc, True
                if fut._callbacks:
                    callbacks.extend((cb, fut) for cb in fut._callbacks)
            self._done_cond.notify_all()
        for cb, fut in callbacks:
            cb(fut)

    # ------------------------------------------------------------------ sender thread

    def _run(self) -> None:
        items = self._items
        while True:
            if not items:
                if self._closed:
                    return
                self._idle = True
                if not items:  # re-check after announcing idleness: an append may have raced us
                    self._wake.wait(0.05)
                self._wake.clear()
                self._idle = False
                continue
            first_at = time.monotonic()
            while len(items) < self.max_batch and not self._closed:
                left = first_at + self.linger_s - time.monotonic()
                if left <= 0:
                    break
                self._wake.wait(left)
                self._wake.clear()
            batch = [items.popleft() for _ in range(min(len(items), self.max_batch * 8))]
            if len(items) < self.max_buffered:
                with self._space:
                    self._space.notify_all()
            with self._done_cond:
                self._in_flight += len(batch)
            try:
                self._send(batch)
            finally:
                with self._done_cond:
                    self._in_flight -= len(batch)
                    self._done_cond.notify_all()

    def _send(self, batch: list) -> None:
        groups: dict[tuple[str, QueueRef, bool], list] = {}
        failures = []
        sticky: dict[str, tuple[QueueRef, int]] = {}  # keyless: a queue until max_batch messages went to it
        for topic, key, msg, fut in batch:
            try:
                if key is None:
                    target, filled = sticky.get(topic) or (None, 0)
                    if target is None or filled >= self.max_batch:
                        target, filled = self.client.route(topic).pick(turn=next(self._turn)), 0
                    sticky[topic] = (target, filled + 1)
                else:
                    target = self.client.route(topic).pick(key, reorder=self.reorder)
            except (StoreError, LookupError) as e:  # no route, or the key's queue is down: fail just these messages
                failures.append((fut, None, e if isinstance(e, StoreError) else StoreError(grpc.StatusCode.UNAVAILABLE, str(e))))
                continue
            groups.setdefault((topic, target, key is not None), []).append((msg, fut))
        if failures:
            self._resolve(failures)
        jobs = []
        for (topic, target, keyed), items in groups.items():
            for i in range(0, len(items), self.max_batch):
                jobs.append(self._pool.submit(self._send_group, topic, target, keyed, items[i : i + self.max_batch]))
        concurrent.futures.wait(jobs)

    def _send_group(self, topic: str, target: QueueRef, keyed: bool, items: list) -> None:
        pinned = keyed and not self.reorder  # a keyed batch never fails over: its keys would change queue
        try:
            results: Sequence[SendResult] = self.client.send_batch(
                topic, [m for m, _ in items], queue=target if pinned else None, prefer=None if pinned else target
            )
        except (StoreError, LookupError) as e:
            self._resolve([(fut, None, e) for _, fut in items])
            return
        self._resolve([(fut, res, None) for (_, fut), res in zip(items, results)])
