"""The master's side of a follower's stream: the handshake (where the follower starts, after
cutting back what this master never had), then commit-log bytes as they are written."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from ..v1 import ha_pb2 as hpb
from .epochs import Epoch, consistent_offset

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
KEEPALIVE_S = 1.0  # an empty chunk this often tells an idle follower the master's end (its lag)


class Refused(Exception):
    """The stream cannot go on (wrong group, not a master, a follower from the future)."""


def plan_start(follower: list[Epoch], follower_end: int, master: list[Epoch], master_end: int, master_min: int) -> tuple[int, int]:
    """(truncate_to, start): -1 when nothing is cut; a follower that shares no history with
    this master, or is behind what this master still keeps, starts over from master_min."""
    if follower_end == 0 and not follower:
        return -1, master_min
    agreed = consistent_offset(follower, follower_end, master, master_end)
    if agreed < 0 or agreed < master_min:
        return 0, master_min
    if agreed < follower_end:
        return agreed, agreed
    return -1, follower_end


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1  # int64 on the wire: negatives as ten bytes, as protobuf does
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def data_chunk(offset: int, data: bytes, master_end: int) -> bytes:
    """A serialized MasterChunk{offset, data, master_end}: what ``hpb.MasterChunk(...)
    .SerializeToString()`` gives, without copying ``data`` into a message and out again."""
    parts = [b"\x08", _varint(offset)] if offset else []
    if data:
        parts += [b"\x12", _varint(len(data)), data]
    if master_end:
        parts += [b"\x18", _varint(master_end)]
    return b"".join(parts)


def epochs_pb(entries: list[Epoch]) -> list[hpb.EpochEntry]:
    return [hpb.EpochEntry(epoch=e.epoch, start_offset=e.start) for e in entries]


async def serve_follower(replica, reports: AsyncIterator[hpb.FollowerReport], write: Callable[[hpb.MasterChunk], Awaitable[None]]) -> None:
    """Run one follower's stream until it goes away or this member stops being master."""
    first = await reports.__anext__()
    if not first.handshake:
        raise Refused("the first report must be the handshake")
    if not replica.is_master:
        raise Refused(f"{replica.node} is not a master (it follows {replica.master_address or 'nobody'})")
    if first.group != replica.group:
        raise Refused(f"{first.member} belongs to group {first.group!r}, this master to {replica.group!r}")
    store = replica.store
    cl = store.commitlog
    theirs = [Epoch(e.epoch, e.start_offset) for e in first.epochs]
    ours = replica.epochs.snapshot()
    if theirs and ours and theirs[-1].epoch > ours[-1].epoch:
        raise Refused(f"{first.member} has epoch {theirs[-1].epoch}, newer than this master's {ours[-1].epoch}: this master is stale")
    end = cl.max_offset
    if theirs and ours and theirs[-1].epoch == ours[-1].epoch and first.end_offset > end:
        # a follower cannot be ahead of its master within the master's own term: this master
        # lost what it wrote (a replaced volume); following it would make the follower cut
        # acknowledged messages
        raise Refused(
            f"{first.member} holds epoch {ours[-1].epoch} up to offset {first.end_offset}, beyond this master's end {end}: "
            "this master lost data; promote that follower instead"
        )
    truncate, start = plan_start(theirs, first.end_offset, ours, end, max(0, cl.min_offset))
    if truncate >= 0:
        log.warning("follower %s must cut its log back from %d to %d (histories part there)", first.member, first.end_offset, truncate)
    link = replica.tracker.connect(first.member, start if truncate >= 0 else first.end_offset)
    log.info("follower %s connected: sending from %d (master end %d)", first.member, start, end)
    await write(hpb.MasterChunk(epochs=epochs_pb(ours), truncate_to=truncate, start_offset=start, master_end=end, offset=start))

    async def read_reports() -> None:
        async for r in reports:
            replica.tracker.report(link, r.end_offset)

    reader = asyncio.ensure_future(read_reports())
    pos, sent_epochs, quiet_since = start, ours, time.monotonic()
    try:
        while not reader.done() and replica.is_master:
            end = cl.max_offset
            epochs = replica.epochs.snapshot()
            if pos < end:
                data = cl.read_raw(pos, CHUNK_BYTES)  # from the mapped segments just written: memory, no I/O to wait for
                if data is None:
                    raise Refused(f"offset {pos} is no longer stored here (deleted by retention): the follower must start over")
                if not data:
                    await replica.signal.wait(0.01)
                    continue
                if epochs != sent_epochs:
                    chunk = hpb.MasterChunk(offset=pos, data=data, master_end=end)
                    chunk.epochs.extend(epochs_pb(epochs))
                    sent_epochs = epochs
                    await write(chunk)
                else:  # the common case, encoded by hand: one copy of the bytes instead of three
                    await write(data_chunk(pos, data, end))
                pos += len(data)
                quiet_since = time.monotonic()
                continue
            if time.monotonic() - quiet_since >= KEEPALIVE_S or epochs != sent_epochs:
                chunk = hpb.MasterChunk(offset=pos, master_end=end)
                if epochs != sent_epochs:
                    chunk.epochs.extend(epochs_pb(epochs))
                    sent_epochs = epochs
                await write(chunk)
                quiet_since = time.monotonic()
            await asyncio.wait({reader, asyncio.ensure_future(replica.signal.wait(KEEPALIVE_S))}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        reader.cancel()
        replica.tracker.disconnect(link)
        log.info("follower %s disconnected at %d", first.member, pos)
