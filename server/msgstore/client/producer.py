"""A producer that batches single ``send()`` calls in the background (like Kafka's).

``send()`` only queues the message and returns a future; a sender thread collects what
arrived within ``linger_ms`` (or ``max_batch`` messages), splits it by target queue and sends
each batch, the batches for different nodes in parallel. A loop of single sends thus costs
one RPC per batch instead of one per message.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
import time
from typing import Sequence

import grpc

from .client import Client, OutMessage, SendResult, StoreError
from .routing import QueueRef


class Producer:
    def __init__(self, client: Client, *, linger_ms: float = 5, max_batch: int = 1000, max_buffered: int = 100_000,
                 parallelism: int = 8):
        self.client = client
        self.linger_s = linger_ms / 1000
        self.max_batch = max_batch
        self.max_buffered = max_buffered
        self._items: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self._in_flight = 0
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=parallelism, thread_name_prefix="msgstore-producer")
        self._thread = threading.Thread(target=self._run, name="msgstore-producer", daemon=True)
        self._thread.start()

    def send(self, topic: str, body: bytes | str, *, key: str | None = None, keys: Sequence[str] = (),
             tags: str | None = None, properties: dict[str, str] | None = None,
             uniq_key: str | None = None) -> concurrent.futures.Future:
        """Queue one message; the future resolves to its :class:`SendResult`."""
        if isinstance(body, str):
            body = body.encode()
        fut: concurrent.futures.Future = concurrent.futures.Future()
        item = (topic, key, OutMessage(body, key, keys, tags, properties or {}, uniq_key), fut)
        with self._cond:
            if self._closed:
                raise RuntimeError("producer is closed")
            while len(self._items) >= self.max_buffered:
                self._cond.wait()
            self._items.append(item)
            if len(self._items) == 1 or len(self._items) >= self.max_batch:
                self._cond.notify_all()
        return fut

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far has been answered."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._cond.notify_all()
            while self._items or self._in_flight:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left if left is not None else 0.1)
        return True

    def close(self, timeout: float | None = 30) -> None:
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(5)
        self._pool.shutdown(wait=True)

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ sender thread

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._closed:
                    self._cond.wait()
                if not self._items and self._closed:
                    return
                first_at = time.monotonic()
                while len(self._items) < self.max_batch and not self._closed:
                    left = first_at + self.linger_s - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                batch = [self._items.popleft() for _ in range(min(len(self._items), self.max_batch * 8))]
                self._in_flight += len(batch)
                self._cond.notify_all()
            try:
                self._send(batch)
            finally:
                with self._cond:
                    self._in_flight -= len(batch)
                    self._cond.notify_all()

    def _send(self, batch: list) -> None:
        groups: dict[tuple[str, QueueRef], list] = {}
        for topic, key, msg, fut in batch:
            try:
                target = self.client.route(topic).pick(key)
            except (StoreError, LookupError) as e:  # no route: fail just these messages
                fut.set_exception(e if isinstance(e, StoreError) else StoreError(grpc.StatusCode.UNAVAILABLE, str(e)))
                continue
            groups.setdefault((topic, target), []).append((key, msg, fut))
        jobs = []
        for (topic, target), items in groups.items():
            for i in range(0, len(items), self.max_batch):
                jobs.append(self._pool.submit(self._send_group, topic, target, items[i:i + self.max_batch]))
        concurrent.futures.wait(jobs)

    def _send_group(self, topic: str, target: QueueRef, items: list) -> None:
        try:
            results: list[SendResult] = self.client.send_batch(topic, [m for _, m, _ in items], prefer=target)
        except (StoreError, LookupError) as e:
            for _, _, fut in items:
                fut.set_exception(e)
            return
        for (_, _, fut), res in zip(items, results):
            fut.set_result(res)
