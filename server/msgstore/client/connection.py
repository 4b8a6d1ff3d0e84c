"""Channels to store nodes: TLS, tokens and message-size options in one place."""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from ..acl import signature
from . import access

MAX_MESSAGE = 64 * 1024 * 1024 + (1 << 20)
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE),
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.enable_retries", 0),
    # a restarted node is found again within seconds, not after minutes of backoff
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
    # a client's connections are its own: gRPC otherwise shares one connection per address
    # across channels, and a new client would inherit another's reconnect backoff to a node
    # that has just restarted (seen as "connection refused" for up to two seconds)
    ("grpc.use_local_subchannel_pool", 1),
]


@dataclass(frozen=True)
class Security:
    """How to reach the nodes: optional TLS (CA, client cert) and bearer tokens."""

    token: str | None = None  # data-plane token, when the server requires one
    admin_token: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    server_name: str | None = None  # TLS name to verify when addresses are IPs
    access_key: str | None = None  # a user's: data calls are signed as RocketMQ 5 clients sign them
    secret_key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if bool(self.access_key) != bool(self.secret_key):
            raise ValueError("give both an access key and a secret key, or neither")

    @property
    def tls(self) -> bool:
        return bool(self.tls_ca)

    def credentials(self) -> grpc.ChannelCredentials:
        roots = _read(self.tls_ca)
        chain = _read(self.tls_cert) if self.tls_cert else None
        key = _read(self.tls_key) if self.tls_key else None
        return grpc.ssl_channel_credentials(roots, key, chain)

    def options(self) -> list:
        opts = list(CHANNEL_OPTIONS)
        if self.server_name:
            opts.append(("grpc.ssl_target_name_override", self.server_name))
        return opts

    def data_metadata(self) -> tuple:
        """A user's signature (made now: RocketMQ 5's MQv2-HMAC-SHA1), else the data token,
        else the admin token (which a store with users takes for every permission: an admin
        command finds the nodes through the data plane)."""
        if self.access_key and self.secret_key:
            return signature.sign(self.access_key, self.secret_key)
        token = self.token or self.admin_token
        return (("authorization", f"Bearer {token}"),) if token else ()

    def admin_metadata(self) -> tuple:
        return (("authorization", f"Bearer {self.admin_token}"),) if self.admin_token else ()


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def sync_channel(address: str, security: Security) -> grpc.Channel:
    """A channel to ``address``; one written ``access#group`` dials the access point and
    names the group on every call (access.py)."""
    dial, group = access.split(address)
    if security.tls:
        ch = grpc.secure_channel(dial, security.credentials(), options=security.options())
    else:
        ch = grpc.insecure_channel(dial, options=security.options())
    return grpc.intercept_channel(ch, access.NamingInterceptor(group)) if group else ch


def aio_channel(address: str, security: Security) -> grpc.aio.Channel:
    dial, group = access.split(address)
    interceptors = access.aio_interceptors(group) if group else None
    if security.tls:
        return grpc.aio.secure_channel(dial, security.credentials(), options=security.options(), interceptors=interceptors)
    return grpc.aio.insecure_channel(dial, options=security.options(), interceptors=interceptors)


def split_endpoints(endpoints: str | list[str]) -> list[str]:
    if isinstance(endpoints, str):
        endpoints = endpoints.split(",")
    out = [check_endpoint(e.strip()) for e in endpoints if e and e.strip()]
    if not out:
        raise ValueError("give at least one endpoint (host:port)")
    return out


def check_endpoint(address: str) -> str:
    """``host:port`` with a port gRPC can dial, else ValueError. gRPC itself takes a port of
    99999 modulo 65536 and dials some other server; gRPC target URIs (``dns:///...``,
    ``unix:...``) pass as they are."""
    if "://" in address or address.startswith(("unix:", "unix-abstract:", "dns:", "ipv4:", "ipv6:")):
        return address
    dial, group = access.split(address)  # (a route's address through an access point: access#group)
    if group:
        check_endpoint(dial)
        return address
    host, sep, port = address.rpartition(":")
    if not sep or not host or host in ("[]",):
        raise ValueError(f"address {address!r}: expected host:port")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"address {address!r}: the port must be 1-65535")
    return address
