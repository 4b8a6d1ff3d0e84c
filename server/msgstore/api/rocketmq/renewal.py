"""Keeping a push consumer's deliveries invisible while it works on them.

A RocketMQ 5 push consumer receives with ``auto_renew`` and names no invisible time: the
server keeps each delivery invisible until the consumer acknowledges it, gives it up
(changes its invisible time: a nack) or forwards it to the DLQ, however long its listener and
its own local retries take (a FIFO consumer retries a failed message locally, waiting the
group's backoff between attempts). RocketMQ's proxy does this by renewing the receipt before it
lapses and answering later calls made with the first receipt through the newest one; so does
this. Renewal stops when the client says it terminates, when it has not been heard from (a
heartbeat, a receive) for ``CLIENT_SILENT_MS``, or after ``MAX_RENEW_MS``: the delivery then
lapses and comes back as a new one (at-least-once). Held in memory: after a restart or a
failover the first receipts are expired, and their messages come back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...v1 import msgstore_pb2 as pb
from .context import HereContext
from .protocol import definition as d
from .status import Refusal

if TYPE_CHECKING:
    from .context import Service

log = logging.getLogger(__name__)

MAX_RENEW_MS = 3 * 3_600_000
CLIENT_SILENT_MS = 120_000  # the official clients heartbeat every 10 s
TICK_S = 1.0  # at most; a quarter of pushInvisibleTime when that is shorter
RENEW_AT_ONCE = 64


@dataclass
class Held:
    group: str
    topic: str
    client: str
    current: str  # the newest receipt of this delivery
    until_ms: int  # invisible until
    since_ms: int  # first received
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # a renewal and the client's own call never cross


class Renewals:
    def __init__(self, service: Service):
        self.service = service
        self.held: dict[str, Held] = {}  # by the first receipt (the one the client holds)
        self.heard: dict[str, float] = {}  # client id -> monotonic time last heard
        self._task: asyncio.Task | None = None

    def invisible_ms(self) -> int:
        """What a push consumer's delivery gets at a time (``pushInvisibleTime``)."""
        return int(self.service.store.config.pushInvisibleTime)

    # ------------------------------------------------------------------ bookkeeping

    def hold(self, client: str, group: str, topic: str, receipt: str, until_ms: int, now_ms: int) -> None:
        self.held[receipt] = Held(group, topic, client, receipt, until_ms, now_ms)
        self.hear(client)
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    def hear(self, client: str) -> None:
        if client:
            self.heard[client] = time.monotonic()

    def current(self, receipt: str) -> str:
        held = self.held.get(receipt)
        return held.current if held is not None else receipt

    @asynccontextmanager
    async def using(self, receipts: Sequence[str]) -> AsyncIterator[list[str]]:
        """The newest receipt of each delivery, held still (no renewal) while the block runs."""
        async with AsyncExitStack() as stack:
            unique = {r: self.held[r] for r in receipts if r in self.held}
            for r in sorted(unique):
                await stack.enter_async_context(unique[r].lock)
            yield [self.held[r].current if r in self.held else r for r in receipts]

    def release(self, receipt: str) -> None:
        self.held.pop(receipt, None)

    def forget_client(self, client: str) -> None:
        for first in [r for r, h in self.held.items() if h.client == client]:
            del self.held[first]
        self.heard.pop(client, None)

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        server = self.service.server
        while self.held and not server.stopping:
            invisible = self.invisible_ms()
            await asyncio.sleep(min(TICK_S, invisible / 4000))
            now = server.store.clock.now_ms()
            silent_before = time.monotonic() - CLIENT_SILENT_MS / 1000
            due = []
            for first, h in list(self.held.items()):
                if h.until_ms - now > invisible / 2:  # renewed in its second half
                    continue
                if now > h.until_ms + invisible or self.heard.get(h.client, 0.0) < silent_before or now - h.since_ms > MAX_RENEW_MS:
                    self.held.pop(first, None)  # left to lapse (or lapsed): it comes back
                    continue
                if not h.lock.locked():  # (the client's own call on it is running: next tick)
                    due.append((first, h))
            slots = asyncio.Semaphore(RENEW_AT_ONCE)  # (under SYNC_FLUSH, renewals share group commits)
            await asyncio.gather(*(self._renew_in(slots, f, h) for f, h in due))
            for client in [c for c, t in self.heard.items() if t < silent_before]:
                del self.heard[client]

    async def _renew_in(self, slots: asyncio.Semaphore, first: str, h: Held) -> None:
        async with slots:
            await self._renew(first, h)

    async def _renew(self, first: str, h: Held) -> None:

        async with h.lock:
            if self.held.get(first) is not h:  # acknowledged meanwhile
                return
            try:
                got = await self.service.data.ChangeInvisible(
                    pb.ChangeInvisibleRequest(group=h.group, topic=h.topic, receipt_handle=h.current, invisible_ms=self.invisible_ms()),
                    HereContext(),
                )
            except Refusal as e:
                if e.code == d.INVALID_RECEIPT_HANDLE:  # over: acknowledged, given up, or it lapsed
                    self.held.pop(first, None)
                else:  # this node cannot write now (fenced a moment, taking office): tried again next tick
                    log.debug("delivery %s not renewed now: %s", first[:16], e.message)
                return
            except Exception:
                log.exception("renewing a delivery of group %s failed; tried again", h.group)
                return
            h.current, h.until_ms = got.receipt_handle, got.invisible_until_ms

    async def give_back(self, group: str, topic: str, receipts: Sequence[str]) -> None:
        """Deliveries the client never got (its stream broke before they were written): visible
        again now instead of when their time is up (RocketMQ's proxy does the same)."""

        for r in receipts:
            self.held.pop(r, None)
            try:
                await self.service.data.ChangeInvisible(
                    pb.ChangeInvisibleRequest(group=group, topic=topic, receipt_handle=r, invisible_ms=1),
                    HereContext(),  # (0: a nack)
                )
            except Exception as e:  # (it comes back when its time is up)
                log.debug("delivery %s not given back: %s", r[:16], e)
