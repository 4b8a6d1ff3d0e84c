"""Who is using the console: a session per browser, holding a store client signed as its user.

Nothing is open anonymously unless the store itself is: a browser without a session gets an
anonymous one only when the store answers an unsigned call (it checks no callers); otherwise it
is sent to sign in, and signing in is a call to the store with the user's keys (a wrong secret
is refused there, not here). The console keeps no secret on disk; a session ends when its
browser signs out or after IDLE_S without a request.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..client import Client, StoreError
from . import views
from .history import History

log = logging.getLogger(__name__)

COOKIE = "msgstore_console"
IDLE_S = 30 * 60
SAMPLE_IDLE_S = 5 * 60  # a session's plots stop sampling this long after its last request


@dataclass
class Session:
    id: str
    client: Client
    user: str | None  # None: anonymous (the store checks no callers)
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    history: History = field(default_factory=History)
    last_seen: float = field(default_factory=time.monotonic)
    flash: list[tuple[str, str]] = field(default_factory=list)  # (kind, text) shown once by the next page
    sampler: asyncio.Task | None = None

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.cancel()
        self.client.close()


class Sessions:
    def __init__(self, make_client: Callable[..., Client], sample_interval: float = 5.0, admin: bool = False):
        self.make_client = make_client
        self.sample_interval = sample_interval
        # the admin token's client, for the cluster page's status and role calls only (read-only)
        self.admin_client: Client | None = make_client(None, None, admin=True) if admin else None
        self.by_id: dict[str, Session] = {}
        self._open_store: tuple[float, bool] | None = None

    def get(self, sid: str | None) -> Session | None:
        s = self.by_id.get(sid or "")
        if s is None:
            return None
        if time.monotonic() - s.last_seen > IDLE_S:
            self.end(s)
            return None
        s.last_seen = time.monotonic()
        return s

    async def store_is_open(self) -> bool:
        """Whether the store answers unsigned calls (checked at most every 30 s)."""
        now = time.monotonic()
        if self._open_store is not None and now - self._open_store[0] < 30:
            return self._open_store[1]
        c = self.make_client(None, None)
        try:  # (the nodes, which any signed-in caller may learn: ListTopics answers an unsigned caller with nothing)
            await asyncio.to_thread(c.nodes)
            is_open = True
        except StoreError as e:
            is_open = e.code.name not in ("UNAUTHENTICATED", "PERMISSION_DENIED")
        finally:
            c.close()
        self._open_store = (now, is_open)
        return is_open

    async def sign_in(self, access_key: str | None, secret_key: str | None) -> Session:
        """A session for the user, once the store accepted a call signed with their keys;
        StoreError (UNAUTHENTICATED, ...) otherwise."""
        c = self.make_client(access_key, secret_key)
        try:
            await asyncio.to_thread(c.nodes)
        except BaseException:
            c.close()
            raise
        s = Session(secrets.token_urlsafe(32), c, access_key)
        self.by_id[s.id] = s
        s.sampler = asyncio.ensure_future(self._sample(s))
        log.info("console session for %s", access_key or "(anonymous)")
        return s

    def end(self, s: Session) -> None:
        self.by_id.pop(s.id, None)
        s.close()

    def close_all(self) -> None:
        for s in list(self.by_id.values()):
            self.end(s)
        if self.admin_client is not None:
            self.admin_client.close()

    async def _sample(self, s: Session) -> None:
        """Figures the session's pages plot, taken with its own client: what it may read."""
        while s.id in self.by_id:
            if time.monotonic() - s.last_seen < SAMPLE_IDLE_S and s.history.watched:
                try:
                    await asyncio.to_thread(sample, s)
                except Exception as e:  # a node down, a refusal: the plot has a gap, the session goes on
                    log.debug("sampling for %s: %s", s.user, e)
            await asyncio.sleep(self.sample_interval)


def sample(s: Session) -> None:
    at = time.time()
    for kind, name in sorted(s.history.watched):
        value: Any
        if kind == "group":
            value = views.lag_of(s.client, name)
            s.history.add(f"lag:{name}", value, at)
        elif kind == "topic":
            _held, stored = views.held(s.client, name)
            s.history.add(f"stored:{name}", stored, at)
