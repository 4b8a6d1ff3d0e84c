"""The follower's side: connect to the master, cut back what the master never had, then write
the master's bytes at the master's offsets and report how far it got; and copy the master's
metadata (topics, consumer offsets, groups) on a short period. Reconnects until told to stop.

A master that goes silent (a partition, a paused process: its TCP connection stays open) is
given up after ``haKeepaliveTimeout`` without a chunk (the master sends one at least every
second), so ``connected`` and the lag say the truth within seconds.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from ..store.commitlog import AppendError
from ..store.layout import BROKER_STATE_END, FOLLOWED_BROKER_FILES
from ..store.metadata import write_atomic
from ..v1 import ha_pb2 as hpb
from ..v1 import ha_pb2_grpc as hpbg
from .chunk import read_chunk
from .epochs import Epoch
from .master import NAME_TAKEN, epochs_pb

if TYPE_CHECKING:
    from ..store.dispatch import Dispatcher

log = logging.getLogger(__name__)
T = TypeVar("T")

FOLLOW = "/msgstore.v1.Replication/Follow"  # with read_chunk for its answers: data chunks' bytes are not copied out
METADATA_EVERY_S = 1.0
RETRY_S = (0.1, 0.2, 0.5, 1.0)


async def latest_reports(outbox: asyncio.Queue[hpb.FollowerReport | None]) -> AsyncIterator[hpb.FollowerReport]:
    """The reports to send, from ``outbox`` until None: of those queued while the one before
    was being written, only the newest. A report is cumulative (where this copy ends, the
    newest chunk's echo), and each written cost the follower's loop 70 us or so of grpc.aio
    under SYNC load (12 % of it); the master learns the same, sooner, from the newest. The
    handshake is never skipped."""
    while (report := await outbox.get()) is not None:
        while not report.handshake and not outbox.empty():
            newer = outbox.get_nowait()
            if newer is None:
                yield report
                return
            report = newer
        yield report


class MasterSilent(Exception):
    """No chunk from the master within haKeepaliveTimeout."""


def bound_dispatch(dispatcher: Dispatcher, confirm: int, prior: int, carries_data: bool) -> None:
    """A follower dispatches no further than its master's confirm offset (what every in-sync
    member holds; 0: no bound), set before a chunk's data is written, so that the append's
    wakeup dispatches up to it. A bound moved by a chunk without data wakes the dispatcher
    itself: it polls only every ``dispatch.POLL_INTERVAL``, for what woke nobody."""
    dispatcher.limit = (lambda c=confirm: c) if confirm else None
    if confirm != prior and not carries_data:
        dispatcher.wakeup()


class Follower:
    def __init__(self, replica, master_address: str):
        self.replica = replica
        self.master_address = master_address
        self.connected = False
        self.master_end = 0
        self.caught_up_at = time.monotonic()
        self.last_contact = 0.0  # monotonic time of the last chunk (0: none yet)
        self.started_at = time.monotonic()
        self.master_fenced_since = 0.0  # monotonic time the master said it was fenced (0: it is not)
        self.in_sync = False  # in the master's in-sync set, as the master last said
        self.sync_state_set: list[str] = []
        self.master_epochs: list[Epoch] = []
        self._tasks: list[asyncio.Task] = []
        self._threads: set[asyncio.Future] = set()  # our work running in worker threads

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._run()), asyncio.ensure_future(self._metadata())]

    async def stop(self) -> None:
        """Stop following; returns once no work of ours is still running in a worker thread
        (a promotion must not find the log growing or cut back, or the metadata rewritten,
        under it)."""
        pending = [t for t in self._tasks if not t.done()]
        while pending:  # cancel again until done: a cancellation can be lost in a read finishing at that moment
            for t in pending:
                t.cancel()
            await asyncio.wait(pending, timeout=0.1)
            pending = [t for t in pending if not t.done()]
        for t in self._tasks:
            if not t.cancelled() and t.exception() is not None:
                log.debug("follower task ended with %r", t.exception())
        if self._threads:
            await asyncio.wait(list(self._threads))
        self.connected = False

    def contact_age(self) -> float:
        return time.monotonic() - self.last_contact if self.last_contact else -1.0

    # ------------------------------------------------------------------ the stream

    async def _run(self) -> None:
        attempt = 0
        while True:
            try:
                await self._follow()
                attempt = 0
            except asyncio.CancelledError:
                raise
            except grpc.aio.AioRpcError as e:
                log.info("replication stream from %s ended: %s %s", self.master_address, e.code().name, e.details())
                if e.code() == grpc.StatusCode.FAILED_PRECONDITION and NAME_TAKEN in (e.details() or ""):
                    log.error("%s refused this member: %s", self.master_address, e.details())
                    if self.replica.fatal is not None:  # (stopping the server cancels this task)
                        self.replica.fatal(f"{self.master_address} refused this member: {e.details()}")
                        return
                if e.code() == grpc.StatusCode.FAILED_PRECONDITION or attempt >= 2:  # not a master (any more), or gone
                    await self._seek_master()
            except MasterSilent as e:
                log.warning("%s", e)
                if attempt >= 2:
                    await self._seek_master()
            except AppendError as e:  # a full disk, say: the master's SYNC puts time out meanwhile
                log.warning("cannot write the copy of %s's log (%s: %s); retrying", self.master_address, e.status, e)
            except Exception:
                log.exception("following %s failed", self.master_address)
            self.connected = False
            await asyncio.sleep(RETRY_S[min(attempt, len(RETRY_S) - 1)])
            attempt += 1

    async def _seek_master(self) -> None:
        try:
            await self.replica.seek_master()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("looking for the master of %s failed", self.replica.group)

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread, which a cancellation (stop) lets finish: stop
        waits for it. Appends, cuts of the log and metadata alike: before, only appends were
        waited for, and a stop during a cut or a metadata copy returned with it still running."""
        fut = asyncio.get_running_loop().run_in_executor(None, fn, *args)
        self._threads.add(fut)
        fut.add_done_callback(self._done_in_thread)
        return await asyncio.shield(fut)

    def _done_in_thread(self, fut: asyncio.Future) -> None:
        self._threads.discard(fut)
        if not fut.cancelled():
            fut.exception()  # retrieved here: the caller that would have may be cancelled

    async def _write(self, offset: int, data: bytes) -> int:
        """Append in a worker thread: the kernel's copy of the chunk then runs beside the loop
        (on the loop it measured 0.81-1.01x the SYNC throughput side by side)."""
        return await self._in_thread(self.replica.store.append_replicated, offset, data)

    def _apply_state(self, chunk: hpb.MasterChunk) -> None:
        r = self.replica
        if chunk.mode:
            r.group_mode = chunk.mode
        self.sync_state_set = list(chunk.sync_state_set)
        self.in_sync = r.node in self.sync_state_set
        if not chunk.fenced:
            self.master_fenced_since = 0.0
        elif not self.master_fenced_since:
            self.master_fenced_since = time.monotonic()
        if chunk.members:
            r.members.replace({m.name: m.address for m in chunk.members})

    async def _follow(self) -> None:
        r = self.replica
        store = r.store
        timeout = store.config.haKeepaliveTimeout / 1000
        outbox: asyncio.Queue[hpb.FollowerReport | None] = asyncio.Queue()

        follow = r.channel(self.master_address).stream_stream(
            FOLLOW, request_serializer=hpb.FollowerReport.SerializeToString, response_deserializer=read_chunk
        )
        call = follow(latest_reports(outbox), metadata=r.call_metadata() or None)
        end = store.commitlog.max_offset
        outbox.put_nowait(
            hpb.FollowerReport(
                handshake=True, member=r.node, group=r.group, end_offset=end, epochs=epochs_pb(r.epochs.snapshot()), address=r.address
            )
        )
        first = True
        confirmed = -1  # the confirm offset the last chunk carried
        try:
            while True:
                try:
                    async with asyncio.timeout(timeout):
                        chunk = await call.read()
                except TimeoutError:
                    raise MasterSilent(
                        f"no word from master {self.master_address} for {timeout * 1000:.0f} ms (haKeepaliveTimeout): reconnecting"
                    ) from None
                if chunk is grpc.aio.EOF:
                    return
                self.last_contact = time.monotonic()
                if first:
                    first = False
                    self.master_epochs = [Epoch(e.epoch, e.start_offset) for e in chunk.epochs]
                    if chunk.truncate_to == 0 and chunk.start_offset > 0:
                        log.warning(
                            "the master keeps its log from %d only (this copy ends at %d): starting the copy over", chunk.start_offset, end
                        )
                        await self._in_thread(store.start_over)
                        r.epochs.truncate_suffix(0)
                    elif chunk.truncate_to >= 0:
                        log.warning("cutting the commit log back from %d to %d: the new master never had that tail", end, chunk.truncate_to)
                        await self._in_thread(store.truncate_to, chunk.truncate_to)
                        r.epochs.truncate_suffix(chunk.truncate_to)
                    end = store.commitlog.max_offset
                    if end != chunk.start_offset and not (end == 0 and chunk.start_offset % store.commitlog.segment_size == 0):
                        raise RuntimeError(f"the master starts us at {chunk.start_offset}, but our log ends at {end}")
                    self.connected = True
                    log.info("following %s from %d (master end %d)", self.master_address, chunk.start_offset, chunk.master_end)
                elif chunk.epochs:
                    self.master_epochs = [Epoch(e.epoch, e.start_offset) for e in chunk.epochs]
                if chunk.state:
                    self._apply_state(chunk)
                if self.master_epochs:
                    r.group_epoch = max(r.group_epoch, self.master_epochs[-1].epoch)
                bound_dispatch(store.dispatcher, chunk.confirm_offset, confirmed, bool(chunk.data))
                confirmed = chunk.confirm_offset
                if chunk.data:
                    end = await self._write(chunk.offset, chunk.data)
                self.master_end = max(chunk.master_end, end)
                if end >= chunk.master_end:
                    self.caught_up_at = time.monotonic()
                r.epochs.replace([e for e in self.master_epochs if e.start <= end])
                outbox.put_nowait(
                    hpb.FollowerReport(
                        member=r.node, group=r.group, end_offset=end, echo_sent_us=chunk.sent_us, echo_master_end=chunk.master_end
                    )
                )
        finally:
            outbox.put_nowait(None)  # the request stream ends on its own before the call is cancelled
            call.cancel()

    # ------------------------------------------------------------------ metadata

    async def _metadata(self) -> None:
        r = self.replica
        while True:
            await asyncio.sleep(METADATA_EVERY_S)
            try:
                stub = hpbg.ReplicationStub(r.channel(self.master_address))
                md = await stub.GetMetadata(hpb.GetMetadataRequest(), timeout=5, metadata=r.call_metadata() or None)
                snapshot = {
                    "topics": md.topics_json,
                    "offsets": md.consumer_offsets_json,
                    "groups": md.subscription_groups_json,
                    "users": md.users_json,
                }
                if not await self._holds(md.master_end):
                    # positions past checkpoints (pop) this copy has not received yet would, after a
                    # failover, skip messages nobody acknowledged: the next snapshot brings them
                    snapshot.pop("offsets")
                await self._in_thread(r.store.apply_metadata, snapshot, dict(md.deleted_topics))
                if md.broker_state:
                    await self._in_thread(copy_broker_files, r.store.layout.config_dir, dict(md.broker_state), r.store.commitlog.max_offset)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the master is away: keep what we have
                log.debug("metadata from %s: %s", self.master_address, e)

    async def _holds(self, end: int, wait_s: float = 0.5) -> bool:
        """This copy of the log reaches ``end`` (the master's when it took a snapshot), within ``wait_s``."""
        store = self.replica.store
        deadline = time.monotonic() + wait_s
        while store.commitlog.max_offset < end:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    # ------------------------------------------------------------------ figures

    def lag(self) -> tuple[int, float]:
        end = self.replica.store.commitlog.max_offset
        behind = max(0, self.master_end - end)
        return behind, (time.monotonic() - self.caught_up_at) if behind else 0.0


def copy_broker_files(config_dir: str, files: dict[str, str], log_end: int) -> bool:
    """The master's delay, timer and pop progress, so that a promotion resumes close to where
    it stood; only once this copy of the log holds everything that progress counts as done
    (False: not yet, the older copy stays), and only the files the layout names."""
    try:
        needed = int(files.get(BROKER_STATE_END, "0"))
    except ValueError:
        return False
    if log_end < needed:
        return False
    for name in FOLLOWED_BROKER_FILES:
        text = files.get(name)
        if not text:
            continue
        path = os.path.join(config_dir, name)
        try:
            with open(path, encoding="utf-8") as f:
                if f.read() == text:
                    continue
        except (OSError, ValueError):
            pass
        write_atomic(path, text.encode())
    return True
