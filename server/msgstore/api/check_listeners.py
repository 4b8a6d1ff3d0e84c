"""The TransactionChecks streams a node's producers hold open: where the broker's check-backs of
half messages go (the runtime owns them; the msgstore.v1 adapter adds and removes streams)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

from ..broker.system_topics import PROP_REAL_QID, PROP_REAL_TOPIC
from ..broker.transactions import Half
from ..record.codec import StoredMessage
from ..record.recall_handle import RecallHandle
from ..v1 import msgstore_pb2 as pb
from .convert import message_to_pb


class CheckListeners:
    """The TransactionChecks streams open on this node, by producer group (event loop only)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.by_group: dict[str, list[asyncio.Queue]] = {}
        self._allows: dict[asyncio.Queue, Callable[[str], bool]] = {}
        self._turn = itertools.count()

    def add(self, group: str, allows: Callable[[str], bool] | None = None) -> asyncio.Queue:
        """A listener of ``group``; ``allows(topic)``: whether its caller may publish the topic
        (a check-back carries the whole half message: only a producer of its topic sees it)."""
        q: asyncio.Queue = asyncio.Queue(maxsize=1000)
        self.by_group.setdefault(group, []).append(q)
        if allows is not None:
            self._allows[q] = allows
        return q

    def remove(self, group: str, q: asyncio.Queue) -> None:
        queues = self.by_group.get(group, [])
        if q in queues:
            queues.remove(q)
        self._allows.pop(q, None)

    def from_thread(self, node: str, group: str, half: Half, message: StoredMessage) -> None:
        """The broker thread asks a producer of ``group`` about ``half`` (one of them, in turn)."""
        self.loop.call_soon_threadsafe(self._send, node, group, half, message)

    def _send(self, node: str, group: str, half: Half, message: StoredMessage) -> None:
        topic = message.properties.get(PROP_REAL_TOPIC, message.topic)
        queues = [q for q in self.by_group.get(group, ()) if q not in self._allows or self._allows[q](topic)]
        if not queues:
            return  # nobody of the group (allowed to) listens: asked again after transactionCheckInterval
        m = message_to_pb(message)
        m.topic = topic
        m.queue_id = int(message.properties.get(PROP_REAL_QID, "0") or 0)
        tx = RecallHandle(m.topic, 0, half.uniq, node).encode()
        q = queues[next(self._turn) % len(queues)]
        try:
            q.put_nowait(pb.TransactionCheck(transaction_id=tx, message=m, check=half.checks))
        except asyncio.QueueFull:
            pass
