"""Reaching the store through one access point (a Service, a port-forward, a load balancer).

When a route says ``via_access_point``, the nodes' own addresses are not for this client (pod
addresses behind a port-forward, say): every call goes to the access point instead, naming the
queue's replica group in ``x-msgstore-node`` metadata, and the node behind the access point
forwards it to that group's master (server ``api/relay.py``). The client keeps its one
address per group as ``access#group``: everything that keys on addresses (channels, send
streams, down marks) then works per group unchanged, and a failover behind the access point
changes nothing the client holds."""

from __future__ import annotations

import collections
from typing import Any

import grpc

NODE_KEY = "x-msgstore-node"
SEP = "#"


def through(access: str, group: str) -> str:
    return f"{access}{SEP}{group}"


def split(address: str) -> tuple[str, str]:
    """(where to dial, the replica group to name: '' for a node's own address)."""
    dial, _, group = address.partition(SEP)
    return dial, group


def rewrite(resp_nodes: list[Any], access: str) -> list[Any]:
    """GetRoute's NodeRoutes with every member reached through ``access``."""
    out = []
    for n in resp_nodes:
        copy = type(n)()
        copy.CopyFrom(n)
        group = n.group or n.name
        copy.address = through(access, group)
        if copy.master_address:
            copy.master_address = copy.address
        out.append(copy)
    return out


def access_of(resp: Any, asked: str) -> str | None:
    """The access point a GetRoute answer tells this client to use (None: nodes' own addresses)."""
    if not resp.via_access_point:
        return None
    return target(list(resp.access_points)) if resp.access_points else split(asked)[0]


def target(points: list[str]) -> str:
    """One gRPC target for several access points: IPv4 addresses become one ``ipv4:`` target, so
    gRPC itself skips one that does not answer (pick_first); otherwise the first (a DNS name
    balances by itself)."""
    if len(points) > 1 and all(_ipv4(p) for p in points):
        return "ipv4:" + ",".join(points)
    return points[0]


def _ipv4(address: str) -> bool:
    host, _, port = address.rpartition(":")
    parts = host.split(".")
    return port.isdigit() and len(parts) == 4 and all(x.isdigit() and int(x) < 256 for x in parts)


class _Details(
    collections.namedtuple("_Details", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")),
    grpc.ClientCallDetails,
):
    pass


class NamingInterceptor(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds ``x-msgstore-node: group`` to every call of a channel (sync gRPC)."""

    def __init__(self, group: str):
        self.pair = (NODE_KEY, group)

    def _details(self, d: Any) -> Any:
        md = [*(d.metadata or ()), self.pair]
        return _Details(d.method, d.timeout, md, d.credentials, getattr(d, "wait_for_ready", None), getattr(d, "compression", None))

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, requests):
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation, details, requests):
        return continuation(self._details(details), requests)


def aio_interceptors(group: str) -> list[Any]:
    """The same for grpc.aio channels."""
    pair = (NODE_KEY, group)

    def details(d: Any) -> Any:
        md = grpc.aio.Metadata(*(d.metadata or ()), pair)
        return grpc.aio.ClientCallDetails(d.method, d.timeout, md, d.credentials, d.wait_for_ready)

    class UU(grpc.aio.UnaryUnaryClientInterceptor):
        async def intercept_unary_unary(self, continuation, d, request):
            return await continuation(details(d), request)

    class US(grpc.aio.UnaryStreamClientInterceptor):
        async def intercept_unary_stream(self, continuation, d, request):
            return await continuation(details(d), request)

    class SU(grpc.aio.StreamUnaryClientInterceptor):
        async def intercept_stream_unary(self, continuation, d, requests):
            return await continuation(details(d), requests)

    class SS(grpc.aio.StreamStreamClientInterceptor):
        async def intercept_stream_stream(self, continuation, d, requests):
            return await continuation(details(d), requests)

    return [UU(), US(), SU(), SS()]
