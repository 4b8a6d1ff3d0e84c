"""The master's side of a follower's stream: the handshake (where the follower starts, after
cutting back what this master never had), then commit-log bytes as they are written."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from ..v1 import ha_pb2 as hpb
from .chunk import data_chunk
from .epochs import Epoch, consistent_offset

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
KEEPALIVE_S = 1.0  # an empty chunk this often tells an idle follower the master's end (its lag)
CONFIRM_DELAY_S = 0.005  # a confirm offset that moved reaches idle followers this soon


# ends a refusal of a second live process with a member's name: that process stops (left
# retrying, it would get in first whenever the real member's stream broke)
NAME_TAKEN = "every member of a group needs a --node-name of its own"


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


def now_us() -> int:
    """The master's monotonic clock in microseconds (chunks carry it; reports echo it)."""
    return int(time.monotonic() * 1e6)


def epochs_pb(entries: list[Epoch]) -> list[hpb.EpochEntry]:
    return [hpb.EpochEntry(epoch=e.epoch, start_offset=e.start) for e in entries]


def with_state(chunk: hpb.MasterChunk, replica) -> hpb.MasterChunk:
    """What followers are told besides bytes: mode, in-sync set, members (§14.2)."""
    chunk.state = True
    chunk.mode = replica.mode
    chunk.fenced = replica.gate.deposed
    chunk.sync_state_set.extend([replica.node, *replica.tracker.sync_state_set()])
    chunk.members.extend(hpb.ReplicaMember(name=n, address=a) for n, a in sorted(replica.members.snapshot().items()))
    return chunk


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
        why = f"{first.member} has epoch {theirs[-1].epoch}, newer than this master's {ours[-1].epoch}: this master is stale"
        replica.depose(why, theirs[-1].epoch)
        raise Refused(why)
    end = cl.max_offset
    if theirs and ours and theirs[-1].epoch == ours[-1].epoch and first.end_offset > end:
        # a follower cannot be ahead of its master within the master's own term: this master
        # lost what it wrote (a replaced volume); following it would make the follower cut
        # acknowledged messages
        raise Refused(
            f"{first.member} holds epoch {ours[-1].epoch} up to offset {first.end_offset}, beyond this master's end {end}: "
            "this master lost data; promote that follower instead"
        )
    other = replica.tracker.namesake(first.member, first.address)
    if other is not None:
        # two processes with one name: the master would count either's confirmations as the
        # member's, and the set would name a member whose log may lack what was acknowledged
        raise Refused(
            f"another process is connected as {first.member}, from {other.address} (this one is {first.address or 'unnamed'}): {NAME_TAKEN}"
        )
    truncate, start = plan_start(theirs, first.end_offset, ours, end, max(0, cl.min_offset))
    if truncate >= 0:
        log.warning("follower %s must cut its log back from %d to %d (histories part there)", first.member, first.end_offset, truncate)
    replica.note_member(first.member, first.address)
    link = replica.tracker.connect(first.member, first.address, start if truncate >= 0 else first.end_offset)
    log.info("follower %s connected: sending from %d (master end %d)", first.member, start, end)
    hello = hpb.MasterChunk(
        epochs=epochs_pb(ours), truncate_to=truncate, start_offset=start, master_end=end, offset=start, sent_us=now_us()
    )
    sent_state = replica.state_version
    await write(with_state(hello, replica))

    async def read_reports() -> None:
        async for r in reports:
            replica.tracker.report(link, r.end_offset, r.echo_sent_us, r.echo_master_end)

    reader = asyncio.ensure_future(read_reports())
    pos, sent_epochs, quiet_since, sent_confirm = start, ours, time.monotonic(), hello.confirm_offset
    try:
        while not reader.done() and replica.is_master:
            if replica.tracker.silent(link):
                silent_ms = replica.tracker.keepalive_s * 1000
                raise Refused(f"follower {first.member} sent no report for {silent_ms:.0f} ms (haKeepaliveTimeout)")
            seen = replica.signal.seq  # before looking: what is appended after this ends the wait below
            end = cl.max_offset
            epochs = replica.epochs.snapshot()
            state = replica.state_version
            confirm = replica.confirm_offset()
            if pos < end:
                changed = epochs != sent_epochs or state != sent_state
                with cl.raw(pos, CHUNK_BYTES) as view:  # the mapped segments just written: memory, no I/O to wait for
                    if view is None:
                        raise Refused(f"offset {pos} is no longer stored here (deleted by retention): the follower must start over")
                    size = len(view)
                    if not size:
                        payload: hpb.MasterChunk | bytes = b""
                    elif changed:
                        payload = hpb.MasterChunk(offset=pos, data=bytes(view), master_end=end, sent_us=now_us(), confirm_offset=confirm)
                        payload.epochs.extend(epochs_pb(epochs))
                        with_state(payload, replica)
                    else:  # the common case, encoded by hand straight from the log: one copy of the bytes
                        payload = data_chunk(pos, view, end, now_us(), confirm)
                if not size:
                    await replica.signal.wait(0.01, seen)
                    continue
                if changed:
                    sent_epochs, sent_state = epochs, state
                await write(payload)
                pos += size
                sent_confirm = confirm
                quiet_since = time.monotonic()
                continue
            quiet = time.monotonic() - quiet_since
            # a new confirm offset alone waits a moment: under load the next data chunk carries it
            due = min(KEEPALIVE_S, CONFIRM_DELAY_S if confirm != sent_confirm else KEEPALIVE_S) - quiet
            if due <= 0 or epochs != sent_epochs or state != sent_state:
                chunk = hpb.MasterChunk(offset=pos, master_end=end, sent_us=now_us(), confirm_offset=confirm)
                sent_confirm = confirm
                if epochs != sent_epochs or state != sent_state:
                    chunk.epochs.extend(epochs_pb(epochs))
                    sent_epochs, sent_state = epochs, state
                    with_state(chunk, replica)
                await write(chunk)
                quiet_since, due = time.monotonic(), KEEPALIVE_S
            await replica.signal.wait(max(due, 0.001), seen, until=reader)
    finally:
        reader.cancel()
        replica.tracker.disconnect(link)
        log.info("follower %s disconnected at %d", first.member, pos)
