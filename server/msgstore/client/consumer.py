"""A consumer of one topic, alone or as a member of a consumer group.

Without a group it reads every (node, queue). With a group, in clustering mode (the default,
RocketMQ's CLUSTERING, Kafka's consumer groups), the group's live members split the queues: each
reads only the queues the nodes granted it (see membership.py), starting where the group
committed, and commits a queue's position before letting it go; so a message is processed by one
member, and again only when a member stops without committing (at-least-once). In broadcasting
mode every member reads every queue with its own progress (committed under the group and its
client id: give a stable ``client_id`` to resume after a restart).

Positions are Kafka's: ``poll()`` returns messages and moves the positions past them; what
``commit()`` (or a hand-over) records is the position, so call ``poll()`` again only once the
previous batch is processed. ``poll()`` takes what is there in rounds of concurrent calls; when a
round finds every queue empty it long-polls all of them at once (one call per node) and returns as
soon as any has messages, and goes on long-polling first until plenty arrives at once.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import grpc

from ..record import codec
from ..record.selector import SelectorError, compile_selector
from .client import Client, PullResult, StoreError, pull_queues_request, pull_result
from .errors import error_from
from .membership import (
    BROADCASTING,
    CLUSTERING,
    DEFAULT_EXPIRY_S,
    DEFAULT_HEARTBEAT_S,
    Membership,
    broadcast_group,
    default_client_id,
)
from .pull_stream import PullStream, StreamEnded
from .routing import QueueRef

REFRESH_S = 30.0  # how often new nodes' queues are looked for
MISSING_REFRESH_S = 2.0  # ... and while a node is down or a queue has no position yet (a node returning)
PARALLEL_PULLS = 4  # calls in flight at once (measured with a Pull per queue: 1 → 60k, 4 → 97k msg/s on 2 cores)
MAX_QUEUES_PER_CALL = 256  # queues per PullQueues call (the server takes up to 1024)
CLAIM_RETRY_S = 0.1  # how soon a queue allocated to us but still held by another member is asked for again
LATE_ANSWER_S = 0.2  # past a poll's timeout, how long its lone long poll's answer is still waited for
IDLE_RETRY_S = 0.1  # the pause in a poll whose calls all failed at once, before it tries again


@dataclass
class ConsumerRecord:
    queue: QueueRef
    message: codec.StoredMessage

    def __getattr__(self, name):
        return getattr(self.message, name)


class _Answered:
    """A call made in the caller's thread, its answer or error read as a finished future's."""

    def __init__(self, call):
        self._answer, self._error = None, None
        try:
            self._answer = call()
        except Exception as e:
            self._error = e

    def done(self) -> bool:
        return True

    def cancelled(self) -> bool:
        return False

    def cancel(self) -> bool:
        return False

    def result(self):
        if self._error is not None:
            raise self._error
        return self._answer


class _Call:
    """One pull call of a poll: a PullQueues for several queues of a node, or a Pull for one
    (``single``). A node answering UNIMPLEMENTED to PullQueues (older than it) is remembered,
    and its queues are pulled one by one from then on."""

    def __init__(self, consumer: Consumer, address: str, queues: list[QueueRef], timeout_ms: int, single: bool = False):
        self.consumer = consumer
        self.address = address
        self.queues = queues
        self.timeout_ms = timeout_ms
        self.single = single
        self.streamed = False  # made on the node's pull stream
        self.future = None

    def start(self, on_done=None, *, here: float | None = None) -> None:
        """Start the call; with ``here`` (seconds), make it in this thread and return once it is
        answered, or once ``here`` has passed (the deadline a future would have had, or the
        poll's end, where the wait for a future ended). For a lone call: a future would cost a
        thread of gRPC's own, see Client.pull_queues_future."""
        if here is not None:
            self.future = _Answered(lambda: self._invoke(True, here))
            return
        try:
            self.future = self._invoke(False)
        except Exception:
            self.future = None  # a node that is down is skipped until it returns
            return
        if on_done is not None:
            self.future.add_done_callback(on_done)

    def _invoke(self, here: bool, within: float | None = None):
        c = self.consumer
        options: dict[str, Any] = dict(
            max_messages=c.max_messages,
            timeout_ms=self.timeout_ms,
            tag_filter=c.tag_filter,
            sql=c.sql,
            group=c.group or "",
            here=here,
            within=within,
        )
        if self.single:
            q = self.queues[0]
            return c.client.pull_future(c.topic, q, c.positions[q], **options)
        queues = [(q, c.positions[q]) for q in self.queues]
        if here and within is not None and self.address not in c._unary_only:
            self.streamed = True
            request = pull_queues_request(c.topic, queues, c.max_messages, self.timeout_ms, c.tag_filter, c.group or "", c.sql)
            return c._pull_stream(self.address).pull(request, within)
        return c.client.pull_queues_future(c.topic, self.address, queues, **options)

    def done(self) -> bool:
        return self.future is None or self.future.done()

    def cancel(self) -> None:
        if self.future is not None:
            self.future.cancel()

    def answers(self) -> list[tuple[QueueRef, object]]:
        """(queue, PullResponse) for each queue answered; none when the call failed."""
        f = self.future
        if f is None or f.cancelled():
            return []
        try:
            resp = f.result()
        except grpc.RpcError as e:
            if e.code() in REFUSED_CALLER:  # about us, not the node: passing over it would look like no messages
                raise error_from(e, self.address) from None
            if self.streamed and e.code() == grpc.StatusCode.UNIMPLEMENTED:
                self.consumer._unary_only.add(self.address)  # older than the stream: PullQueues calls
            elif not self.single and e.code() == grpc.StatusCode.UNIMPLEMENTED:
                self.consumer._pull_each.add(self.address)
            return []
        except Exception:
            return []
        if self.single:
            return [(self.queues[0], resp)]
        return list(zip(self.queues, resp.results))


# what a node says of the caller (its credentials or permissions): every node would say the same
REFUSED_CALLER = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED})


