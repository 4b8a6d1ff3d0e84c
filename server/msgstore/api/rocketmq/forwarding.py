"""Calls that must run on one replica group's master, sent on when they reach another node.

A RocketMQ 5 client acknowledges at the address it received from, ends a transaction at the
address it sent to, and recalls at its access point. After a failover the first two are a
deposed master (now a follower), and any node may get the third: RocketMQ's proxy hides that
by forwarding to the broker; so does this, one hop at most, to the group's ready master with
the newest epoch. Receipts, transaction ids and recall handles name their group, and a
group's in-flight deliveries, halves and timers are replicated, so its new master honours
them."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import grpc

from ..relay import MASTER_POLL_S, PASSED_ON, never_sent
from .context import CallContext
from .protocol import definition as d
from .protocol import service_grpc
from .status import Refusal

if TYPE_CHECKING:
    from .context import Service

FORWARDED = "x-msgstore-forwarded"  # set on a forwarded call: it is never sent on again
TIMEOUT_S = 10
# what a handle naming a group the store does not know is (receipts otherwise)
# what may be sent again after its master failed with it in flight: an ack the dead master may
# have taken is taken again, or refused as already done, by the next (a second commit is not)
REPEATABLE = frozenset({"AckMessage"})
UNKNOWN_GROUP = {"EndTransaction": (d.INVALID_TRANSACTION_ID, "transaction_id"), "RecallMessage": (d.BAD_REQUEST, "recall_handle")}


def was_forwarded(context) -> bool:
    return any(k == FORWARDED for k, _ in context.invocation_metadata() or ())


def passed_on(context, relay) -> list[tuple[str, str]]:
    """Metadata of a forwarded call: the caller's own signature and address (the master checks
    the caller itself)."""
    kept = [(k, v) for k, v in context.invocation_metadata() or () if k in PASSED_ON]
    return [(FORWARDED, "1"), *kept, *relay.origin(context)]


class Forwarder:
    def __init__(self, service: Service):
        self.service = service

    def elsewhere(self, group: str) -> bool:
        """A call for ``group`` that this node cannot serve as that group's master."""
        server = self.service.server
        return group != server._group_name() or not server._broker_delivers()

    async def forward(self, method: str, request: Any, context, group: str) -> Any | None:
        """The answer of ``group``'s master to ``request``; None when it should run here (this
        node is that master, or the call was forwarded already). While the group has no master
        (a failover) the call waits for the election within its deadline; a master that could
        not be connected to never saw it, and it goes to the next one (relay.py)."""
        if not group or not self.elsewhere(group) or was_forwarded(context):
            return None
        server = self.service.server
        address, known = await server.relay.master_of(group)
        if not known and group != server._group_name():
            code, field = UNKNOWN_GROUP.get(method, (d.INVALID_RECEIPT_HANDLE, "receipt_handle"))
            raise Refusal(code, f"{field}: names group {group[:80]!r}, which this store does not know")
        left = context.time_remaining()  # the caller's deadline, passed on (TIMEOUT_S when it set none)
        deadline = time.monotonic() + (TIMEOUT_S if left is None else max(0.001, left))
        while True:
            if address is None:
                address = await server.relay.target(CallContext(context), group)
                if address is None:  # (this node took office meanwhile)
                    return None
            if address == server.advertise:
                return None
            stub = service_grpc.MessagingServiceStub(server._ha_channel(address))
            try:
                left = max(0.001, deadline - time.monotonic())
                return await getattr(stub, method)(request, metadata=passed_on(context, server.relay), timeout=left)
            except grpc.aio.AioRpcError as e:
                server.relay.forget(address)
                again = never_sent(e) or (method in REPEATABLE and e.code() == grpc.StatusCode.UNAVAILABLE)
                if not again or time.monotonic() >= deadline:
                    raise Refusal(d.INTERNAL_SERVER_ERROR, f"group {group}'s master {address} did not answer: {e.details()}") from None
            await asyncio.sleep(MASTER_POLL_S)
            address = None
