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


def error_from(e: grpc.RpcError, node: str = "") -> StoreError:
    """A StoreError for a failed call (``e`` is a grpc.Call as well as an RpcError)."""
    return StoreError(e.code(), e.details() or "", node)  # type: ignore[attr-defined]