def check_names(topic: str, group: str | None, client_id: str | None) -> None:
    """ValueError naming a topic, group or client id that every node would refuse: refused
    there, a consumer's heartbeats and start positions are taken for a node that is down, and
    its polls came back empty forever."""
    err = codec.topic_error(topic)
    if err:
        raise ValueError(f"{err} (got {str(topic)[:140]!r})")
    if group is not None and (err := codec.group_error(group)):
        raise ValueError(f"group: {err} (got {str(group)[:140]!r})")
    if group is not None and client_id is not None and (err := codec.client_id_error(client_id)):  # (without a group it is not used)
        raise ValueError(f"client_id: {err} (got {str(client_id)[:140]!r})")


def plenty(records: int, max_messages: int) -> bool:
    """A poll brought enough (a quarter of ``max_messages``) that the consumer is behind: its
    next polls read in rounds again instead of long-polling at once (both consumers' rule)."""
    return records >= max(1, max_messages // 4)


def checked_selector(sql: str | None, tag_filter: str | None) -> str | None:
    """A consumer's SQL92 selector, checked when it is made: the store refuses a bad one with
    every pull, which a consumer (that passes over a node it cannot read) would only show as
    no messages. StoreError INVALID_ARGUMENT naming the column."""
    if not sql:
        return None
    if tag_filter and tag_filter.strip() != "*":
        raise StoreError(grpc.StatusCode.INVALID_ARGUMENT, "sql: give a tag filter or a SQL92 selector, not both")
    try:
        compile_selector(sql)
    except SelectorError as e:
        raise StoreError(grpc.StatusCode.INVALID_ARGUMENT, f"sql: not a SQL92 selector: {e}") from None
    return sql


class Consumer:
    def __init__(
        self,
        client: Client,
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
        """``group=None`` reads without a group: positions start at ``start`` and cannot be
        committed. ``mode``: ``"clustering"`` (members split the queues) or ``"broadcasting"``.
        ``expiry_s``: a member that stops heartbeating (every ``heartbeat_s``) for this long
        leaves, and its queues go to the others."""
        if start not in ("earliest", "latest"):
            raise ValueError("start must be 'earliest' or 'latest'")
        check_names(topic, group, client_id)
        self.client = client
        self.group = group
        self.topic = topic
        self.start = start
        self.tag_filter = tag_filter
        self.sql = checked_selector(sql, tag_filter)  # a SQL92 selector on properties instead of tag_filter
        self.max_messages = max_messages
        self._pull_each: set[str] = set()  # nodes without PullQueues (older): a Pull per queue
        self._unary_only: set[str] = set()  # nodes without PullQueuesStream (older): a call per long poll
        self._streams: dict[str, PullStream] = {}  # by node: its long polls when we are caught up
        self._streams_lock = threading.Lock()
        self.long_poll_ms = long_poll_ms
        self.positions: dict[QueueRef, int] = {}
        self._committed: dict[QueueRef, int] = {}
        self._next = 0
        self._refreshed_at = 0.0
        self.membership: Membership | None = None
        self.progress_group = group  # where positions are committed
        if group is not None:
            self.membership = Membership(group, topic, client_id or default_client_id(), mode, heartbeat_s, expiry_s)
            if mode == BROADCASTING:
                self.progress_group = broadcast_group(group, self.membership.client_id)
        self._allocated_for: tuple[str, ...] | None = None
        self._pending: set[QueueRef] = set()  # allocated to us, not yet granted
        self._retry_at = 0.0
        self._recheck = False  # a pull saw the group change
        self._beat_lock = threading.Lock()
        self._stopped = threading.Event()
        self._caught_up = False  # a round found nothing: the next polls long-poll at once
        self._moved = 0  # positions moved by answers, so a pass that moved one is told from a failed one
        self._closed = False
        self._beats: threading.Thread | None = None
        self.refresh()
        if self.membership is not None:
            self.heartbeat()
            self._beats = threading.Thread(target=self._beat_loop, name=f"msgstore-heartbeat-{group}", daemon=True)
            self._beats.start()

    @property
    def client_id(self) -> str | None:
        return self.membership.client_id if self.membership else None

    @property
    def clustering(self) -> bool:
        return self.membership is not None and self.membership.clustering

    # ------------------------------------------------------------------ membership

    def heartbeat(self) -> None:
        """Tell every ready node this member is alive, with its claims; absorb the answers."""
        m = self.membership
        if m is None:
            return
        with self._beat_lock:
            try:
                route = self.client.route(self.topic)
            except StoreError:
                return
            leader = Membership.leading(route.nodes)
            for node in route.nodes:
                if not node.ready:
                    continue
                try:
                    resp = self.client.heartbeat(node.address, m.request(node.address), node=node.name, timeout=min(5.0, m.expiry_s / 2))
                except StoreError as e:
                    if e.code in REFUSED_CALLER:  # not a node that is down: we may not be of this group
                        raise
                    continue  # a node that is down: its queues cannot be read anyway
                m.absorb(node, resp, leader is not None and node.address == leader.address)

    def _beat_loop(self) -> None:
        m = self.membership
        assert m is not None
        while not self._stopped.wait(m.heartbeat_s):
            try:
                self.heartbeat()
            except Exception:  # never let the heartbeat die: the member would be expelled
                continue

    def _rebalance(self) -> None:
        """Follow the group: let go (committing first) of queues no longer ours, claim the new
        ones, and start each granted queue at the group's committed offset."""
        m = self.membership
        assert m is not None
        now = time.monotonic()
        if self._recheck:
            self._recheck = False
            self.heartbeat()
        members, _ = m.snapshot()
        lost = m.lost(self.positions)
        if members == self._allocated_for and not lost and not (self._pending and now >= self._retry_at):
            return
        for q in lost:  # the node gave it to another member (we were taken for gone): its progress is theirs now
            self.positions.pop(q, None)
            self._committed.pop(q, None)
        try:
            queues = self.client.route(self.topic).key_queues()
        except StoreError:
            return
        target = m.target(queues)
        revoked = {q: off for q, off in self.positions.items() if q not in target}
        if revoked:
            try:
                self.commit(revoked)
            except StoreError:
                pass  # a node that is down keeps the last commit: the next member re-reads from there
            for q in revoked:
                self.positions.pop(q, None)
                self._committed.pop(q, None)
        m.set_claims(target)
        wanted = [q for q in target if q not in self.positions]
        if revoked or wanted:
            self.heartbeat()  # releases what we let go, claims what we want
        members_after, _ = m.snapshot()
        self._start_positions(m.granted_of(wanted))
        self._pending = {q for q in wanted if q not in self.positions}
        self._retry_at = now + CLAIM_RETRY_S
        self._allocated_for = members if members == members_after else None

    def _start_positions(self, queues: list[QueueRef]) -> None:
        offsets = None
        for q in queues:
            try:
                committed = self.client.committed(self.progress_group, self.topic, q) if self.progress_group else -1
                if committed < 0 and offsets is None:
                    offsets = self.client.queue_offsets(self.topic, skip_unavailable=True)
            except StoreError as e:
                if e.code in REFUSED_CALLER:  # (every node would refuse us: say so, not "no messages")
                    raise
                continue
            if committed >= 0:
                self.positions[q] = self._committed[q] = committed
            elif offsets is not None and q in offsets:
                lo, hi = offsets[q]
                self.positions[q] = lo if self.start == "earliest" else hi
                if self.progress_group:
                    # record where the group starts, as RocketMQ's offset store does: the next
                    # holder starts there too (not at its own "latest"), and `msgstore groups`
                    # shows a committed offset for every queue a member has held
                    try:
                        self.client.commit(self.progress_group, self.topic, q, self.positions[q])
                        self._committed[q] = self.positions[q]
                    except StoreError:
                        pass  # committed with the next commit() instead

    def assignment(self) -> list[QueueRef]:
        """The queues this consumer reads now."""
        return sorted(self.positions, key=lambda q: (q.node, q.queue_id))

    def close(self) -> None:
        """Commit, and leave the group at once (its queues go to the others without waiting
        for the expiry)."""
        if self._closed:
            return
        with self._streams_lock:
            self._closed = True
            streams = list(self._streams.values())
        self._stopped.set()
        for stream in streams:
            stream.close()
        if self._beats is not None:
            self._beats.join(10)
        if self.membership is None:
            return
        try:
            self.commit()
        except StoreError:
            pass
        with self._beat_lock:
            for node in self.client.route(self.topic).nodes:
                if node.ready:
                    try:
                        self.client.unregister(node.address, self.membership.group, self.membership.client_id, node=node.name)
                    except StoreError:
                        continue
        self.positions.clear()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ reading

    def refresh(self) -> None:
        """Pick up queues of new nodes (scaling up) and resolve their start positions. A node
        that does not answer right now is left for the next refresh."""
        self._refreshed_at = time.monotonic()
        route = self.client.route(self.topic, refresh=True)
        if self.clustering:
            self._allocated_for = None  # allocate again over the route's queues
            return
        self._start_positions([q for q in route.queues if q not in self.positions])

    def _pull_stream(self, address: str) -> PullStream:
        """The node's open pull stream, opened again after one that failed. Only a lone long
        poll takes a stream, so one to another node is one we no longer read alone (a failover
        moved the queues, say): it is closed (its threads would otherwise wait until ours)."""
        with self._streams_lock:  # (close() may come from another thread: no stream opened after it)
            if self._closed:
                raise StreamEnded("the consumer is closed")
            stream = self._streams.get(address)
            if stream is None or stream.closed:
                for other in [a for a in self._streams if a != address]:
                    self._streams.pop(other).close()
                stream = self._streams[address] = self.client.pull_stream(address)
            return stream

    def __del__(self) -> None:
        # a consumer dropped without close(): its streams' watchdog threads hold them (and a stream
        # on the node) until the channel closes
        for stream in list(getattr(self, "_streams", {}).values()):
            try:
                stream.close()
            except Exception:  # (at the interpreter's exit gRPC may be gone already)
                pass

    def _incomplete(self) -> bool:
        """Some node of the route is down, or some queue has no position yet."""
        route = self.client.route(self.topic)
        if self.clustering:
            return any(not n.ready for n in route.nodes)
        return any(not n.ready for n in route.nodes) or any(q not in self.positions for q in route.queues)

    def poll(self, timeout: float = 1.0) -> list[ConsumerRecord]:
        """Messages from any queue, waiting up to ``timeout`` seconds for some: a concurrent
        round of pulls over the queues (the server and the network overlap with decoding), else
        a long poll of all of them in one call per node, answered as soon as something is there;
        caught up (a round found nothing, and little has come since), the long poll at once.
        Between long polls (each at most ``long_poll_ms``) the consumer looks again for queues
        it could not reach, so a node that returns within the timeout is read within it."""
        if self._closed:
            raise RuntimeError("the consumer is closed")
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            began, moved = time.monotonic(), self._moved
            out = self._poll_once(max(deadline - began, 0.0) if timeout > 0 else 0.0)
            now = time.monotonic()
            if out or timeout <= 0 or now >= deadline or self._closed:
                return out
            # at once and nothing moved: every call failed (all nodes down); do not spin. (A
            # filter's "no match" moves a position, and the next pass follows without a pause.)
            if now - began < IDLE_RETRY_S and self._moved == moved:
                if self._stopped.wait(min(IDLE_RETRY_S, deadline - now)):
                    return []  # closed meanwhile

    def _poll_once(self, timeout: float) -> list[ConsumerRecord]:
        age = time.monotonic() - self._refreshed_at
        if (not self.positions and not self.clustering) or age > REFRESH_S or (age > MISSING_REFRESH_S and self._incomplete()):
            self.refresh()
        if self.clustering:
            self._rebalance()
        queues = list(self.positions)
        n = len(queues)
        if n == 0:
            if self.clustering and timeout > 0:  # nothing of ours yet: wait a little for the group to settle
                self._stopped.wait(min(timeout, CLAIM_RETRY_S if self._pending else self.membership.heartbeat_s))  # type: ignore[union-attr]
            return []
        order = [queues[(self._next + i) % n] for i in range(n)]
        self._next = (self._next + 1) % n
        if self._caught_up and timeout > 0:
            out = self._long_poll(order, timeout)
        else:
            out = self._round_then_wait(order, timeout)
        if plenty(len(out), self.max_messages):
            self._caught_up = False  # read on in rounds
        return out

    def _round_then_wait(self, order: list[QueueRef], timeout: float) -> list[ConsumerRecord]:
        """What is there, in rounds of concurrent calls (a backlog is read faster so), else a
        long poll. A round that finds nothing marks the consumer caught up: its next polls
        long-poll at once, one call per node answered as soon as something is there, where a
        round first cost a consumer keeping up with a trickle five calls per arrival. (Caught
        up meaning "the last answer was short" instead slowed a 50,000/s consumer: at that rate
        rounds find something each time, and their concurrent calls read faster.)"""
        calls = self._calls(order, 0)
        read: list[tuple[QueueRef, PullResult]] = []
        records = 0
        for start in range(0, len(calls), PARALLEL_PULLS):
            round_ = calls[start : start + PARALLEL_PULLS]
            for call in round_:
                call.start()
            answered = self._read(round_)
            read += answered
            records += sum(len(res.messages) for _q, res in answered)
            if records >= self.max_messages:
                break
        out = self._apply(read)  # (only now: a refusal in a later round must find no position moved)
        self._caught_up = not out
        if out or timeout <= 0:
            return out
        return self._long_poll(order, timeout)

    def _calls(self, queues: list[QueueRef], timeout_ms: int) -> list[_Call]:
        """Calls that pull ``queues`` (not yet started): one PullQueues per node for its queues
        (a few hundred records cost the store less than one call), or a Pull per queue on a node
        that predates PullQueues."""
        by_address: dict[str, list[QueueRef]] = {}
        for q in queues:
            try:
                by_address.setdefault(self.client.read_address(self.topic, q), []).append(q)
            except Exception:
                continue  # a node that is down is skipped until it returns
        calls = []
        for address, qs in by_address.items():
            if address in self._pull_each or len(qs) == 1:
                calls.extend(_Call(self, address, [q], timeout_ms, single=True) for q in qs)
            else:  # a round takes what is there in PARALLEL_PULLS calls (the store reads one while we decode another); a long poll in one
                per = min(MAX_QUEUES_PER_CALL, len(qs) if timeout_ms else -(-len(qs) // PARALLEL_PULLS))
                calls.extend(_Call(self, address, qs[i : i + per], timeout_ms, single=per == 1) for i in range(0, len(qs), per))
        return calls

    def _read(self, calls: list[_Call], every: list[_Call] | None = None) -> list[tuple[QueueRef, PullResult]]:
        """The calls' answers, decoded as each arrives (the store serves the others meanwhile)
        but not applied: a poll moves positions only once every call it reads has answered, so
        a refusal of the caller by a later call (raised; the calls still running, of ``every``,
        cancelled) leaves no position moved past records the caller never got."""
        read: list[tuple[QueueRef, PullResult]] = []
        try:
            for call in calls:
                for q, resp in call.answers():
                    self._saw(q, resp)
                    read.append((q, pull_result(resp, q.node)))
        except BaseException:
            for call in every or calls:
                call.cancel()
            raise
        return read

    def _apply(self, read: list[tuple[QueueRef, PullResult]]) -> list[ConsumerRecord]:
        """Positions moved past what was read, every answer's (an empty one too: a filter's "no
        match" moves on); the records, to return."""
        out: list[ConsumerRecord] = []
        for q, res in read:
            if self.positions.get(q) != res.next_offset:
                self._moved += 1
            self.positions[q] = res.next_offset
            out.extend(ConsumerRecord(q, m) for m in res.messages)
        return out

    def _saw(self, q: QueueRef, resp) -> None:
        if self.membership is not None and self.membership.stale(q.address, resp.group_generation):
            self._recheck = True

    def _long_poll(self, queues: list[QueueRef], timeout: float) -> list[ConsumerRecord]:
        done = threading.Event()
        wait_s = min(timeout, self.long_poll_ms / 1000)
        if self.clustering:  # a member that waits still follows its group
            wait_s = min(wait_s, self.membership.heartbeat_s)  # type: ignore[union-attr]
        calls = self._calls(queues, int(wait_s * 1000))
        lone = len(calls) == 1
        for call in calls:
            # (a lone call's deadline: a future's, or the poll's end where the wait for it ended)
            call.start(lambda _f: done.set(), here=min(timeout + LATE_ANSWER_S, self.client.timeout + wait_s) if lone else None)
        deadline = time.monotonic() + timeout
        out: list[ConsumerRecord] = []
        taken: set[int] = set()
        while True:
            # answers are taken before asking whether all calls are done: a call answered before
            # the first look (its messages already there) was once passed over, and a position
            # update after the wait then skipped its messages. Every answer taken is applied,
            # empty ones too (a filter's "no match" moves the position on); a call answered
            # after the last look is not, and is read again by the next poll.
            finished = [i for i, call in enumerate(calls) if i not in taken and call.done()]
            taken.update(finished)
            out += self._apply(self._read([calls[i] for i in finished], every=calls))
            left = deadline - time.monotonic()
            if out or left <= 0 or len(taken) == len(calls):
                break
            done.wait(left)
            done.clear()
        for call in calls:
            if not call.done():
                call.cancel()
        return out

    def commit(self, offsets: dict[QueueRef, int] | None = None) -> None:
        """Commit every position that moved (or the given ``offsets``), each on the node owning
        its queue. A node that does not answer does not stop the others: every queue that can
        be committed is, then a :class:`StoreError` names those that could not."""
        if not self.progress_group:
            raise RuntimeError("a consumer without a group cannot commit")
        failed: list[str] = []
        last: StoreError | None = None
        for q, off in list((self.positions if offsets is None else offsets).items()):
            if self._committed.get(q) != off:
                try:
                    self.client.commit(self.progress_group, self.topic, q, off)
                except StoreError as e:
                    failed.append(f"{q} ({e.code.name})")
                    last = e
                    continue
                self._committed[q] = off
        if last is not None:
            raise StoreError(last.code, f"could not commit {', '.join(failed)}: {last.details}", last.node)

    def lag(self) -> int:
        offsets = self.client.queue_offsets(self.topic, skip_unavailable=True)
        return sum(max(0, hi - self.positions.get(q, lo)) for q, (lo, hi) in offsets.items())


__all__ = ["BROADCASTING", "CLUSTERING", "Consumer", "ConsumerRecord", "grpc"]
