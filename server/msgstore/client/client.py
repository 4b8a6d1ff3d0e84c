"""The synchronous client: routing, sends with failover, pulls, queries, offsets, topics."""

from __future__ import annotations

import concurrent.futures
import datetime
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from .. import wire
from ..record import codec
from ..record.recall_handle import RecallHandle
from ..v1 import admin_pb2 as apb
from ..v1 import admin_pb2_grpc
from ..v1 import msgstore_pb2 as pb
from ..v1 import msgstore_pb2_grpc as pbg
from . import access
from .admin import AdminClient
from .connection import Security, split_endpoints, sync_channel
from .delays import delay_properties, group_properties
from .errors import StoreError
from .errors import error_from as _error
from .pop import PopCalls
from .pull_stream import PullStream
from .routing import (
    PROBE_TIMEOUT_S,
    REFUSED,
    REROUTE,
    KeyQueueDown,
    Member,
    Node,
    QueueRef,
    Route,
    Suspects,
    confirmed,
    known_addresses,
    merge_answers,
    nodes_of,
    on_master,
    replicated,
)
from .send_results import SendResult, SendResults, send_result
from .stream import SendStream
from .transactions import CheckedMessage, TransactionProducer, end_transaction

ROUTE_TTL_S = 10.0
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
# refusals of a whole send before anything was stored: through an access point, sent again
NOTHING_STORED = frozenset({"SERVICE_NOT_AVAILABLE", "IN_SYNC_REPLICAS_NOT_ENOUGH"})
ACCESS_RETRY_S = 0.1  # an access point's group refused in-band (a master being replaced): asked again this often


@dataclass
class OutMessage:
    """A message to send (what ``send_batch`` takes)."""

    body: bytes
    key: str | None = None
    keys: Sequence[str] = ()
    tags: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    uniq_key: str | None = None
    flag: int = 0

    def entry(self, topic: str, queue_id: int) -> pb.SendEntry:
        keys = list(self.keys) + ([self.key] if self.key else [])
        return pb.SendEntry(
            topic=topic,
            queue_id=queue_id,
            body=self.body,
            tags=self.tags or "",
            keys=keys,
            uniq_key=self.uniq_key or "",
            properties=self.properties,
            flag=self.flag,
        )


@dataclass
class PullResult:
    status: str
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list[codec.StoredMessage]
    node: str = ""
    group_generation: int = 0  # with a group: its membership generation on the node


def encode_send(
    topic: str, queue_id: int, messages: Sequence[OutMessage], wait_flush: bool | None, visible: bool = False, request_id: int = 0
) -> bytes:
    """SendRequest bytes: compiled when available (a protobuf object per entry costs more
    than the whole send), else through protobuf. Both produce the same wire format. A string
    that is not UTF-8 (a lone surrogate from a command line) is INVALID_ARGUMENT naming it."""
    try:
        if wire.native is not None:
            return wire.native.encode_send_request(  # type: ignore[no-any-return]
                topic, queue_id, list(messages), -1 if wait_flush is None else int(wait_flush), visible, request_id
            )
        req = pb.SendRequest(entries=[m.entry(topic, queue_id) for m in messages], wait_visible=visible, request_id=request_id)
        if wait_flush is not None:
            req.wait_flush = wait_flush
        return req.SerializeToString()
    except (UnicodeEncodeError, ValueError) as e:
        raise StoreError(grpc.StatusCode.INVALID_ARGUMENT, _not_utf8(topic, messages) or str(e)) from None


def _not_utf8(topic: str, messages: Sequence[OutMessage]) -> str | None:
    """Which string of a send is not valid UTF-8, named as the request's field."""

    def bad(s: str | None) -> bool:
        if not s:
            return False
        try:
            s.encode("utf-8")
            return False
        except UnicodeEncodeError:
            return True

    if bad(topic):
        return f"topic: not valid UTF-8: {topic!r}"
    for i, m in enumerate(messages):
        fields = [("tags", m.tags), ("uniq_key", m.uniq_key)]
        fields += [(f"keys[{j}]", k) for j, k in enumerate([*m.keys, *([m.key] if m.key else [])])]
        fields += [(f"properties[{k!r}]", f"{k}{v}") for k, v in m.properties.items()]
        for name, value in fields:
            if bad(value):
                return f"entries[{i}].{name}: not valid UTF-8: {value!r}"
    return None


def check_topic(topic: str) -> None:
    """INVALID_ARGUMENT naming the topic field, before any routing (an empty topic used to
    surface as UNAVAILABLE: no node serves it)."""
    err = codec.topic_error(topic)
    if err:
        raise StoreError(grpc.StatusCode.INVALID_ARGUMENT, f"topic: {err}")


