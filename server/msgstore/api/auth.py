"""Bearer-token checks for the admin and replication services (the data plane checks its
callers per call: acl/identity.py, server._guarded).

Tokens are compared in constant time. A missing token is UNAUTHENTICATED, a wrong one
PERMISSION_DENIED. Health and reflection are never guarded (probes must work without secrets).
A token read from a file follows the file: a rotated Kubernetes Secret (which the kubelet
rewrites in the mounted volume) takes effect without a restart.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time

import grpc

log = logging.getLogger(__name__)
RECHECK_S = 1.0  # how often a token file is looked at for a change

ADMIN_PREFIX = "/msgstore.v1.Admin/"
HA_PREFIX = "/msgstore.v1.Replication/"  # members of a group, with the admin token


def read_token(path: str | None, env: str | None) -> str | None:
    """A token from a file (a mounted Secret) or an environment variable; None if neither."""
    if path:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
        if not token:
            raise ValueError(f"{path} is empty (a token or secret key file must hold one)")
        return token
    if env and os.environ.get(env):
        return os.environ[env].strip()
    return None


class TokenSource:
    """The token a server expects: fixed, or read from a file and re-read when it changes."""

    def __init__(self, value: str | None = None, path: str | None = None):
        self.path = path
        self._value = value
        self._stamp: tuple | None = None
        self._checked = 0.0
        self._lock = threading.Lock()
        if path:
            self._value = read_token(path, None)
            self._stamp = self._stat()

    @classmethod
    def of(cls, value: str | TokenSource | None) -> TokenSource | None:
        return value if isinstance(value, TokenSource) or value is None else cls(value)

    def _stat(self) -> tuple | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def current(self) -> str:
        if self.path and time.monotonic() - self._checked >= RECHECK_S:
            with self._lock:
                self._checked = time.monotonic()
                stamp = self._stat()
                if stamp is not None and stamp != self._stamp:
                    try:
                        self._value = read_token(self.path, None)
                        self._stamp = stamp
                        log.info("token file %s changed: the new token is in effect", self.path)
                    except (OSError, ValueError) as e:  # mid-rotation: keep the last good token
                        log.warning("token file %s unreadable (%s); keeping the previous token", self.path, e)
        return self._value or ""


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
        return grpc.StatusCode.UNAUTHENTICATED, (
            "this call needs the admin token as `authorization: Bearer <token>` metadata "
            "(msgstore: --admin-token-file FILE or MSGSTORE_ADMIN_TOKEN)"
        )
    if not hmac.compare_digest(token.encode(), expected.encode()):
        return grpc.StatusCode.PERMISSION_DENIED, "the token is not valid for this call"
    return None


class TokenInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, admin_token: str | TokenSource | None):
        self.admin_token = TokenSource.of(admin_token)

    async def intercept_service(self, continuation, details):
        method = details.method
        source = None
        if method.startswith(ADMIN_PREFIX) or method.startswith(HA_PREFIX):
            source = self.admin_token
        if source is not None:
            failure = check(source.current(), details.invocation_metadata)
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
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(unary, handler.request_deserializer, handler.response_serializer)
    if handler.stream_stream:
        return grpc.stream_stream_rpc_method_handler(unary, handler.request_deserializer, handler.response_serializer)
    raise AssertionError(f"a handler of no known shape: {handler!r}")  # never let a call through unchecked


def peer_host(context) -> tuple[str, int]:
    """The client's address as BORNHOST (ipv4:1.2.3.4:5 / ipv6:[::1]:5 in gRPC's notation)."""
    peer = context.peer() if context is not None else ""
    try:
        kind, _, rest = peer.partition(":")
        if kind == "ipv4":
            ip, _, port = rest.rpartition(":")
            return ip, int(port)
        if kind == "ipv6":
            ip, _, port = rest.rpartition(":")
            return ip.strip("[]").replace("%25", "%").split("%")[0], int(port)
    except ValueError:
        pass
    return "127.0.0.1", 0
