"""The client's one exception: a call that failed, with its gRPC status code and the node."""

from __future__ import annotations

import grpc


class StoreError(Exception):
    """A call failed; ``code`` is the gRPC status code."""

    def __init__(self, code: grpc.StatusCode, details: str, node: str = ""):
        super().__init__(f"{code.name}: {details}" + (f" (node {node})" if node else ""))
        self.code = code
        self.details = details
        self.node = node


#: What grpc.aio reports when a stream's write fails because the call has already ended: the
#: status the call really ended with (UNAVAILABLE when the server went away) is overwritten
#: (grpc/grpc#36066). It is never a server's verdict, so it is treated as the connection lost.
LOST_STATUS = "Internal error from Core"


def status_of(e: grpc.RpcError) -> tuple[grpc.StatusCode, str]:
    """The code and details a failed call ended with, :data:`LOST_STATUS` read as UNAVAILABLE."""
    code, details = e.code(), e.details() or ""  # type: ignore[attr-defined]
    if code == grpc.StatusCode.INTERNAL and details == LOST_STATUS:
        return grpc.StatusCode.UNAVAILABLE, "the stream ended while a request was written (the server went away?)"
    return code, details


def error_from(e: grpc.RpcError, node: str = "") -> StoreError:
    """A StoreError for a failed call (``e`` is a grpc.Call as well as an RpcError)."""
    return StoreError(*status_of(e), node)
