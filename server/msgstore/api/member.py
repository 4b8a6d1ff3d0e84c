"""A member's runtime: its store, replica, broker services, arbiter, peers and forwarding, and
what it says about itself (readiness, routes). The protocol adapters (msgstore.v1, RocketMQ 5's
apache.rocketmq.v2, admin, replication) are handed a :class:`Member` and use it; ``server.py``
wires them to gRPC. Nothing here imports an adapter: the dependencies run one way."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import socket
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2

from ..acl.identity import Authenticator, Users
from ..broker import BrokerServices
from ..ha import etcd
from ..ha.arbiter import ArbiterKeeper
from ..ha.epochs import EpochFile, EpochFileError
from ..ha.lease import KubeLease
from ..ha.replica import Replica, RoleError
from ..ha.roles import RolesFile
from ..record import codec
from ..store import MessageStore, StoreDirError, StoreLockedError
from ..store.config import KEYS, ConfigError, _coerce, parse_assignments
from ..v1 import admin_pb2, msgstore_pb2
from . import validation as v
from .auth import TokenSource
from .check_listeners import CheckListeners
from .groups import GroupRegistry
from .longpoll import ArrivalWaiters
from .metrics import Metrics
from .relay import Relay
from .route import DuplicateNodeName, PeerDirectory

log = logging.getLogger(__name__)

# A follower whose master restarts (or started after it) reconnects within a second or two, not
# after gRPC's default backoff of up to two minutes; a replication chunk may be a whole batch.
PEER_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.max_receive_message_length", 80 * 1024 * 1024),
    ("grpc.max_send_message_length", 80 * 1024 * 1024),
    ("grpc.http2.lookahead_bytes", 8 * 1024 * 1024),
]


# what health reports on (besides the server as a whole)
HEALTH_SERVICES = (
    "",
    msgstore_pb2.DESCRIPTOR.services_by_name["MessageStore"].full_name,
    admin_pb2.DESCRIPTOR.services_by_name["Admin"].full_name,
)
DEFAULT_PORT = 10911
DEFAULT_METRICS_PORT = 10912
ARBITER_FRESH_S = 5.0  # a record read longer ago is not passed on in routes


@dataclass
class ServerOptions:
    data_dir: str = "./data"
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    advertise: str | None = None  # host:port that others use to reach this node
    # clients come through these (a Service...): routes name them ([]: the address each client used); None: nodes' own
    access_points: list[str] | None = None
    node_name: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    admin_token: str | TokenSource | None = None  # a TokenSource follows its file (Secret rotation)
    data_token: str | TokenSource | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    tls_ca: str | None = None  # CA bundle to verify the other members with (default: tls_client_ca, else tls_cert)
    tls_server_name: str | None = None  # the name to verify in the other members' certificates (default: the address dialed)
    health_port: int | None = None  # plain-text gRPC health only (the kubelet's probes, when the main port is TLS)
    peers: list[str] = field(default_factory=list)
    peers_dns: str | None = None
    peers_file: str | None = None
    metrics_port: int | None = DEFAULT_METRICS_PORT
    metrics_host: str | None = None
    grace_s: float = 10.0
    lock_wait_s: float = 30.0
    workers: int = 32
    group: str | None = None  # replica group (default: the node's name, a group of one)
    replica_of: str | None = None  # host:port of the master to follow (brokerRole SLAVE)
    roles_file: str | None = None  # the operator's roles (group → members, master, epoch), followed
    arbiter: str | None = None  # etcd://HOST:PORT[,...][/PREFIX]: who is master is decided there (§14.3)
    arbiter_ttl_s: int | None = None  # the master's lease in the arbiter (None: failover_after_s, at least 3 s)
    failover_after_s: float | None = 10.0  # with an arbiter: elect a follower once its master was silent this long (None: never)


def load_config_file(path: str) -> dict[str, Any]:
    """A JSON object, or RocketMQ ``broker.conf`` style ``key=value`` lines (# comments)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(path, f"not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise ConfigError(path, "a JSON config file must hold an object")
        return data
    lines = [ln.strip() for ln in text.splitlines()]
    return parse_assignments([ln for ln in lines if ln and not ln.startswith("#")])


class StartError(RuntimeError):
    """The server cannot start; the message is one line for the person who started it."""


class PortInUse(StartError):
    """A port to listen on is taken (or the address is not local); the message names the flag."""


class Member:
    def __init__(self, options: ServerOptions):
        self.options = options
        host = options.advertise or f"{_default_ip(options.host)}:{options.port}"
        self.advertise = host
        # the default name is unique per port (several nodes on one host used to share the host's name)
        self.node_name = options.node_name or os.environ.get("POD_NAME") or f"{socket.gethostname()}-{options.port}"
        self.store = MessageStore(options.data_dir, options.settings, store_host=codec.parse_host(host))
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=options.workers, thread_name_prefix="msgstore-rpc")
        self.metrics: Metrics | None = None
        self.stopping = False
        data_token, admin_token = TokenSource.of(options.data_token), TokenSource.of(options.admin_token)
        self.authenticator = Authenticator(
            Users(lambda: getattr(self.store, "users", None)),
            enabled=lambda: data_token is not None or bool(self.store.config.authorizationEnabled),
            data_token=lambda: data_token.current() if data_token else None,
            admin_token=lambda: admin_token.current() if admin_token else None,
        )
        self.recovery_error: str | None = None
        self.fatal_error: str | None = None  # the server must stop (serve exits 1, saying this)
        self.ready = threading.Event()
        self.give_up = threading.Event()  # stop waiting for the data directory's lock
        self.health = health.aio.HealthServicer()
        self.waiters: ArrivalWaiters | None = None
        self.groups = GroupRegistry()  # consumer group members and queue holders (in memory)
        self.peers: PeerDirectory | None = None
        self.bound_port: int | None = None
        self.replica: Replica | None = None
        self.broker: BrokerServices | None = None
        self._ha_channels: dict[str, grpc.aio.Channel] = {}
        self.relay = Relay(self)
        self.roles: RolesFile | None = RolesFile(options.roles_file) if options.roles_file else None

    # ------------------------------------------------------------------ state

    def unavailable_reason(self) -> str | None:
        if self.stopping:
            return "store is shutting down"
        if self.recovery_error:
            return f"store failed to start: {self.recovery_error}"
        if not self.ready.is_set():
            rep = self.store.recovery_report  # (the data directory's lock is taken before listening)
            return f"store is recovering ({rep.mode}, {rep.progress:.0%})"
        return None

    def queue_count(self, topic: str) -> int:
        tc = self.store.topics.get(topic)
        return tc.write_queue_nums if tc is not None else self.store.config.defaultTopicQueueNums

    def topic_known(self, topic: str) -> bool:
        """Whether ``topic`` exists here or a send would create it (a route lists its queues)."""
        try:
            v.check_known_topic(self.store, topic)
        except v.TopicNotFound:
            return False
        return True

    def local_route(self, topic: str) -> msgstore_pb2.NodeRoute:
        ready = self.ready.is_set() and not self.stopping
        qids: list[int] = []
        if topic and ready and self.topic_known(topic):
            qids = list(range(self.queue_count(topic)))
        node = msgstore_pb2.NodeRoute(name=self.node_name, address=self.advertise, ready=ready, queue_ids=qids)
        r = self.replica
        node.group = r.group if r is not None else (self.options.group or self.node_name)
        node.role = r.role if r is not None else "MASTER"
        node.epoch = r.epoch if r is not None else 0
        node.read_enabled = r is None or r.is_master or bool(self.store.config.slaveReadEnable)
        if r is not None and not r.is_master:
            node.lag_bytes = r.lag()[0]
            node.master_address = r.master_address
        if r is not None and r.is_master and ready:
            node.fenced = bool(r.ack_refusal())
        if r is not None and r.keeper is not None and r.keeper.record is not None and time.monotonic() - r.keeper.read_at < ARBITER_FRESH_S:
            node.arbiter_master, node.arbiter_epoch = r.keeper.record.holder, r.keeper.record.epoch
        return node

    # ------------------------------------------------------------------ replication

    def _ha_channel(self, address: str) -> grpc.aio.Channel:
        ch = self._ha_channels.get(address)
        if ch is None:
            ch = self._ha_channels[address] = self._peer_channel(address)
        return ch

    def authorization_refused(self, settings: dict[str, Any]) -> str | None:
        """Why ``settings`` cannot turn authorizationEnabled on here: without an admin token
        the admin service, where users are made, would be open to anyone, and nodes would have
        nothing to vouch for the calls they pass on with."""
        try:  # (read as the configuration reads it; a bad value is the configuration's to refuse)
            on = _coerce("authorizationEnabled", KEYS["authorizationEnabled"], settings.get("authorizationEnabled", False))
        except ConfigError:
            return None
        if not on or self.options.admin_token:
            return None
        return "authorizationEnabled needs an admin token (serve --admin-token-file): users are managed with it"

    def node_metadata(self) -> tuple:
        """What this node's own data-plane calls carry: a token (every permission), the data
        token, else the admin token (a store with users and no data token)."""
        token = TokenSource.of(self.options.data_token) or TokenSource.of(self.options.admin_token)
        return (("authorization", f"Bearer {token.current()}"),) if token else ()

    def _fatal(self, why: str) -> None:
        """Stop serving, saying why: what only a person can mend (``serve`` exits 1)."""
        log.error("stopping: %s", why)
        self.fatal_error = why

    def _admin_metadata(self) -> tuple:
        token = TokenSource.of(self.options.admin_token)
        return (("authorization", f"Bearer {token.current()}"),) if token else ()

    def _make_replica(self) -> Replica:
        o, cfg = self.options, self.store.config
        group = o.group or self.node_name
        role, master = cfg.brokerRole, o.replica_of or cfg.haMasterAddress
        if o.replica_of:
            role = "SLAVE"
        replaced = False
        mine = self.roles.read().get(self.node_name) if self.roles is not None else None
        if mine is not None:
            group, role, master = mine.group, mine.broker_role, mine.master_address
            if mine.is_master and mine.master_address and self.store.commitlog.max_offset == 0 and not EpochFile.exists(self.store.root):
                # named master of a group that has run before, with an empty volume: a replaced
                # disk. Taking writes would make the followers cut what they hold.
                log.warning("the roles file names %s master of %s, but its volume is empty: waiting as a follower", self.node_name, group)
                role, master, replaced = "SLAVE", "", True
        if role == "SLAVE" and not master and self.roles is None:
            raise RoleError("a SLAVE needs its master's address (haMasterAddress, or --replica-of)")
        replica = Replica(
            self.store,
            self.node_name,
            group,
            broker_role=role,
            master_address=master,
            channel=self._ha_channel,
            call_metadata=self._admin_metadata,
            address=self.advertise,
            command_role=mine is None,
        )
        replica.fatal = self._fatal
        if mine is not None and mine.is_master and not replaced and replica.epochs.epoch < mine.epoch:
            replica.epochs.append(mine.epoch, self.store.commitlog.max_offset)
        if mine is not None and mine.lease:
            namespace, _, name = mine.lease.rpartition("/")
            lease = KubeLease(namespace or os.environ.get("POD_NAMESPACE", "default"), name)
            replica.use_arbiter(ArbiterKeeper(lease, self.node_name, self.advertise, group))
        elif o.arbiter:
            ttl = o.arbiter_ttl_s or max(3, int(o.failover_after_s if o.failover_after_s is not None else etcd.DEFAULT_TTL_S))
            arbiter = etcd.from_url(o.arbiter, group, ttl)
            replica.use_arbiter(ArbiterKeeper(arbiter, self.node_name, self.advertise, group), o.failover_after_s)
        return replica

    async def _follow_roles(self) -> None:
        """Apply the roles file when the operator changes it (a failover while we were down
        or unreachable: its Promote/SetRole calls reach us this way)."""
        assert self.roles is not None
        while not self.stopping:
            await asyncio.sleep(1.0)
            r = self.replica
            if r is None or not self.roles.changed():
                continue
            mine = self.roles.read().get(self.node_name)
            if mine is None:
                continue
            if mine.epoch < max(r.epoch, r.group_epoch):  # a late file: it would undo a newer decision
                log.info("ignoring the roles file: it names epoch %d of %s, an older epoch than %d", mine.epoch, r.group, r.group_epoch)
                continue
            try:
                if mine.is_master and not r.is_master and r.store.commitlog.max_offset == 0 and not r.epochs.snapshot():
                    continue  # an empty replacement volume: only an explicit Promote makes it master
                if mine.is_master and mine.epoch > r.epoch:
                    await r.promote(mine.epoch, mine.mode)
                elif not mine.is_master and mine.master_address and (r.is_master or r.master_address != mine.master_address):
                    await r.follow(mine.master_address, mine.epoch)
            except Exception:
                log.exception("applying the roles file failed")

    async def route(self, topic: str, local: msgstore_pb2.NodeRoute) -> list[msgstore_pb2.NodeRoute]:
        addresses = await self.peers.addresses()
        if self.replica is not None:  # the members of this node's group, even without --peers (a client given one address finds the rest)
            addresses += [a for a in self.replica.members.others().values() if a not in addresses]
        others = [a for a in addresses if a != self.advertise]
        answers = await asyncio.gather(*(self.peers.peer_route(a, topic) for a in others))
        if self.replica is not None:  # a member that does not answer is still one of the group's (not a node of its own)
            by_address = {a: n for n, a in self.replica.members.others().items()}
            named = {n.name for n in answers if n.name} | {local.name}
            silent = [n for n in answers if not n.name and n.address in by_address]
            for n in silent:
                n.name, n.group = by_address[n.address], self.replica.group
            # a remembered address its member has since left (it answers from another): not a member any more
            stale = {id(n) for n in silent if n.name in named}
            answers = [n for n in answers if id(n) not in stale]
        nodes = [local, *answers]
        named: dict[str, str] = {}
        for n in nodes:
            if n.name and named.setdefault(n.name, n.address) != n.address:
                raise DuplicateNodeName(n.name, named[n.name], n.address)
        return sorted(nodes, key=lambda n: (n.name or "~", n.address))

    def _peer_channel(self, address: str) -> grpc.aio.Channel:
        o = self.options
        if o.tls_cert:
            with open(o.tls_ca or o.tls_client_ca or o.tls_cert, "rb") as f:  # (read for each channel: a renewed CA is used)
                roots = f.read()
            chain = key = None
            if o.tls_client_ca:
                with open(o.tls_cert, "rb") as f:
                    chain = f.read()
                with open(o.tls_key, "rb") as f:
                    key = f.read()
            options = list(PEER_CHANNEL_OPTIONS)
            if o.tls_server_name:
                options.append(("grpc.ssl_target_name_override", o.tls_server_name))
            return grpc.aio.secure_channel(address, grpc.ssl_channel_credentials(roots, key, chain), options=options)
        return grpc.aio.insecure_channel(address, options=PEER_CHANNEL_OPTIONS)

    async def _lock_data_dir(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hold the data directory before listening: a second process on it then says at once
        whose lock it waits for, and never answers on a port it cannot back."""

        def waiting(holder: str) -> None:
            log.warning(
                "waiting for the lock on %s held by %s (--lock-wait %gs)",
                self.store.root,
                f"pid {holder}" if holder else "another process",
                self.options.lock_wait_s,
            )

        try:
            await loop.run_in_executor(None, self.store.lock, self.options.lock_wait_s, waiting, self.give_up)
        except (StoreLockedError, StoreDirError) as e:
            raise StartError(str(e)) from None

    async def _recover(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self._start_store)
        except Exception as e:
            self.recovery_error = str(e)
            log.error("store failed to start: %s", e)
            return
        refused = self.authorization_refused({"authorizationEnabled": self.store.config.authorizationEnabled})
        if refused:  # (persisted by an earlier `admin config set`: the start-up flags alone did not show it)
            self.recovery_error = f"{refused}; it is on in config/store.json"
            log.error("store failed to start: %s", self.recovery_error)
            return
        if self.store.users.users and not self.authenticator.enabled():
            log.warning(
                "%d users in config/users.json, but authorizationEnabled is off (and there is no data token): every caller may "
                "do everything (serve --set authorizationEnabled=true, or admin config set authorizationEnabled=true)",
                len(self.store.users.users),
            )
        if self.stopping:
            return
        try:
            self.replica = self._make_replica()
            self.replica.start()
            if self.replica.keeper is not None:
                self.replica.keeper.start(loop)
        except (RoleError, EpochFileError) as e:
            self.recovery_error = str(e)
            log.error("store failed to start: %s", e)
            return
        if self.roles is not None:
            loop.create_task(self._follow_roles())
        self.broker = BrokerServices(self.store, self._broker_master, self._group_name, self._broker_delivers)
        self.check_listeners = CheckListeners(loop)
        self.broker.pop.on_queue_change = lambda topic, queue_id: self.waiters.on_arrival(topic, queue_id, 0)  # FIFO: a group may go on
        self.broker.check_back = lambda group, half, message: self.check_listeners.from_thread(self._group_name(), group, half, message)
        self.broker.start()  # (its hooks set first: a check-back due at once is not lost)
        if self.metrics is not None:
            self.metrics.watch_broker(weakref.ref(self.broker))
            self.metrics.watch_long_polls(self.waiters)
            self.metrics.watch_replication(weakref.ref(self))
        self.store.add_arrival_listener(self.waiters.on_arrival)
        if self.metrics is not None:
            self.store.flush_observers.append(self.metrics.flush_latency.observe)
        self.ready.set()
        for name in HEALTH_SERVICES:
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        rep = self.store.recovery_report
        log.info("serving", extra={"recovery": rep.mode, "recovery_ms": rep.duration_ms, "truncated": rep.bytes_truncated})

    def _broker_master(self) -> bool:
        """The broker services keep their state loaded on a group's master (not a deposed one)."""
        r = self.replica
        return r is None or (r.is_master and not r.gate.deposed)

    def _broker_delivers(self) -> bool:
        """Delayed messages are delivered (and deliveries revived) by a group's master only,
        and only while it takes client writes: not fenced, deposed, learning its epoch, without
        its lease or its quorum."""
        r = self.replica
        return r is None or (r.is_master and r.refuse_put() is None)

    def _master_takes_writes(self) -> bool:
        """This node, as its group's master, may acknowledge a write now: the test ``local_route``
        marks it fenced by, made again where the relay's cache (half a second old at most)
        names this node."""
        r = self.replica
        return r is None or (r.is_master and not r.ack_refusal())

    def _group_name(self) -> str:
        """What receipts and recall handles name: the replica group (a lone node's name)."""
        return self.replica.group if self.replica is not None else self.node_name

    def _start_store(self) -> None:
        self.store.store_host = codec.parse_host(self.advertise)
        self.store.start(lock_wait_s=self.options.lock_wait_s)


def _default_ip(host: str) -> str:
    if host in ("0.0.0.0", "::", ""):
        return os.environ.get("POD_IP") or socket.gethostbyname(socket.gethostname())
    return host
