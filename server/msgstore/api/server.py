"""Running a store behind gRPC: ``msgstore serve``.

A :class:`StoreServer` is a :class:`~.member.Member` (the runtime the protocol adapters use)
wired to a gRPC server: the adapters' handlers, their error mapping, the relay to other
members, health, reflection and TLS. Start-up binds the port first and recovers in the
background, so health checks and ``Admin.GetStatus`` can watch recovery (health is NOT_SERVING
and data calls are UNAVAILABLE until it ends). SIGTERM is a clean shutdown: stop accepting,
drain, flush, persist, remove ``abort``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
import weakref

import grpc
from google.protobuf import message_factory
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from .. import wire
from ..acl.identity import CALLER, Denied, Identity, NotReady
from ..record import codec
from ..v1 import admin_pb2, ha_pb2, msgstore_pb2
from . import permissions
from . import validation as v
from .admin import ControlPlane
from .auth import TokenInterceptor, peer_host
from .ha_service import ReplicationPlane
from .longpoll import ArrivalWaiters
from .member import (
    Member,
    PortInUse,
    ServerOptions,
    StartError,
    _default_ip,
)
from .metrics import Metrics
from .relay import NEVER_RELAYED, READS
from .rocketmq.protocol import SERVICE as ROCKETMQ_SERVICE
from .rocketmq.service import MessagingService
from .route import PeerDirectory
from .servicer import DataPlane
from .tls import ServerCertificates

log = logging.getLogger(__name__)

DATA_SERVICE = msgstore_pb2.DESCRIPTOR.services_by_name["MessageStore"]
ADMIN_SERVICE = admin_pb2.DESCRIPTOR.services_by_name["Admin"]
HA_SERVICE = ha_pb2.DESCRIPTOR.services_by_name["Replication"]
# Admin calls about a replica group's metadata, which the client sends to every group.
GROUP_ADMIN = frozenset({"PutUser", "DeleteUser", "ListUsers"})
# Requests whose handlers take the serialized bytes (decoded by the compiled transcoder).
RAW_REQUESTS = {DATA_SERVICE.full_name: ("Send", "SendStream")}


def _bytes_or_message(response) -> bytes:
    return response if isinstance(response, bytes) else response.SerializeToString()


def _safe_parser(cls):
    def parse(data: bytes):
        try:
            return cls.FromString(data)
        except DecodeError:
            return v.BadRequest(v.explain_decode_error(cls, data))

    return parse


class StoreServer(Member):
    def __init__(self, options: ServerOptions):
        super().__init__(options)
        self.server: grpc.aio.Server | None = None
        self.health_server: grpc.aio.Server | None = None  # --health-port

    # ------------------------------------------------------------------ wiring

    def _handlers(self, service, impl) -> grpc.GenericRpcHandler:
        handlers = {}
        raw = RAW_REQUESTS.get(service.full_name, ()) if wire.native is not None else ()
        for method in service.methods:
            req_cls = message_factory.GetMessageClass(method.input_type)
            fn = getattr(impl, method.name)
            if service is DATA_SERVICE and method.name not in NEVER_RELAYED:
                fn = self._relayed(f"/{service.full_name}/{method.name}", method, fn)
            if service is ADMIN_SERVICE and method.name in GROUP_ADMIN:
                # through an access point a call names its replica group: served by that group's master
                fn = self._relayed(f"/{service.full_name}/{method.name}", method, fn)
            if service is DATA_SERVICE:
                fn = self._guarded(method, fn)
            parse = None if method.name in raw else _safe_parser(req_cls)  # raw: the handler reads wire bytes itself
            if method.client_streaming:
                handlers[method.name] = grpc.stream_stream_rpc_method_handler(self._wrap_bidi(method.name, fn), parse, _bytes_or_message)
                continue
            if method.name in raw:
                handlers[method.name] = grpc.unary_unary_rpc_method_handler(self._wrap_unary(method.name, fn), None, _bytes_or_message)
                continue
            # handlers may answer with a message or with its serialized bytes (raw pulls)
            if method.server_streaming:
                handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                    self._wrap_stream(method.name, fn), _safe_parser(req_cls), _bytes_or_message
                )
            else:
                handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                    self._wrap_unary(method.name, fn), _safe_parser(req_cls), _bytes_or_message
                )
        return grpc.method_handlers_generic_handler(service.full_name, handlers)

    def _relayed(self, path: str, method, fn):
        """``fn``, unless the call names another replica group (or this one while this node is
        not its master): then it is passed through to that group's master (relay.py)."""
        relay = self.relay
        reads = method.name in READS
        if method.client_streaming:

            async def bidi(requests, context):
                address = await relay.target(context, reads=reads)  # (a pull stream reads; a send stream does not)
                if address is None:
                    return await fn(requests, context)
                return await relay.bidi(path, requests, context, address)

            return bidi
        if method.server_streaming:

            async def stream(request, context):
                address = None if isinstance(request, v.BadRequest) else await relay.target(context, reads=reads)
                if address is None:
                    async for item in fn(request, context):
                        yield item
                    return
                async for item in relay.server_stream(path, request, context, address):
                    yield item

            return stream

        by_id = method.name == "GetMessage"

        async def unary(request, context):
            group = (
                await relay.group_storing(request.msg_id)
                if by_id and self.options.access_points is not None and not isinstance(request, v.BadRequest) and request.msg_id
                else ""
            )
            address = None if isinstance(request, v.BadRequest) else await relay.target(context, group, reads=reads)
            if address is None:
                return await fn(request, context)
            answer = await relay.unary(path, request, context, address)
            return answer if answer is not None else await fn(request, context)

        return unary

    def _guarded(self, method, fn):
        """``fn`` for a caller who may make this call (acl/, permissions.py): checked here,
        before the call is served or passed on, and the caller kept for the handler's own
        checks; else UNAUTHENTICATED or PERMISSION_DENIED naming the user, resource and action."""
        needs_of = permissions.V1[method.name]
        authenticator = self.authenticator

        def admit(request, context) -> Identity:
            identity = authenticator.identify(context.invocation_metadata(), peer_host(context)[0])
            if request is not None and not isinstance(request, (v.BadRequest, bytes, bytearray)):
                permissions.require(identity, needs_of(request))
            CALLER.set(identity)
            return identity

        async def refuse(context, e: Denied | NotReady) -> None:
            # (counted by the _wrap_* handler around this one, as every abort is)
            await context.abort(*v.refusal(e))

        if method.client_streaming:

            async def bidi(requests, context):
                try:
                    admit(None, context)
                except (Denied, NotReady) as e:
                    await refuse(context, e)
                return await fn(requests, context)

            return bidi
        if method.server_streaming:

            async def stream(request, context):
                try:
                    identity = admit(request, context)
                except (Denied, NotReady) as e:
                    await refuse(context, e)
                async for item in fn(request, context):
                    try:  # checked again for each answer: a revoked user's subscription ends
                        identity = authenticator.refreshed(identity)
                        if not isinstance(request, v.BadRequest):
                            permissions.require(identity, needs_of(request))
                    except (Denied, NotReady) as e:
                        await refuse(context, e)
                    yield item

            return stream

        async def unary(request, context):
            try:
                admit(request, context)
            except (Denied, NotReady) as e:
                await refuse(context, e)
            return await fn(request, context)

        return unary

    def _wrap_unary(self, name: str, fn):
        async def handler(request, context):
            if isinstance(request, v.BadRequest):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)
            try:
                return await fn(request, context)
            except (v.InvalidArgument, v.TopicNotFound, Denied) as e:
                await self._refused(name, context, e)
            except grpc.aio.AbortError:  # the handler refused the call itself (its own abort): counted too
                self._count_abort(name, context)
                raise
            except asyncio.CancelledError:
                raise
            except Exception as e:  # everything else is our bug: answer, log, keep serving
                log.exception("%s failed", name)
                self._count_error(name, "INTERNAL")
                await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(e).__name__}: {e}")

        return handler

    def _wrap_stream(self, name: str, fn):
        async def handler(request, context):
            if isinstance(request, v.BadRequest):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)
            try:
                async for item in fn(request, context):
                    yield item
            except (v.InvalidArgument, v.TopicNotFound, Denied) as e:
                await self._refused(name, context, e)
            except grpc.aio.AbortError:
                self._count_abort(name, context)
                raise

        return handler

    def _wrap_bidi(self, name: str, fn):
        """A bidirectional handler that writes with ``context.write`` (a coroutine)."""

        async def handler(requests, context):
            try:
                await fn(requests, context)
            except grpc.aio.AbortError:  # the handler refused the call itself (its own abort): counted too
                self._count_abort(name, context)
                raise
            except asyncio.CancelledError:
                raise
            except Exception as e:  # our bug: the stream ends with INTERNAL, the server keeps serving
                log.exception("%s failed", name)
                self._count_error(name, "INTERNAL")
                await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(e).__name__}: {e}")

        return handler

    async def _refused(self, method: str, context, e: v.InvalidArgument | v.TopicNotFound | Denied) -> None:
        code, details = v.refusal(e)
        self._count_error(method, code.name)
        await context.abort(code, details)

    def _count_abort(self, method: str, context) -> None:
        code = context.code()
        self._count_error(method, code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN")

    def _count_error(self, method: str, code: str) -> None:
        if self.metrics is not None:
            self.metrics.rpc_errors.labels(method, code).inc()

    def _credentials(self) -> grpc.ServerCredentials | None:
        o = self.options
        if not o.tls_cert:
            return None
        try:
            return ServerCertificates(o.tls_cert, o.tls_key, o.tls_client_ca).credentials()
        except (OSError, ValueError) as e:
            raise StartError(str(e)) from None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        o = self.options
        refused = self.authorization_refused(o.settings)
        if refused:
            raise StartError(refused)
        loop = asyncio.get_running_loop()
        await self._lock_data_dir(loop)
        self.waiters = ArrivalWaiters(loop)
        self.peers = PeerDirectory(
            self.advertise, self.node_name, list(o.peers), o.peers_dns, o.peers_file, self._peer_channel, self.node_metadata
        )
        # the data plane is checked per call (_guarded: users, the data token); the admin and
        # replication services take the admin token
        interceptors = [TokenInterceptor(o.admin_token)] if o.admin_token else []
        self.server = grpc.aio.server(
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", v.MAX_REQUEST_BYTES),
                ("grpc.max_send_message_length", v.MAX_REQUEST_BYTES + (1 << 20)),
                ("grpc.so_reuseport", 0),
            ],
        )
        data_plane = DataPlane(self)
        self.server.add_generic_rpc_handlers(
            [
                self._handlers(DATA_SERVICE, data_plane),
                MessagingService(self, data_plane).handlers(self._count_error),
                self._handlers(ADMIN_SERVICE, ControlPlane(self)),
                self._handlers(HA_SERVICE, ReplicationPlane(self)),
            ]
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        for name in ("", DATA_SERVICE.full_name, ADMIN_SERVICE.full_name):
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        reflection.enable_server_reflection(
            [DATA_SERVICE.full_name, ADMIN_SERVICE.full_name, ROCKETMQ_SERVICE.full_name, health.SERVICE_NAME, reflection.SERVICE_NAME],
            self.server,
        )
        address = f"[{o.host}]:{o.port}" if ":" in o.host else f"{o.host}:{o.port}"
        creds = self._credentials()
        try:
            _check_free(o.host, o.port)  # before gRPC tries: its failure comes with a line of C-core logging
            self.bound_port = self.server.add_secure_port(address, creds) if creds else self.server.add_insecure_port(address)
        except (RuntimeError, OSError):
            raise PortInUse(f"cannot listen on {address} (--port): the port is in use, or the address is not this machine's") from None
        if self.options.port == 0:
            self.advertise = f"{_default_ip(o.host)}:{self.bound_port}"
            self.peers.self_address = self.advertise
            self.store.store_host = codec.parse_host(self.advertise)
            if not (o.node_name or os.environ.get("POD_NAME")):
                self.node_name = self.peers.node_name = f"{socket.gethostname()}-{self.bound_port}"
        if o.metrics_port is not None:
            self.metrics = Metrics(weakref.ref(self.store), self.node_name)
            try:
                self.metrics.serve(o.metrics_host or o.host, o.metrics_port)
            except OSError as e:
                raise PortInUse(
                    f"cannot serve metrics on {o.metrics_host or o.host}:{o.metrics_port} (--metrics-port): {e.strerror}"
                ) from None
        await self._serve_health(o)
        await self.server.start()
        bound = f"[{o.host}]:{self.bound_port}" if ":" in o.host else f"{o.host}:{self.bound_port}"
        log.info("listening", extra={"address": bound, "node": self.node_name, "advertise": self.advertise, "codec": codec_path()})
        loop.create_task(self._recover())

    async def _serve_health(self, o: ServerOptions) -> None:
        """``--health-port``: the same health answers in plain text, and nothing else (a
        Kubernetes gRPC probe has no TLS; what it learns, SERVING or not, is no secret)."""
        if o.health_port is None:
            return
        self.health_server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.health_server)
        address = f"[{o.host}]:{o.health_port}" if ":" in o.host else f"{o.host}:{o.health_port}"
        try:
            _check_free(o.host, o.health_port)
            self.health_server.add_insecure_port(address)
        except (RuntimeError, OSError):
            raise PortInUse(f"cannot listen on {address} (--health-port): the port is in use") from None
        await self.health_server.start()

    async def stop(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        log.info("shutting down")
        keeper = self.replica.keeper if self.replica is not None else None
        if keeper is not None:
            # first: a master that goes on renewing while its followers disconnect publishes an
            # in-sync set of itself alone, and then there is nobody to elect
            await keeper.stop()
        await self.health.enter_graceful_shutdown()
        if self.waiters is not None:
            self.waiters.wake_all()
        if self.server is not None:
            await self.server.stop(self.options.grace_s)
        if self.health_server is not None:
            await self.health_server.stop(0)
        if self.peers is not None:
            await self.peers.close()
        if self.replica is not None:
            await self.replica.stop()
        if keeper is not None:  # its followers hold what it stored by now: an election need not wait for the lease
            await keeper.resign()
        for ch in self._ha_channels.values():
            await ch.close()
        loop = asyncio.get_running_loop()
        if self.broker is not None:
            await loop.run_in_executor(None, self.broker.stop)
        await loop.run_in_executor(None, self.store.shutdown)
        self.executor.shutdown(wait=False)
        log.info("stopped", extra={"clean": not os.path.exists(self.store.abort_path)})


def codec_path() -> str:
    """Which record codec and Send transcoder this process runs (said at start: a server that
    runs the slow pure-Python paths without saying so looks like a performance bug)."""
    if codec._native is not None and wire.native is not None:
        return "compiled"
    why = "MSGSTORE_PURE_PYTHON=1" if os.environ.get("MSGSTORE_PURE_PYTHON") == "1" else "the compiled extensions are not built"
    return f"pure Python ({why})"


def _check_free(host: str, port: int) -> None:
    """Raise OSError when another process listens on ``port`` (0 always works)."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds: a port in TIME_WAIT is free
        probe.bind((host, port))


async def serve(options: ServerOptions, started: asyncio.Event | None = None) -> int:
    server = StoreServer(options)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    starting = asyncio.create_task(server.start())
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait([starting, stopped], return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():  # a SIGTERM while waiting for the data directory's lock
        server.give_up.set()
    try:
        await starting
    except StartError:
        await loop.run_in_executor(None, server.store.shutdown)  # lets go of the lock, if taken
        if stop.is_set():
            return 0
        raise
    if started is not None:
        started.set()
    failed = asyncio.create_task(_watch_failure(server))
    await asyncio.wait([stopped, failed], return_when=asyncio.FIRST_COMPLETED)
    await server.stop()
    if server.recovery_error:  # the last line a person sees, after the shutdown's
        print(f"error: store failed to start: {server.recovery_error}", file=sys.stderr)
        return 1
    if server.fatal_error:
        print(f"error: {server.fatal_error}", file=sys.stderr)
        return 1
    return 0


async def _watch_failure(server: StoreServer) -> None:
    while server.recovery_error is None and server.fatal_error is None:
        await asyncio.sleep(0.2)
