"""Who the nodes of this store are: a peers list, a peers file, or a headless Service's DNS name.

Each node answers for itself; for the others it asks them (``GetRoute(local_only=true)``) with
a short deadline and a one-second cache, so a dead peer shows up as not ready instead of
slowing every route lookup down.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from dataclasses import dataclass, field

import grpc

from ..v1 import msgstore_pb2 as pb
from ..v1 import msgstore_pb2_grpc as pbg

log = logging.getLogger(__name__)

PEER_TIMEOUT_S = 0.5
CACHE_S = 0.5
SILENT_CACHE_S = 2.0  # a peer that did not answer is not asked again sooner: routes stay fast while a member hangs
DNS_REFRESH_S = 5.0
UNANSWERED_MS = 2**32 - 1  # stale_ms of a peer that never answered


class DuplicateNodeName(RuntimeError):
    """Two nodes of one store answer with the same name (routes would show one of them twice)."""

    def __init__(self, name: str, first: str, second: str):
        super().__init__(
            f"nodes {first} and {second} are both named {name!r}: give each node its own --node-name "
            "(the default, host-port, is unique per port)"
        )


@dataclass
class PeerDirectory:
    self_address: str
    node_name: str
    static_peers: list[str] = field(default_factory=list)
    dns_name: str | None = None  # host:port of a headless Service
    peers_file: str | None = None  # a file listing host:port lines, re-read when it changes
    channel_factory: object = None  # (address) -> grpc.aio.Channel
    metadata: object = None  # () -> call metadata (the data token, re-read when it rotates)

    def __post_init__(self) -> None:
        self._file_peers: list[str] = []
        self._file_mtime = -1.0
        self._resolved: list[str] = []
        self._resolved_at = 0.0
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._cache: dict[tuple[str, str], tuple[float, pb.NodeRoute]] = {}  # key -> (valid until, answer)
        self._asking: dict[tuple[str, str], asyncio.Future] = {}  # one question in flight per peer and topic
        self._answered: dict[str, float] = {}  # peer -> monotonic time of its last answer

    async def addresses(self) -> list[str]:
        """Every node's address, this one included, in a stable order."""
        out = [self.self_address, *self.static_peers, *self._read_file()]
        if self.dns_name:
            now = time.monotonic()
            if now - self._resolved_at > DNS_REFRESH_S:
                self._resolved = await asyncio.get_running_loop().run_in_executor(None, _resolve, self.dns_name)
                self._resolved_at = now
            out.extend(self._resolved)
        seen: dict[str, None] = {}
        for a in out:
            seen.setdefault(_normalise(a), None)
        return list(seen)

    def _read_file(self) -> list[str]:
        if not self.peers_file:
            return []
        try:
            mtime = os.stat(self.peers_file).st_mtime
            if mtime != self._file_mtime:
                with open(self.peers_file, encoding="utf-8") as f:
                    self._file_peers = [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]
                self._file_mtime = mtime
        except OSError:
            pass  # keep the last list while the file is being replaced
        return self._file_peers

    def _channel(self, address: str) -> grpc.aio.Channel:
        ch = self._channels.get(address)
        if ch is None:
            ch = self.channel_factory(address) if self.channel_factory else grpc.aio.insecure_channel(address)
            self._channels[address] = ch
        return ch

    async def peer_route(self, address: str, topic: str) -> pb.NodeRoute:
        key = (address, topic)
        hit = self._cache.get(key)
        if hit is not None and time.monotonic() < hit[0]:
            return hit[1]
        asking = self._asking.get(key)
        if asking is None:
            asking = self._asking[key] = asyncio.ensure_future(self._ask(address, topic, hit))
            asking.add_done_callback(lambda _f, k=key: self._asking.pop(k, None))
        if hit is not None and not hit[1].ready:  # silent when last asked: say so now, the answer comes in the background
            return self._aged(hit[1], address)
        node = pb.NodeRoute()
        node.CopyFrom(await asyncio.shield(asking))  # callers adjust their copy (names of silent members)
        return node

    async def _ask(self, address: str, topic: str, hit: tuple[float, pb.NodeRoute] | None) -> pb.NodeRoute:
        key = (address, topic)
        stub = pbg.MessageStoreStub(self._channel(address))
        try:
            resp = await stub.GetRoute(
                pb.GetRouteRequest(topic=topic, local_only=True),
                timeout=PEER_TIMEOUT_S,
                metadata=(self.metadata() if self.metadata else ()) or None,
            )
            node = resp.nodes[0] if resp.nodes else pb.NodeRoute(address=address, ready=False)
            node.address = node.address or address
        except grpc.aio.AioRpcError as e:
            log.debug("peer %s did not answer GetRoute: %s", address, e.code())
            previous = hit[1] if hit else None
            node = pb.NodeRoute(address=address)
            if previous is not None:  # what it was (name, group, role, queues), now not ready
                node.CopyFrom(previous)
            node.ready = False
            self._cache[key] = (time.monotonic() + SILENT_CACHE_S, node)
            return self._aged(node, address)
        self._answered[address] = time.monotonic()
        node.stale_ms = 0
        self._cache[key] = (time.monotonic() + CACHE_S, node)
        return node

    def _aged(self, node: pb.NodeRoute, address: str) -> pb.NodeRoute:
        """A peer that did not answer: how long since it last did (its role is that old)."""
        at = self._answered.get(address)
        node.stale_ms = min(UNANSWERED_MS, int((time.monotonic() - at) * 1000) + 1) if at is not None else UNANSWERED_MS
        return node

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()


def _normalise(address: str) -> str:
    return address.strip()


def _resolve(host_port: str) -> list[str]:
    host, _, port = host_port.rpartition(":")
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (OSError, ValueError) as e:
        log.warning("cannot resolve peers %s: %s", host_port, e)
        return []
    out = []
    for family, _, _, _, sockaddr in infos:
        ip = sockaddr[0]
        out.append(f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}")
    return sorted(set(out))