def check_queue(queue: object, field: str = "queue") -> None:
    """INVALID_ARGUMENT naming the field when ``queue`` is not one of a route's queues: a
    queue id alone (``queue=3``) names no node, and failed deep inside as an AttributeError."""
    if not isinstance(queue, QueueRef):
        raise StoreError(
            grpc.StatusCode.INVALID_ARGUMENT, f"{field}: must be one of the topic's queues (client.route(topic).queues), got {queue!r}"
        )


decode_records = codec.decode_records  # a raw pull's messages


def pull_request(
    topic: str,
    queue: QueueRef,
    offset: int,
    max_messages: int,
    timeout_ms: int,
    tag_filter: str | None,
    group: str,
    max_bytes: int = 0,
    sql: str | None = None,
) -> pb.PullRequest:
    """A raw pull (records as stored; :func:`pull_result` decodes them), for both clients;
    ``sql``: a SQL92 selector on properties instead of a tag filter."""
    check_queue(queue)
    return pb.PullRequest(
        topic=topic,
        queue_id=queue.queue_id,
        offset=offset,
        max_messages=max_messages,
        max_bytes=max_bytes,
        timeout_ms=timeout_ms,
        tag_filter=tag_filter or "",
        sql_filter=sql or "",
        group=group,
        raw=True,
    )


def pull_queues_request(
    topic: str,
    queues: list[tuple[QueueRef, int]],
    max_messages: int,
    timeout_ms: int,
    tag_filter: str | None,
    group: str,
    sql: str | None,
) -> pb.PullQueuesRequest:
    """Several queues of one node, each at its offset, read in one PullQueues."""
    return pb.PullQueuesRequest(
        pulls=[pull_request(topic, q, offset, max_messages, 0, tag_filter, group, sql=sql) for q, offset in queues],
        timeout_ms=timeout_ms,
    )


def pull_result(resp: pb.PullResponse, node: str) -> PullResult:
    msgs = decode_records(resp.records) if resp.records else []
    return PullResult(
        pb.PullStatus.Name(resp.status), resp.next_offset, resp.min_offset, resp.max_offset, msgs, node, resp.group_generation
    )


