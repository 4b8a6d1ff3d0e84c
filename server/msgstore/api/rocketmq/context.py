"""What the RocketMQ 5 adapter's parts share: the context a msgstore.v1 handler runs under for a
v2 call, and the service as its helpers (forwarding, renewal, telemetry) see it, so that they
need not import the service that owns them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import grpc

from ..relay import NOT_DONE
from .protocol import definition as d
from .status import Refusal, from_grpc

if TYPE_CHECKING:
    from ..member import Member
    from ..servicer import DataPlane


class Service(Protocol):
    """The MessagingService, as its helpers use it."""

    server: Member
    data: DataPlane
    store: Any

    def secret(self) -> str | None: ...


class CallContext:
    """Stands in for the gRPC context when a v1 handler runs for a v2 call: its ``abort``
    raises a :class:`Refusal` instead of ending the call."""

    not_done = False  # the handler refused before doing anything (relay.NOT_DONE in its trailers)

    def __init__(self, real: grpc.aio.ServicerContext):
        self.real = real

    async def abort(self, code: grpc.StatusCode, message: str) -> None:
        if code == grpc.StatusCode.FAILED_PRECONDITION and message.startswith("receipt_handle"):
            raise Refusal(d.INVALID_RECEIPT_HANDLE, message)
        if code == grpc.StatusCode.FAILED_PRECONDITION and message.startswith("transaction_id"):
            raise Refusal(d.INVALID_TRANSACTION_ID, message)
        raise from_grpc(code, message)

    def set_trailing_metadata(self, metadata) -> None:
        """(a v2 call's own trailers are its status: nothing to add) Notes a refusal from
        before anything was done, which the group's next master may be given."""
        if any(k == NOT_DONE for k, _v in metadata or ()):
            self.not_done = True

    def peer(self) -> str:
        return self.real.peer()

    def cancelled(self) -> bool:
        return self.real.cancelled()

    def invocation_metadata(self):
        return self.real.invocation_metadata()

    def time_remaining(self) -> float | None:
        return self.real.time_remaining()


class HereContext(CallContext):
    """The context of a call this node makes itself (a renewal): no client behind it."""

    def __init__(self) -> None:
        pass

    def peer(self) -> str:
        return "ipv4:127.0.0.1:0"

    def cancelled(self) -> bool:
        return False

    def invocation_metadata(self):
        return ()

    def time_remaining(self) -> float | None:
        return None


def client_id(context) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == "x-mq-client-id":
            return value if isinstance(value, str) else value.decode("utf-8", "replace")
    return ""
