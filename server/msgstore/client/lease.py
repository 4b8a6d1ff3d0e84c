"""Hold every queue of some topics for a consumer group, for the length of a batch job.

A batch job (the Spark archive) reads all of a group's queues at once; two runs at the same
time would archive the same messages twice. Holding the queues as a member of the group (the
same claims a clustering consumer makes, see membership.py) lets the second run fail at once,
naming who holds them, and shows the job in ``msgstore groups`` while it runs.
"""

from __future__ import annotations

import socket
import threading
import uuid

import grpc

from ..v1 import msgstore_pb2 as pb
from .client import Client, StoreError


class QueueLease:
    def __init__(
        self,
        client: Client,
        group: str,
        topics: list[str],
        *,
        client_id: str | None = None,
        heartbeat_s: float = 5.0,
        expiry_s: float = 30.0,
    ):
        self.client = client
        self.group = group
        self.topics = sorted(set(topics))
        self.client_id = client_id or f"{socket.gethostname()}@lease@{uuid.uuid4().hex[:6]}"
        self.heartbeat_s = heartbeat_s
        self.expiry_s = expiry_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _claims(self, address: str) -> list[pb.QueueKey]:
        out = []
        for topic in self.topics:
            node = self.client.route(topic).node(address)
            if node is not None:
                out += [pb.QueueKey(topic=topic, queue_id=q) for q in node.queue_ids]
        return out

    def _beat(self) -> list[str]:
        """Heartbeat every ready node with all its queues; what was not granted, named."""
        refused = []
        for node in self.client.route(self.topics[0] if self.topics else "").nodes:
            if not node.ready:
                continue
            claims = self._claims(node.address)
            req = pb.HeartbeatRequest(
                group=self.group, client_id=self.client_id, topics=self.topics, expiry_ms=int(self.expiry_s * 1000), claims=claims
            )
            resp = self.client.heartbeat(node.address, req, node=node.name, timeout=5.0)
            granted = {(k.topic, k.queue_id) for k in resp.granted}
            refused += [f"{node.name}/{c.topic}/{c.queue_id}" for c in claims if (c.topic, c.queue_id) not in granted]
        return refused

    def acquire(self) -> QueueLease:
        """Hold the queues, or raise ABORTED naming the members holding some of them."""
        refused = self._beat()
        if refused:
            holders = sorted(
                {q.holder for _, g in self.client.describe_groups(self.group) for q in g.queues if q.holder and q.holder != self.client_id}
            )
            self.release()
            raise StoreError(
                grpc.StatusCode.ABORTED,
                f"group {self.group} is being read by {', '.join(holders) or 'another member'} "
                f"({len(refused)} queues held, e.g. {refused[0]}): is another run going on?",
            )
        self._thread = threading.Thread(target=self._keep, name=f"msgstore-lease-{self.group}", daemon=True)
        self._thread.start()
        return self

    def _keep(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                self._beat()
            except StoreError:
                continue

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        for node in self.client.route("").nodes:
            if node.ready:
                try:
                    self.client.unregister(node.address, self.group, self.client_id, node=node.name)
                except StoreError:
                    continue

    def __enter__(self) -> QueueLease:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