class Client(PopCalls):
    """A connection to a store (one node or many; any node's address finds the others)."""

    def __init__(
        self,
        endpoints: str | list[str],
        *,
        token: str | None = None,
        admin_token: str | None = None,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        server_name: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        timeout: float = 10.0,
        failover_timeout: float = 15.0,
        send_streams: bool = True,
    ):
        """``failover_timeout``: how long a send to a replicated group whose master fails
        waits for the group's new master before failing (or going to another group).
        ``send_streams=False``: every send is a unary Send (a one-shot program has nothing to
        gain from a stream and its background threads). ``access_key``/``secret_key``: a
        user's credentials (every data call signed with them, instead of the data token)."""
        self.endpoints = split_endpoints(endpoints)
        self.security = Security(token, admin_token, tls_ca, tls_cert, tls_key, server_name, access_key, secret_key)
        self.timeout = timeout
        self.failover_timeout = failover_timeout
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, pbg.MessageStoreStub] = {}  # one per channel: a stub builds ~30 callables
        self._routes: dict[str, Route] = {}
        self._lock = threading.Lock()
        self._streams: dict[str, SendStream] = {}
        self._send_streams = send_streams
        self._unary_only: set[str] = set()  # servers without SendStream
        self._suspects = Suspects()

    # ------------------------------------------------------------------ plumbing

    def channel(self, address: str) -> grpc.Channel:
        ch = self._channels.get(address)
        if ch is None:
            with self._lock:
                ch = self._channels.get(address)
                if ch is None:
                    ch = self._channels[address] = sync_channel(address, self.security)
        return ch

    def _raw_send(self, address: str):
        """Send taking already-serialized SendRequest bytes (see :func:`encode_send`)."""
        return self.channel(address).unary_unary(
            "/msgstore.v1.MessageStore/Send", request_serializer=None, response_deserializer=pb.SendResponse.FromString
        )

    def stub(self, address: str) -> pbg.MessageStoreStub:
        """The channel's stub, kept: building one per call was a tenth of a consumer's CPU."""
        st = self._stubs.get(address)
        if st is None:
            st = self._stubs[address] = pbg.MessageStoreStub(self.channel(address))
        return st

    def admin_stub(self, address: str) -> admin_pb2_grpc.AdminStub:
        return admin_pb2_grpc.AdminStub(self.channel(address))

    def _call(self, address: str, method: str, request, timeout: float | None = None, node: str = ""):
        try:
            return getattr(self.stub(address), method)(
                request, timeout=timeout or self.timeout, metadata=self.security.data_metadata() or None
            )
        except grpc.RpcError as e:
            raise _error(e, node or address) from None

    def _group_call(self, topic: str, queue: QueueRef, method: str, request, *, reads: bool, timeout: float | None = None):
        """A call to the queue's group: its master (``reads=False``) or whoever serves reads.
        When that member does not answer, look at the route again (a failover, a follower
        taking reads while the master is down) and try the member it names, once."""
        check_queue(queue)
        pick = self.read_address if reads else self.master_address
        address = pick(topic, queue)
        try:
            return self._call(address, method, request, timeout, node=queue.node)
        except StoreError as e:
            if e.code != grpc.StatusCode.UNAVAILABLE:
                raise
            self.route(topic, refresh=True)
            again = pick(topic, queue)
            if again == address:
                raise
            return self._call(again, method, request, timeout, node=queue.node)

    def close(self) -> None:
        with self._lock:  # (another thread may be opening a channel meanwhile: a console's sampler)
            streams, self._streams = list(self._streams.values()), {}
            channels, self._channels = list(self._channels.values()), {}
            self._stubs.clear()
        for stream in streams:
            stream.close()
        for ch in channels:
            ch.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ routing

    def route(self, topic: str = "", refresh: bool = False) -> Route:
        """The topic's route: one member's answer; while that answer cannot vouch for a group's
        master (it lists a member it could not reach, or no master takes writes), every other
        member known is asked too, at once, and each member's freshest entry kept."""
        cached = self._routes.get(topic)
        if cached is not None and not refresh and time.monotonic() - cached.fetched_at < ROUTE_TTL_S:
            return cached
        last: Exception | None = None
        answers: list[list[pb.NodeRoute]] = []
        asked: set[str] = set()

        def ask(address: str, timeout: float) -> list[pb.NodeRoute] | StoreError:
            try:
                resp = self.stub(address).GetRoute(
                    pb.GetRouteRequest(topic=topic), timeout=timeout, metadata=self.security.data_metadata() or None
                )
            except grpc.RpcError as e:
                if e.code() in RETRYABLE:
                    self._suspects.mark(address)
                return _error(e, address)
            self._suspects.clear(address)
            point = access.access_of(resp, address)
            if point is not None:  # every member through the access point: its node forwards, failovers included
                vias.append(point)
                return access.rewrite(list(resp.nodes), point)
            return list(resp.nodes)

        vias: list[str] = []
        for address in self._suspects.order(known_addresses(self.endpoints, list(self._routes.values()))):
            asked.add(address)
            got = ask(address, min(self.timeout, 5.0))
            if isinstance(got, StoreError):
                last = got
                continue
            answers.append(got)
            break
        if answers and not vias and not confirmed(merge_answers(answers)):
            others = [a for a in known_addresses(self.endpoints, list(self._routes.values()), answers) if a not in asked]
            if others:
                with concurrent.futures.ThreadPoolExecutor(min(8, len(others))) as pool:
                    for got in pool.map(lambda a: ask(a, PROBE_TIMEOUT_S * 2), others):
                        if not isinstance(got, StoreError):
                            answers.append(got)
        if not answers:
            raise last or StoreError(grpc.StatusCode.UNAVAILABLE, "no endpoint answered")
        route = Route(topic, nodes_of(merge_answers(answers)))
        self._routes[topic] = route
        return route

    def nodes(self) -> list[Node]:
        return self.route("", refresh=True).nodes

    def members(self) -> list[Member]:
        """Every member of every replica group (every process of the store)."""
        return [m for n in self.nodes() for m in n.members]

    def master_address(self, topic: str, queue: QueueRef) -> str:
        """Where the queue's group takes writes and commits now (its master, after a failover)."""
        return self.route(topic).write_address(queue)

    def read_address(self, topic: str, queue: QueueRef) -> str:
        """Where to read the queue: its master, else a follower serving reads (slaveReadEnable)."""
        found = self.route(topic).read_address(queue)
        if found is None:  # nobody ready as far as the cached route knows: look again
            found = self.route(topic, refresh=True).read_address(queue)
        return found or queue.address

    def _await_new_master(self, topic: str, target: QueueRef, deadline: float) -> QueueRef | None:
        """A replicated group whose master failed or refused (fenced, deposed): wait, until
        ``deadline`` (``failover_timeout`` after the send began), for the route to show a
        master that takes writes, and send there; None for a group without followers."""
        if not replicated(self.route(topic), target):  # the route lists a group's members (every member names them)
            return None
        while True:
            try:
                found = on_master(self.route(topic, refresh=True), target)
            except StoreError as e:  # no member answers now (paused, restarting): the failover is not over
                if e.code not in RETRYABLE:
                    raise
                found = None
            if found is not None and found.address == target.address and found.address in self._suspects:
                found = found if self._answers(found.address) else None  # routes can name a paused master a while
            if found is not None:
                if found.address == target.address:
                    time.sleep(0.05)  # the same member again (it had lost its quorum or lease a moment)
                return found
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.1)

    def _answers(self, address: str) -> bool:
        try:
            self.stub(address).GetRoute(pb.GetRouteRequest(), timeout=PROBE_TIMEOUT_S, metadata=self.security.data_metadata() or None)
        except grpc.RpcError:
            return False
        self._suspects.clear(address)
        return True

    def _first_target(self, topic: str, route: Route, key: str | None, reorder: bool, deadline: float) -> tuple[Route, QueueRef]:
        """Where a send goes first. No node to take it (a key's group, or the only group, is
        between masters): a replicated store waits for one until ``deadline``."""
        while True:
            try:
                return route, route.pick(key, reorder=reorder)
            except LookupError as e:
                if time.monotonic() >= deadline or not any(len(n.members) > 1 for n in route.nodes):
                    raise StoreError(grpc.StatusCode.UNAVAILABLE, str(e)) from None
            time.sleep(0.1)
            try:
                route = self.route(topic, refresh=True)
            except StoreError as e:  # no member answers now: keep the last route until the deadline
                if e.code not in RETRYABLE or time.monotonic() >= deadline:
                    raise

    # ------------------------------------------------------------------ sending

    def send(
        self,
        topic: str,
        body: bytes | str,
        *,
        key: str | None = None,
        keys: Sequence[str] = (),
        tags: str | None = None,
        properties: dict[str, str] | None = None,
        uniq_key: str | None = None,
        queue: QueueRef | None = None,
        wait_flush: bool | None = None,
        visible: bool = False,
        reorder: bool = False,
        delay: float | datetime.timedelta | None = None,
        deliver_at: float | datetime.datetime | None = None,
        delay_level: int | None = None,
        message_group: str | None = None,
    ) -> SendResult:
        """``delay`` (seconds or a timedelta, from when the node stores it), ``deliver_at``
        (epoch seconds or an aware datetime) or ``delay_level`` (RocketMQ 4's levels): the
        message is delivered to ``topic`` then; the result's ``recall_handle`` cancels a
        ``delay``/``deliver_at`` message until its time (:meth:`recall`). ``message_group``: a
        FIFO message group (its messages share one queue; a FIFO consumer group receives them
        one at a time, in order)."""
        if isinstance(body, str):
            body = body.encode()
        props = {**(properties or {}), **delay_properties(delay, deliver_at, delay_level), **group_properties(message_group)}
        msg = OutMessage(body, key, keys, tags, props, uniq_key)
        route_key = message_group or key  # a message group's messages share one queue (their order)
        return self.send_batch(topic, [msg], key=route_key, queue=queue, wait_flush=wait_flush, visible=visible, reorder=reorder)[0]

    def send_batch(
        self,
        topic: str,
        messages: Sequence[OutMessage],
        *,
        key: str | None = None,
        queue: QueueRef | None = None,
        prefer: QueueRef | None = None,
        wait_flush: bool | None = None,
        visible: bool = False,
        reorder: bool = False,
    ) -> SendResults:
        """Send messages to one (node, queue), failing over to another node when one is down.

        ``queue`` pins the target (no failover); ``prefer`` is tried first. ``key`` sends to
        the key's queue (its hash over every queue of the route) and never elsewhere: when that
        queue's node is down the send fails with UNAVAILABLE, to be retried, so the key's
        messages stay in order; ``reorder=True`` sends them to another queue meanwhile (their
        order across the switch is then lost). ``visible=True`` answers once the messages can
        be pulled and queried (else that happens within milliseconds after the answer). A retry
        after a timeout may store a batch twice (at-least-once).
        """
        check_topic(topic)
        for name, given in (("queue", queue), ("prefer", prefer)):
            if given is not None:
                check_queue(given, name)
        deadline = time.monotonic() + self.failover_timeout
        route = self.route(topic)
        tried: set[str] = set()
        if queue or prefer:
            target = queue or prefer
        else:
            route, target = self._first_target(topic, route, key, reorder, deadline)
        while True:
            try:
                results = SendResults(self._send_to(target, topic, messages, wait_flush, visible), target.node, target.address)
            except StoreError as e:
                if e.code not in RETRYABLE:
                    raise
                if access.split(target.address)[1]:  # its stream may lead to a deposed master: a new one is passed on afresh
                    self._drop_stream(target.address)
                route.mark_down(target.address)
                self._suspects.mark(target.address)
                tried.add(target.address)
                moved = self._await_new_master(topic, target, deadline)
                if moved is not None and time.monotonic() >= deadline:
                    raise  # (a member the route calls master that keeps failing the send: not forever)
                if moved is not None:  # the same queue, on its group's new master: order and key kept
                    target = moved
                    route = self.route(topic)
                    continue
                if queue is not None:
                    raise
                if key is not None and not reorder:
                    raise StoreError(e.code, f"{KeyQueueDown(key, target)} ({e.details})", target.node) from None
                route = self.route(topic, refresh=True)
                candidates = [q for q in route.usable() if q.address not in tried]
                if not candidates:
                    raise
                target = route.pick(key, exclude=tried, reorder=reorder)
                continue
            if not results.all_ok and results.statuses() & REROUTE and time.monotonic() < deadline:
                # "not master" / "replicas missing": a member that does not yet know it was
                # replaced; the group's new master takes the send (what the old one stored is
                # cut when it rejoins)
                if access.split(target.address)[1] and replicated(route, target) and results.statuses() <= NOTHING_STORED:
                    # through an access point the address stays; the stream it opened leads to
                    # the member that refused: a new one is passed on to the group's master now
                    self._drop_stream(target.address)
                    time.sleep(ACCESS_RETRY_S)
                    continue
                if results.statuses() & REFUSED and replicated(route, target):
                    # a master that may not acknowledge (fenced, no lease or quorum: the route
                    # then shows it fenced) is suspected and the group's master waited for; a
                    # refusal of the master's own (a full disk) is answered as it is
                    found = on_master(self.route(topic, refresh=True), target)
                    if found is None:
                        self._suspects.mark(target.address)
                        moved = self._await_new_master(topic, target, deadline)
                    else:
                        moved = found if found.address != target.address else None
                else:
                    moved = on_master(self.route(topic, refresh=True), target)
                    moved = moved if moved is not None and moved.address != target.address else None
                if moved is not None:
                    target = moved
                    continue
            return results

    def _send_to(
        self, target: QueueRef, topic: str, messages: Sequence[OutMessage], wait_flush: bool | None, visible: bool
    ) -> Sequence[pb.SendResult]:
        """One send request to one node: over the node's SendStream, or unary Send to a server
        that has no SendStream (UNIMPLEMENTED: nothing was stored, so resending is safe)."""
        req = encode_send(topic, target.queue_id, messages, wait_flush, visible)
        if self._send_streams and target.address not in self._unary_only:
            try:
                return self.send_stream(target.address, target.node).send(req, len(messages), (wait_flush, visible), self.timeout)
            except StoreError as e:
                if e.code != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                self._unary_only.add(target.address)
        try:
            return self._raw_send(target.address)(req, timeout=self.timeout, metadata=self.security.data_metadata() or None).results
        except grpc.RpcError as e:
            raise _error(e, target.node) from None

    def transaction_producer(self, group: str, check: Callable[[CheckedMessage], str]) -> TransactionProducer:
        """Half messages for producer group ``group``; ``check`` answers the store's
        check-backs ("commit", "rollback" or "unknown"). See client/transactions.py."""
        return TransactionProducer(self, group, check)

    def end_transaction(self, transaction_id: str, resolution: str) -> None:
        """Commit, roll back (or say "unknown" about) a half message by its transaction id."""
        end_transaction(self, transaction_id, resolution)

    def recall(self, handle: str | SendResult) -> None:
        """Cancel a message sent with ``delay``/``deliver_at`` before its time, on the master of
        the group that stored it. FAILED_PRECONDITION once its time has come."""
        text = handle.recall_handle if isinstance(handle, SendResult) else handle
        try:
            h = RecallHandle.decode(text)
        except ValueError as e:
            raise StoreError(grpc.StatusCode.INVALID_ARGUMENT, f"recall_handle: {e}") from None
        self._group_call(h.topic, QueueRef(h.group, "", 0), "Recall", pb.RecallRequest(recall_handle=text), reads=False)

    def _drop_stream(self, address: str) -> None:
        with self._lock:
            stream = self._streams.pop(address, None)
        if stream is not None:
            stream.close()

    def send_stream(self, address: str, node: str = "") -> SendStream:
        """The node's SendStream, opened on first use and again after it broke."""
        stream = self._streams.get(address)
        if stream is None or stream.broken is not None:
            channel = self.channel(address)
            with self._lock:
                stream = self._streams.get(address)
                if stream is None or stream.broken is not None:
                    if stream is not None:
                        stream.close()
                    stream = self._streams[address] = SendStream(channel, node or address, self.security.data_metadata())
        return stream

    def send_entries(self, address: str, entries: list[pb.SendEntry], node: str = "") -> list[SendResult]:
        resp = self._call(address, "Send", pb.SendRequest(entries=entries), node=node)
        return [send_result(r, node or resp.node) for r in resp.results]

    # ------------------------------------------------------------------ reading

    def pull(
        self,
        topic: str,
        queue: QueueRef,
        offset: int,
        *,
        max_messages: int = 32,
        max_bytes: int = 0,
        timeout_ms: int = 0,
        tag_filter: str | None = None,
        group: str = "",
        sql: str | None = None,
    ) -> PullResult:
        """``sql``: a SQL92 selector on message properties (``"region = 'eu' AND amount > 100"``)
        instead of ``tag_filter``; the store refuses a bad one, naming its column."""
        req = pull_request(topic, queue, offset, max_messages, timeout_ms, tag_filter, group, max_bytes, sql)
        resp = self._group_call(topic, queue, "Pull", req, reads=True, timeout=self.timeout + timeout_ms / 1000)
        return pull_result(resp, queue.node)

    def pull_future(
        self,
        topic: str,
        queue: QueueRef,
        offset: int,
        *,
        max_messages: int = 32,
        timeout_ms: int = 0,
        tag_filter: str | None = None,
        group: str = "",
        sql: str | None = None,
        here: bool = False,
        within: float | None = None,
    ):
        """A Pull's raw answer: a future, or with ``here`` the answer itself, from a call made in
        this thread (raising its ``grpc.RpcError``; see :meth:`pull_queues_future`)."""
        req = pull_request(topic, queue, offset, max_messages, timeout_ms, tag_filter, group, sql=sql)
        call = self.stub(self.read_address(topic, queue)).Pull
        return (call if here else call.future)(
            req, timeout=within or self.timeout + timeout_ms / 1000, metadata=self.security.data_metadata() or None
        )

    def pull_queues_future(
        self,
        topic: str,
        address: str,
        queues: list[tuple[QueueRef, int]],
        *,
        max_messages: int = 32,
        timeout_ms: int = 0,
        tag_filter: str | None = None,
        group: str = "",
        sql: str | None = None,
        here: bool = False,
        within: float | None = None,
    ):
        """Several queues read at ``address`` in one call (PullQueues), each at its offset;
        ``timeout_ms`` waits until any has messages. Its answer's ``results`` follow ``queues``.
        A future, or with ``here`` the answer itself, the call made in this thread (raising its
        ``grpc.RpcError``): gRPC runs each future on a thread it starts whenever the channel has
        no other call running, so a consumer long-polling a trickle alone started a thread per
        arrival, 1,000 a second at 5,000 msg/s. ``within`` (seconds) bounds the whole call, the
        client's timeout beyond the long poll's by default."""
        req = pull_queues_request(topic, queues, max_messages, timeout_ms, tag_filter, group, sql)
        call = self.stub(address).PullQueues
        return (call if here else call.future)(
            req, timeout=within or self.timeout + timeout_ms / 1000, metadata=self.security.data_metadata() or None
        )

    def pull_stream(self, address: str) -> PullStream:
        """A PullQueuesStream opened to ``address``: PullQueues calls as requests on one stream
        (pull_stream.py; a node older than it answers its first pull UNIMPLEMENTED)."""
        return PullStream(self.stub(address).PullQueuesStream, self.security.data_metadata())

    def subscribe(self, topic: str, queue: QueueRef, offset: int = -1, *, tag_filter: str | None = None) -> Iterable[PullResult]:
        check_queue(queue)
        req = pb.SubscribeRequest(topic=topic, queue_id=queue.queue_id, offset=offset, tag_filter=tag_filter or "", raw=True)
        try:
            for resp in self.stub(self.read_address(topic, queue)).Subscribe(req, metadata=self.security.data_metadata() or None):
                yield pull_result(resp, queue.node)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                raise _error(e, queue.node) from None

    def _each_node(self, topic: str, call: Callable[[Node], Any], skipped: list[str] | None) -> list[tuple[Node, Any]]:
        """``call`` on every node of the route. A node that is down or recovering (not ready, or
        UNAVAILABLE now) is named in ``skipped`` when a list is given (the result is then
        partial: say so), and left out silently otherwise, as a consumer does."""
        out = []
        for n in self.route(topic, refresh=skipped is not None).nodes:
            if not n.ready:
                if skipped is not None:
                    skipped.append(f"{n.name or n.address} (not ready: down or recovering)")
                continue
            try:
                out.append((n, call(n)))
            except StoreError as e:
                if skipped is None or e.code not in RETRYABLE:
                    raise
                skipped.append(f"{n.name or n.address} ({e.code.name}: {e.details})")
        return out

    def query(
        self, topic: str, key: str, max_results: int = 32, begin: int = 0, end: int = 0, *, skipped: list[str] | None = None
    ) -> list[tuple[str, pb.Message]]:
        """Messages with ``key`` from every node, as (node, message); see ``_each_node`` for
        ``skipped``."""
        check_topic(topic)
        req = pb.QueryByKeyRequest(topic=topic, key=key, max_results=max_results, begin_timestamp=begin, end_timestamp=end)
        found = self._each_node(topic, lambda n: self._call(n.address, "QueryByKey", req, node=n.name), skipped)
        return [(n.name, m) for n, resp in found for m in resp.messages]

    def get_message(self, msg_id: str = "", *, node: Node | None = None, commitlog_offset: int | None = None) -> pb.Message:
        """By offset message id (its store host says which node) or by commit-log offset on a node."""
        if commitlog_offset is not None:
            target = node or self.nodes()[0]
            return self._call(target.address, "GetMessage", pb.GetMessageRequest(commitlog_offset=commitlog_offset)).message
        address = codec.host_str(codec.decode_message_id(msg_id)[0])
        # the member that stored it, or its group (every member holds the same log; through an
        # access point the group is reached there, the member's own address perhaps not at all)
        holder = next((n for n in self.nodes() if address == n.address or any(m.address == address for m in n.members)), None)
        target_addr = holder.address if holder is not None else (node.address if node else self.endpoints[0])
        return self._call(target_addr, "GetMessage", pb.GetMessageRequest(msg_id=msg_id)).message

    def queue_offsets(
        self, topic: str, skip_unavailable: bool = False, *, skipped: list[str] | None = None
    ) -> dict[QueueRef, tuple[int, int]]:
        """(min, max) of every queue of every ready node; ``skip_unavailable`` leaves out a node
        that stops answering meanwhile (``skipped`` names them)."""
        if skip_unavailable and skipped is None:
            skipped = []
        req = pb.GetQueueOffsetsRequest(topic=topic)
        found = self._each_node(topic, lambda n: self._call(n.address, "GetQueueOffsets", req, node=n.name), skipped)
        return {QueueRef(n.name, n.address, q.queue_id): (q.min_offset, q.max_offset) for n, resp in found for q in resp.queues}

    def offset_by_time(self, topic: str, queue: QueueRef, timestamp_ms: int, upper: bool = False) -> int:
        check_queue(queue)
        req = pb.GetOffsetByTimeRequest(
            topic=topic, queue_id=queue.queue_id, timestamp=timestamp_ms, boundary=pb.UPPER if upper else pb.LOWER
        )
        return self._group_call(topic, queue, "GetOffsetByTime", req, reads=True).offset

    def commit(self, group: str, topic: str, queue: QueueRef, offset: int) -> None:
        """Commit on the node that owns the queue (its group's master)."""
        check_queue(queue)
        self._group_call(
            topic,
            queue,
            "CommitOffset",
            pb.CommitOffsetRequest(group=group, topic=topic, queue_id=queue.queue_id, offset=offset),
            reads=False,
        )

    def committed(self, group: str, topic: str, queue: QueueRef) -> int:
        check_queue(queue)
        req = pb.GetCommittedOffsetRequest(group=group, topic=topic, queue_id=queue.queue_id)
        return self._group_call(topic, queue, "GetCommittedOffset", req, reads=False).offset

    # ------------------------------------------------------------------ groups

    def heartbeat(self, address: str, request: pb.HeartbeatRequest, node: str = "", timeout: float | None = None) -> pb.HeartbeatResponse:
        return self._call(address, "Heartbeat", request, timeout=timeout, node=node)  # type: ignore[no-any-return]

    def unregister(self, address: str, group: str, client_id: str, node: str = "") -> None:
        self._call(address, "Unregister", pb.UnregisterRequest(group=group, client_id=client_id), timeout=5.0, node=node)

    def describe_groups(self, group: str = "", *, skipped: list[str] | None = None) -> list[tuple[Node, pb.GroupInfo]]:
        """Every node's view of its consumer groups (``skipped``: see ``_each_node``)."""
        req = pb.DescribeGroupsRequest(group=group)
        found = self._each_node("", lambda n: self._call(n.address, "DescribeGroups", req, node=n.name), skipped)
        return [(n, g) for n, resp in found for g in resp.groups]

    # ------------------------------------------------------------------ topics

    def create_topic(
        self, topic: str, queues: int = 0, *, perm: int = 0, message_type: str = "", skipped: list[str] | None = None
    ) -> list[pb.TopicInfo]:
        """Create the topic on every node, or change it there: ``queues``, ``perm`` (6 read and
        write, 4 read only, 2 write only) and RocketMQ 5's ``message_type`` (NORMAL, FIFO, DELAY,
        TRANSACTION, MIXED); 0 and "" leave an existing topic's as they are."""
        check_topic(topic)
        req = pb.CreateTopicRequest(topic=topic, queues=queues, perm=perm, message_type=message_type)
        out = [info for _, info in self._each_node("", lambda n: self._call(n.address, "CreateTopic", req, node=n.name), skipped)]
        self._routes.pop(topic, None)
        return out

    def delete_topic(self, topic: str, *, force: bool = False) -> list[pb.DeleteTopicResponse]:
        """Delete the topic on every node (every replica group's master), or on none: without
        ``force`` every node is asked first whether it holds messages of it (FAILED_PRECONDITION
        naming them, nothing deleted), and a node that is down fails it (UNAVAILABLE: a topic
        left there would come back)."""
        check_topic(topic)

        def each(dry_run: bool) -> list[tuple[Node, pb.DeleteTopicResponse]]:
            skipped: list[str] = []
            req = pb.DeleteTopicRequest(topic=topic, force=force, dry_run=dry_run)
            out = self._each_node("", lambda n: self._call(n.address, "DeleteTopic", req, node=n.name), skipped)
            if skipped:
                raise StoreError(
                    grpc.StatusCode.UNAVAILABLE, f"topic {topic} not deleted: {'; '.join(skipped)} (try again when it is back)"
                )
            return out

        if not force:
            holding = [f"{n.name} holds {r.messages}" for n, r in each(True) if r.messages]
            if holding:
                raise StoreError(
                    grpc.StatusCode.FAILED_PRECONDITION, f"topic {topic} not deleted: {', '.join(holding)} messages (delete with force)"
                )
        out = [r for _, r in each(False)]
        self._routes.pop(topic, None)
        return out

    def topics(self, *, skipped: list[str] | None = None) -> dict[str, dict[str, Any]]:
        """Topic → node → queue count (``skipped``: see ``_each_node``)."""
        out: dict[str, dict[str, Any]] = {}
        listed = self._each_node("", lambda n: self._call(n.address, "ListTopics", pb.ListTopicsRequest(), node=n.name), skipped)
        for n, resp in listed:
            for t in resp.topics:
                out.setdefault(t.name, {})[n.name] = t.write_queue_nums
        return out

    def topic_infos(self, *, skipped: list[str] | None = None) -> dict[str, dict[str, pb.TopicInfo]]:
        """Node → topic → its settings there (queues, perm, message type)."""
        listed = self._each_node("", lambda n: self._call(n.address, "ListTopics", pb.ListTopicsRequest(), node=n.name), skipped)
        return {n.name: {t.name: t for t in resp.topics} for n, resp in listed}

    # ------------------------------------------------------------------ users (§20)

    def group_masters(self) -> list[str]:
        """The master of every replica group (the address to reach it by); a group without a
        ready one fails the change (its users would differ from the others' until it is made
        again)."""
        nodes = self.nodes()
        down = [n.name for n in nodes if not n.ready]
        if down:
            raise StoreError(grpc.StatusCode.UNAVAILABLE, f"no ready master in {', '.join(down)}: change users once every group has one")
        return [n.address for n in nodes]

    def put_user(
        self, access_key: str, secret_key: str = "", *, super_user: bool = False, entries: list[dict[str, Any]] | None = None
    ) -> apb.UserInfo:
        """Create or replace a user on every replica group's master (``secret_key`` empty:
        keep its secret). ``entries``: ``{"resource", "actions", "decision", "sourceIps"}``."""
        req = put_user_request(access_key, secret_key, super_user, entries)
        return [self.admin(address).put_user(req) for address in self.group_masters()][0]

    def delete_user(self, access_key: str) -> bool:
        return any([self.admin(address).delete_user(access_key) for address in self.group_masters()])

    def users(self) -> list[apb.UserInfo]:
        """The users (without secrets), as the first group's master keeps them."""
        return self.admin(self.group_masters()[0]).users()

    # ------------------------------------------------------------------ admin

    def admin(self, node: str | None = None) -> AdminClient:
        if node is None:
            address = self.endpoints[0]
        elif ":" in node and node in known_addresses(self.endpoints, list(self._routes.values())):
            address = node  # an address it knows: no route needed (a failover's admin calls must not wait for one)
        else:  # a node's name, or a member's (a replica group's members are named apart from it)
            nodes = self.nodes()
            found = next((n.address for n in nodes if node in (n.name, n.address)), None)
            found = found or next((m.address for n in nodes for m in n.members if node == m.name and m.address), None)
            address = found or node
        return AdminClient(self, address)


def put_user_request(access_key: str, secret_key: str, super_user: bool, entries: list[dict[str, Any]] | None) -> apb.PutUserRequest:
    """Admin.PutUser's request; ``entries`` as ``{"resource", "actions", "decision", "sourceIps"}``."""
    return apb.PutUserRequest(
        access_key=access_key,
        secret_key=secret_key,
        user_type="Super" if super_user else "Normal",
        entries=[
            apb.AclEntry(
                resource=e["resource"],
                actions=e["actions"].split(",") if isinstance(e["actions"], str) else list(e["actions"]),
                decision=e.get("decision", "allow"),
                source_ips=list(e.get("sourceIps", ())),
            )
            for e in entries or ()
        ],
    )
