"""The follower's side: connect to the master, cut back what the master never had, then write
the master's bytes at the master's offsets and report how far it got; and copy the master's
metadata (topics, consumer offsets, groups) on a short period. Reconnects until told to stop."""

from __future__ import annotations

import asyncio
import logging
import time

import grpc

from ..store.commitlog import AppendError
from ..v1 import ha_pb2 as hpb
from ..v1 import ha_pb2_grpc as hpbg
from .epochs import Epoch
from .master import epochs_pb

log = logging.getLogger(__name__)

METADATA_EVERY_S = 1.0
RETRY_S = (0.1, 0.2, 0.5, 1.0)


class Follower:
    def __init__(self, replica, master_address: str):
        self.replica = replica
        self.master_address = master_address
        self.connected = False
        self.master_end = 0
        self.caught_up_at = time.monotonic()
        self.master_epochs: list[Epoch] = []
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._run()), asyncio.ensure_future(self._metadata())]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        self.connected = False

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
            except AppendError as e:  # a full disk, say: the master's SYNC puts time out meanwhile
                log.warning("cannot write the copy of %s's log (%s: %s); retrying", self.master_address, e.status, e)
            except Exception:
                log.exception("following %s failed", self.master_address)
            self.connected = False
            await asyncio.sleep(RETRY_S[min(attempt, len(RETRY_S) - 1)])
            attempt += 1

    async def _follow(self) -> None:
        r = self.replica
        store, loop = r.store, asyncio.get_running_loop()
        outbox: asyncio.Queue[hpb.FollowerReport] = asyncio.Queue()

        async def reports():
            while True:
                yield await outbox.get()

        stub = hpbg.ReplicationStub(r.channel(self.master_address))
        call = stub.Follow(reports(), metadata=r.call_metadata() or None)
        end = store.commitlog.max_offset
        outbox.put_nowait(
            hpb.FollowerReport(handshake=True, member=r.node, group=r.group, end_offset=end, epochs=epochs_pb(r.epochs.snapshot()))
        )
        first = True
        async for chunk in call:
            if first:
                first = False
                self.master_epochs = [Epoch(e.epoch, e.start_offset) for e in chunk.epochs]
                if chunk.truncate_to == 0 and chunk.start_offset > 0:
                    log.warning(
                        "the master keeps its log from %d only (this copy ends at %d): starting the copy over", chunk.start_offset, end
                    )
                    await loop.run_in_executor(None, store.start_over)
                    r.epochs.truncate_suffix(0)
                elif chunk.truncate_to >= 0:
                    log.warning("cutting the commit log back from %d to %d: the new master never had that tail", end, chunk.truncate_to)
                    await loop.run_in_executor(None, store.truncate_to, chunk.truncate_to)
                    r.epochs.truncate_suffix(chunk.truncate_to)
                end = store.commitlog.max_offset
                if end != chunk.start_offset and not (end == 0 and chunk.start_offset % store.commitlog.segment_size == 0):
                    raise RuntimeError(f"the master starts us at {chunk.start_offset}, but our log ends at {end}")
                self.connected = True
                log.info("following %s from %d (master end %d)", self.master_address, chunk.start_offset, chunk.master_end)
            elif chunk.epochs:
                self.master_epochs = [Epoch(e.epoch, e.start_offset) for e in chunk.epochs]
            if chunk.data:
                end = await loop.run_in_executor(None, store.append_replicated, chunk.offset, chunk.data)
            self.master_end = max(chunk.master_end, end)
            if end >= chunk.master_end:
                self.caught_up_at = time.monotonic()
            r.epochs.replace([e for e in self.master_epochs if e.start <= end])
            outbox.put_nowait(hpb.FollowerReport(member=r.node, group=r.group, end_offset=end))

    # ------------------------------------------------------------------ metadata

    async def _metadata(self) -> None:
        r = self.replica
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(METADATA_EVERY_S)
            try:
                stub = hpbg.ReplicationStub(r.channel(self.master_address))
                md = await stub.GetMetadata(hpb.GetMetadataRequest(), timeout=5, metadata=r.call_metadata() or None)
                snapshot = {"topics": md.topics_json, "offsets": md.consumer_offsets_json, "groups": md.subscription_groups_json}
                await loop.run_in_executor(None, r.store.apply_metadata, snapshot)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the master is away: keep what we have
                log.debug("metadata from %s: %s", self.master_address, e)

    # ------------------------------------------------------------------ figures

    def lag(self) -> tuple[int, float]:
        end = self.replica.store.commitlog.max_offset
        behind = max(0, self.master_end - end)
        return behind, (time.monotonic() - self.caught_up_at) if behind else 0.0
