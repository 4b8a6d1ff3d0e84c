"""Bearer-token checks for the admin service (and, optionally, the data plane).

Tokens are compared in constant time. A missing token is UNAUTHENTICATED, a wrong one
PERMISSION_DENIED. Health and reflection are never guarded (probes must work without secrets).
"""

from __future__ import annotations

import hmac
import os

import grpc

ADMIN_PREFIX = "/msgstore.v1.Admin/"
DATA_PREFIX = "/msgstore.v1.MessageStore/"


def read_token(path: str | None, env: str | None) -> str | None:
    """A token from a file (a mounted Secret) or an environment variable; None if neither."""
    if path:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
        if not token:
            raise ValueError(f"token file {path} is empty")
        return token
    if env and os.environ.get(env):
        return os.environ[env].strip()
    return None


def _presented(metadata) -> str | None:
    for key, value in metadata or ():
        if key == "authorization":
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            if value.startswith("Bearer "):
                return value[7:].strip()
            return value.strip()
    return None


def check(expected: str, metadata) -> tuple[grpc.StatusCode, str] | None:
    token = _presented(metadata)
    if token is None:
        return grpc.StatusCode.UNAUTHENTICATED, "this call needs `authorization: Bearer <token>` metadata"
    if not hmac.compare_digest(token.encode(), expected.encode()):
        return grpc.StatusCode.PERMISSION_DENIED, "the token is not valid for this call"
    return None


class TokenInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, admin_token: str | None, data_token: str | None = None):
        self.admin_token = admin_token
        self.data_token = data_token

    async def intercept_service(self, continuation, details):
        method = details.method
        expected = None
        if method.startswith(ADMIN_PREFIX):
            expected = self.admin_token
        elif method.startswith(DATA_PREFIX):
            expected = self.data_token
        if expected is not None:
            failure = check(expected, details.invocation_metadata)
            if failure is not None:
                handler = await continuation(details)
                return _deny(handler, *failure)
        return await continuation(details)


def _deny(handler, code: grpc.StatusCode, message: str):
    """A handler of the same shape that aborts with ``code``."""
    async def unary(request, context):
        await context.abort(code, message)

    async def stream(request, context):
        await context.abort(code, message)
        yield  # pragma: no cover

    if handler is None:
        return None
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(unary, handler.request_deserializer, handler.response_serializer)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(stream, handler.request_deserializer, handler.response_serializer)
    return handler
