"""Transactions on the data plane (broker/transactions.py): EndTransaction, and the
TransactionChecks stream a producer group listens on for check-backs (RocketMQ 5 sends them
over its Telemetry stream). Served by a group's master."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import grpc

from ..acl.identity import CALLER
from ..broker.transactions import CommitRefused, TransactionUnavailable, TransactionUnknown
from ..record.recall_handle import RecallHandle
from ..v1 import msgstore_pb2 as pb
from . import validation as v
from .scheduled import broker_taking_office

if TYPE_CHECKING:
    from .member import Member


class TransactionHandlers:
    """Mixed into the data plane: ``self.server``, ``self._ready``."""

    server: Member

    async def EndTransaction(self, request: pb.EndTransactionRequest, context) -> pb.EndTransactionResponse:
        try:
            handle = RecallHandle.decode(request.transaction_id)
        except ValueError:
            raise v.InvalidArgument("transaction_id", "not a transaction id this store gave out") from None
        CALLER.get().require("topic", handle.topic, "pub")
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
                server.executor, broker.transactions.end, handle.uniq_key, request.resolution == pb.COMMIT, handle.topic
            )
        except TransactionUnknown as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"transaction_id: {e}")
        except CommitRefused as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"the commit is recorded but {e}")
        except TransactionUnavailable as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"the transaction did not end: {e}")
        return pb.EndTransactionResponse()

    async def TransactionChecks(self, request: pb.TransactionChecksRequest, context):
        group = v.check_group(request.producer_group, "producer_group")
        await self._ready(context)  # type: ignore[attr-defined]
        server = self.server
        if not server._broker_master():  # the client listens on the group's master (after a failover too)
            await context.abort(grpc.StatusCode.UNAVAILABLE, "this node is not its group's master: listen on the master")
        listeners = server.check_listeners
        caller = CALLER.get()
        auth = server.authenticator
        q = listeners.add(group, None if caller.user is None else lambda topic: auth.may_now(caller, "topic", topic, "pub"))
        try:
            while not server.stopping and server._broker_master():
                try:
                    check = await asyncio.wait_for(q.get(), 1.0)
                except TimeoutError:
                    continue  # (a look at stopping and the role every second)
                yield check
        finally:
            listeners.remove(group, q)
