"""The asyncio consumer: :class:`~msgstore.client.consumer.Consumer`'s group behaviour (clustering
or broadcasting, hand-over with a commit first, start at the committed offset) on AsyncClient.
The heartbeat is a task on the same loop, so it keeps going while ``poll`` waits."""

from __future__ import annotations

import asyncio
import time

import grpc

from .aio import AsyncClient
from .client import StoreError, pull_queues_request, pull_result
from .consumer import (
    CLAIM_RETRY_S,
    IDLE_RETRY_S,
    MAX_QUEUES_PER_CALL,
    REFUSED_CALLER,
    ConsumerRecord,
    check_names,
    checked_selector,
    plenty,
)
from .errors import error_from
from .membership import BROADCASTING, CLUSTERING, DEFAULT_EXPIRY_S, DEFAULT_HEARTBEAT_S, Membership, broadcast_group, default_client_id
from .pull_stream import AsyncPullStream, StreamEnded
from .routing import QueueRef


class AsyncConsumer:
    def __init__(
        self,
        client: AsyncClient,
        group: str | None,
        topic: str,
        *,
        start: str = "earliest",
        tag_filter: str | None = None,
        sql: str | None = None,
        max_messages: int = 256,
        long_poll_ms: int = 1000,
        mode: str = CLUSTERING,
        client_id: str | None = None,
        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
        expiry_s: float = DEFAULT_EXPIRY_S,
    ):
        """As :class:`Consumer`; call ``await start()`` (or use ``async with``) before polling."""
        if start not in ("earliest", "latest"):
            raise ValueError("start must be 'earliest' or 'latest'")
        check_names(topic, group, client_id)
        self.client = client
        self.group = group
        self.topic = topic
        self.start_at = start
        self.tag_filter = tag_filter
        self.sql = checked_selector(sql, tag_filter)  # a SQL92 selector on properties instead of tag_filter
        self.max_messages = max_messages
        self._pull_each: set[str] = set()  # nodes without PullQueues (older): a Pull per queue
        self._unary_only: set[str] = set()  # nodes without PullQueuesStream (older): a call per long poll
        self._streams: dict[str, AsyncPullStream] = {}  # by node: its lone long polls
        self.long_poll_ms = long_poll_ms
        self.positions: dict[QueueRef, int] = {}
        self._committed: dict[QueueRef, int] = {}
        self.membership: Membership | None = None
        self.progress_group = group
        if group is not None:
            self.membership = Membership(group, topic, client_id or default_client_id(), mode, heartbeat_s, expiry_s)
            if mode == BROADCASTING:
                self.progress_group = broadcast_group(group, self.membership.client_id)
        self._allocated_for: tuple[str, ...] | None = None
        self._pending: set[QueueRef] = set()
        self._retry_at = 0.0
        self._recheck = False
        self._beat_lock = asyncio.Lock()
        self._beats: asyncio.Task | None = None
        self._caught_up = False  # a round found nothing: the next polls long-poll at once (as Consumer)
        self._moved = 0  # positions moved by answers (as Consumer)
        self._closed = False

    @property
    def clustering(self) -> bool:
        return self.membership is not None and self.membership.clustering

    async def start(self) -> AsyncConsumer:
        if not self.clustering:
            await self._start_positions((await self.client.route(self.topic, refresh=True)).queues)
        if self.membership is not None:
            await self.heartbeat()
            self._beats = asyncio.ensure_future(self._beat_loop())
        return self

    async def __aenter__(self) -> AsyncConsumer:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def heartbeat(self) -> None:
        m = self.membership
        if m is None:
            return
        async with self._beat_lock:
            try:
                route = await self.client.route(self.topic)
            except StoreError:
                return
            leader = Membership.leading(route.nodes)
            for node in route.nodes:
                if node.ready:
                    try:
                        resp = await self.client.heartbeat(
                            node.address, m.request(node.address), node=node.name, timeout=min(5.0, m.expiry_s / 2)
                        )
                    except StoreError as e:
                        if e.code in REFUSED_CALLER:  # we may not be of this group: say so
                            raise
                        continue
                    m.absorb(node, resp, leader is not None and node.address == leader.address)

    async def _beat_loop(self) -> None:
        m = self.membership
        assert m is not None
        while True:
            await asyncio.sleep(m.heartbeat_s)
            try:
                await self.heartbeat()
            except asyncio.CancelledError:
                raise
            except Exception:  # never let the heartbeat die: the member would be expelled
                continue

    async def _rebalance(self) -> None:
        m = self.membership
        assert m is not None
        now = time.monotonic()
        if self._recheck:
            self._recheck = False
            await self.heartbeat()
        members, _ = m.snapshot()
        lost = m.lost(self.positions)
        if members == self._allocated_for and not lost and not (self._pending and now >= self._retry_at):
            return
        for q in lost:
            self.positions.pop(q, None)
            self._committed.pop(q, None)
        try:
            queues = (await self.client.route(self.topic)).key_queues()
        except StoreError:
            return
        target = m.target(queues)
        revoked = {q: off for q, off in self.positions.items() if q not in target}
        if revoked:
            try:
                await self.commit(revoked)
            except StoreError:
                pass
            for q in revoked:
                self.positions.pop(q, None)
                self._committed.pop(q, None)
        m.set_claims(target)
        wanted = [q for q in target if q not in self.positions]
        if revoked or wanted:
            await self.heartbeat()
        members_after, _ = m.snapshot()
        await self._start_positions(m.granted_of(wanted))
        self._pending = {q for q in wanted if q not in self.positions}
        self._retry_at = now + CLAIM_RETRY_S
        self._allocated_for = members if members == members_after else None

    async def _start_positions(self, queues: list[QueueRef]) -> None:
        offsets = None
        for q in queues:
            try:
                committed = await self.client.committed(self.progress_group, self.topic, q) if self.progress_group else -1
                if committed < 0 and offsets is None:
                    offsets = await self.client.queue_offsets(self.topic, skip_unavailable=True)
            except StoreError as e:
                if e.code in REFUSED_CALLER:
                    raise
                continue
            if committed >= 0:
                self.positions[q] = self._committed[q] = committed
            elif offsets is not None and q in offsets:
                lo, hi = offsets[q]
                self.positions[q] = lo if self.start_at == "earliest" else hi
                if self.progress_group:  # where the group starts, recorded (as Consumer does)
                    try:
                        await self.client.commit(self.progress_group, self.topic, q, self.positions[q])
                        self._committed[q] = self.positions[q]
                    except StoreError:
                        pass

    async def poll(self, timeout: float = 1.0) -> list[ConsumerRecord]:
        """Messages from any queue, waiting up to ``timeout`` seconds for some (long polls of
        at most ``long_poll_ms`` each, the group followed between them), as Consumer.poll."""
        if self._closed:
            raise RuntimeError("the consumer is closed")
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            began, moved = time.monotonic(), self._moved
            out = await self._poll_once(max(deadline - began, 0.0) if timeout > 0 else 0.0)
            now = time.monotonic()
            if out or timeout <= 0 or now >= deadline or self._closed:
                return out
            if now - began < IDLE_RETRY_S and self._moved == moved:  # every call failed at once (all nodes down): do not spin
                await asyncio.sleep(min(IDLE_RETRY_S, deadline - now))
                if self._closed:
                    return []

    async def _poll_once(self, timeout: float) -> list[ConsumerRecord]:
        if self.clustering:
            await self._rebalance()
        queues = list(self.positions)
        if not queues:
            if timeout > 0:
                await asyncio.sleep(
                    min(timeout, CLAIM_RETRY_S if self._pending else self.membership.heartbeat_s if self.membership else timeout)
                )
            return []
        out: list[ConsumerRecord] = []
        if not (self._caught_up and timeout > 0):  # (caught up, the long poll answers at once what is there: as Consumer)
            out = await self._pull_all(queues, 0)
            self._caught_up = not out
        if not out and timeout > 0:
            wait_s = min(timeout, self.long_poll_ms / 1000, self.membership.heartbeat_s if self.clustering else timeout)  # type: ignore[union-attr]
            out = await self._pull_all(queues, int(wait_s * 1000))
        if plenty(len(out), self.max_messages):
            self._caught_up = False
        return out

    async def _pull_all(self, queues: list[QueueRef], timeout_ms: int) -> list[ConsumerRecord]:
        """One PullQueues per node for its queues (a Pull per queue on a node older than it).
        A long poll answers as soon as one node has messages: the others' calls are cancelled
        (a pull moves nothing on the store, so nothing is lost)."""
        by_address: dict[str, list[QueueRef]] = {}
        for q in queues:
            try:
                by_address.setdefault(await self.client.read_address(self.topic, q), []).append(q)
            except StoreError:
                continue
        parts = [
            (address, qs[i : i + MAX_QUEUES_PER_CALL]) for address, qs in by_address.items() for i in range(0, len(qs), MAX_QUEUES_PER_CALL)
        ]
        # a lone long poll goes on the node's pull stream; several are not (the first answer cancels
        # the others, and a cancelled pull closes its stream)
        lone = len(parts) == 1 and timeout_ms > 0
        calls = [asyncio.ensure_future(self._pull_node(address, qs, timeout_ms, lone)) for address, qs in parts]
        answered: list[list[tuple[QueueRef, object]]] = []
        pending = set(calls)
        try:
            while pending and not (timeout_ms and any(resp.record_count for a in answered for _q, resp in a)):  # type: ignore[attr-defined]
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                answered += [call.result() for call in done]
        finally:
            for call in pending:
                call.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        # positions move only now, all at once: a poll cancelled or failed before this moves none.
        # Empty answers move them too (a filter's "no match"): a caught-up consumer, which skips
        # the round, would otherwise ask for the same unmatched messages forever
        out: list[ConsumerRecord] = []
        for answers in answered:
            self._took(answers, out)
        return out

    async def _pull_node(self, address: str, queues: list[QueueRef], timeout_ms: int, lone: bool = False) -> list[tuple[QueueRef, object]]:
        if lone and len(queues) > 1 and address not in self._pull_each and address not in self._unary_only:
            try:
                return await self._stream_pull(address, queues, timeout_ms)
            except StoreError as e:
                if not await self._unimplemented(e):
                    return []
                self._unary_only.add(address)  # older than the stream: PullQueues calls
            except (TimeoutError, StreamEnded):
                return []
        kw = {
            "max_messages": self.max_messages,
            "timeout_ms": timeout_ms,
            "group": self.group or "",
            "tag_filter": self.tag_filter,
            "sql": self.sql,
        }
        if address not in self._pull_each and len(queues) > 1:
            try:
                return await self.client.pull_queues(self.topic, address, [(q, self.positions[q]) for q in queues], **kw)  # type: ignore[arg-type]
            except StoreError as e:
                if not await self._unimplemented(e):
                    return []
                self._pull_each.add(address)

        async def one(q: QueueRef) -> tuple[QueueRef, object] | None:
            try:
                return q, await self.client.pull_response(self.topic, q, self.positions[q], **kw)  # type: ignore[arg-type]
            except StoreError as e:
                if e.code in REFUSED_CALLER:
                    raise
                return None

        return [r for r in await asyncio.gather(*[one(q) for q in queues]) if r is not None]

    async def _unimplemented(self, e: StoreError) -> bool:
        """Whether a failed pull of several queues says the node is older than the call; a
        refusal of the caller is raised (about us, not the node: every node would say it), and
        UNAVAILABLE (a failover, say) has the next poll ask who serves the queues now."""
        if e.code in REFUSED_CALLER:
            raise e
        if e.code == grpc.StatusCode.UNAVAILABLE:
            try:
                await self.client.route(self.topic, refresh=True)
            except StoreError:
                pass
        return e.code == grpc.StatusCode.UNIMPLEMENTED

    async def _stream_pull(self, address: str, queues: list[QueueRef], timeout_ms: int) -> list[tuple[QueueRef, object]]:
        """A long poll as a request on the node's pull stream (opened again after one that failed)."""
        if self._closed:  # (closed while this poll ran: no stream opened after close())
            raise StreamEnded("the consumer is closed")
        stream = self._streams.get(address)
        if stream is None or stream.closed:
            for other in [a for a in self._streams if a != address]:  # (one we no longer read alone: as Consumer's)
                self._streams.pop(other).close()
            stream = self._streams[address] = self.client.pull_stream(address)
        request = pull_queues_request(
            self.topic, [(q, self.positions[q]) for q in queues], self.max_messages, timeout_ms, self.tag_filter, self.group or "", self.sql
        )
        try:
            resp = await stream.pull(request, self.client.timeout + timeout_ms / 1000)
        except grpc.aio.AioRpcError as e:
            raise error_from(e, address) from None
        return list(zip(queues, resp.results))

    def _took(self, answers: list[tuple[QueueRef, object]], out: list[ConsumerRecord]) -> None:
        for q, resp in answers:
            if q not in self.positions:
                continue
            if self.membership is not None and self.membership.stale(q.address, resp.group_generation):  # type: ignore[attr-defined]
                self._recheck = True  # (an empty answer tells it too: an idle member follows its group)
            res = pull_result(resp, q.node)
            if self.positions[q] != res.next_offset:
                self._moved += 1
            self.positions[q] = res.next_offset
            out.extend(ConsumerRecord(q, m) for m in res.messages)

    async def commit(self, offsets: dict[QueueRef, int] | None = None) -> None:
        if not self.progress_group:
            raise RuntimeError("a consumer without a group cannot commit")
        for q, off in list((self.positions if offsets is None else offsets).items()):
            if self._committed.get(q) != off:
                await self.client.commit(self.progress_group, self.topic, q, off)
                self._committed[q] = off

    def assignment(self) -> list[QueueRef]:
        return sorted(self.positions, key=lambda q: (q.node, q.queue_id))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for stream in self._streams.values():
            stream.close()
        if self._beats is not None:
            self._beats.cancel()
            try:
                await self._beats
            except asyncio.CancelledError:
                pass
        if self.membership is None:
            return
        try:
            await self.commit()
        except StoreError:
            pass
        for node in (await self.client.route(self.topic)).nodes:
            if node.ready:
                try:
                    await self.client.unregister(node.address, self.membership.group, self.membership.client_id, node=node.name)
                except StoreError:
                    continue
        self.positions.clear()
