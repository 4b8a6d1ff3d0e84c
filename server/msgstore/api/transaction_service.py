"""Transactions on the data plane (broker/transactions.py): EndTransaction, and the
TransactionChecks stream a producer group listens on for check-backs (RocketMQ 5 sends them
over its Telemetry stream). Served by a group's master."""

from __future__ import annotations

import asyncio
import itertools
from typing import TYPE_CHECKING

import grpc

from ..broker.system_topics import PROP_REAL_QID, PROP_REAL_TOPIC
from ..broker.transactions import CommitRefused, Half, TransactionUnavailable, TransactionUnknown
from ..record.codec import StoredMessage
from ..record.recall_handle import RecallHandle
from ..v1 import msgstore_pb2 as pb
from . import validation as v
from .convert import message_to_pb
from .scheduled import broker_taking_office

if TYPE_CHECKING:
    from .server import StoreServer


class CheckListeners:
    """The TransactionChecks streams open on this node, by producer group (event loop only)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.by_group: dict[str, list[asyncio.Queue]] = {}
        self._turn = itertools.count()

    def add(self, group: str) -> asyncio.Queue:
        q: asyncio.Queue = asyncio.Queue(maxsize=1000)
        self.by_group.setdefault(group, []).append(q)
        return q

    def remove(self, group: str, q: asyncio.Queue) -> None:
        queues = self.by_group.get(group, [])
        if q in queues:
            queues.remove(q)

    def from_thread(self, node: str, group: str, half: Half, message: StoredMessage) -> None:
        """The broker thread asks a producer of ``group`` about ``half`` (one of them, in turn)."""
        self.loop.call_soon_threadsafe(self._send, node, group, half, message)

    def _send(self, node: str, group: str, half: Half, message: StoredMessage) -> None:
        queues = self.by_group.get(group)
        if not queues:
            return  # nobody of the group listens: asked again after transactionCheckInterval
        m = message_to_pb(message)
        m.topic = message.properties.get(PROP_REAL_TOPIC, m.topic)
        m.queue_id = int(message.properties.get(PROP_REAL_QID, "0") or 0)
        tx = RecallHandle(m.topic, 0, half.uniq, node).encode()
        q = queues[next(self._turn) % len(queues)]
        try:
            q.put_nowait(pb.TransactionCheck(transaction_id=tx, message=m, check=half.checks))
        except asyncio.QueueFull:
            pass


class TransactionHandlers:
    """Mixed into the data plane: ``self.server``, ``self._ready``."""

    server: StoreServer

    async def EndTransaction(self, request: pb.EndTransactionRequest, context) -> pb.EndTransactionResponse:
        try:
            handle = RecallHandle.decode(request.transaction_id)
        except ValueError:
            raise v.InvalidArgument("transaction_id", "not a transaction id this store gave out") from None
        if request.resolution not in (pb.COMMIT, pb.ROLLBACK, pb.UNKNOWN):
            raise v.InvalidArgument("resolution", f"unknown value {request.resolution}")
        await self._ready(context)  # type: ignore[attr-defined]
        server = self.server
        group = server.replica.group if server.replica is not None else server.node_name
        if handle.group != group:
            raise v.InvalidArgument("transaction_id", f"names group {handle.group}, this node is of {group}")
        broker = server.broker
        if broker is None or not server._broker_delivers() or not await broker_taking_office(server):
            await context.abort(grpc.StatusCode.UNAVAILABLE, "this node is not its group's master: end the transaction on the master")
        if request.resolution == pb.UNKNOWN:
            return pb.EndTransactionResponse()  # checked back again later
        try:
            await asyncio.get_running_loop().run_in_executor(
                server.executor, broker.transactions.end, handle.uniq_key, request.resolution == pb.COMMIT
            )
        except TransactionUnknown as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"transaction_id: {e}")
        except CommitRefused as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"the commit is recorded but {e}")
        except TransactionUnavailable as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"the transaction did not end: {e}")
        server._broker_wrote()
        return pb.EndTransactionResponse()

    async def TransactionChecks(self, request: pb.TransactionChecksRequest, context):
        group = v.check_group(request.producer_group, "producer_group")
        await self._ready(context)  # type: ignore[attr-defined]
        server = self.server
        if not server._broker_master():  # the client listens on the group's master (after a failover too)
            await context.abort(grpc.StatusCode.UNAVAILABLE, "this node is not its group's master: listen on the master")
        listeners = server.check_listeners
        q = listeners.add(group)
        try:
            while not server.stopping and server._broker_master():
                try:
                    check = await asyncio.wait_for(q.get(), 1.0)
                except TimeoutError:
                    continue  # (a look at stopping and the role every second)
                yield check
        finally:
            listeners.remove(group, q)
