"""Who is using the console: a session per browser, holding a store client signed as its user.

Nothing is open anonymously unless the store itself is: a browser without a session gets an
anonymous one only when the store answered an unsigned call (it checks no callers); otherwise it
is sent to sign in, and signing in is a call to the store with the user's keys (a wrong secret
is refused there, not here). The console keeps no secret on disk; a session ends when its
browser signs out or after IDLE_S without a request.

Anonymous sessions share one client (a browser or probe that keeps no cookie makes a session
per request: it must cost a few objects, not connections), are counted apart from signed-in
ones, and never push a signed-in session out.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from ..client import Client, StoreError
from . import views
from .history import History

log = logging.getLogger(__name__)

COOKIE = "msgstore_console"
IDLE_S = 30 * 60
SAMPLE_IDLE_S = 5 * 60  # a session's plots stop sampling this long after its last request
MAX_SESSIONS = 200  # signed in
PER_USER = 10  # sessions of one access key: one user signing in again and again pushes out only their own
MAX_ANONYMOUS = 1000
MAX_SAMPLERS = 50  # sessions whose plots are sampled at once
WATCHED = 8  # plots a session keeps sampling: the pages it looked at last
OPEN_CHECK_S = 30
SERIES = {"group": "lag", "topic": "stored"}  # what a watched page plots, by the page's kind


@dataclass
class Session:
    id: str
    client: Client
    user: str | None  # None: anonymous (the store checks no callers)
    cluster_reader: bool = False  # may read the cluster's status (the store's `cluster get`): the admin-token views
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    history: History = field(default_factory=History)
    last_seen: float = field(default_factory=time.monotonic)
    flash: list[tuple[str, str]] = field(default_factory=list)  # (kind, text) shown once by the next page
    sampler: asyncio.Task | None = None
    fresh: bool = True  # made by the request being served (a browser that has not come back yet)
    watched: OrderedDict[tuple[str, str], None] = field(default_factory=OrderedDict)

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.cancel()
        if self.user is not None:  # (the anonymous client is shared)
            self.client.close()


class Sessions:
    def __init__(self, make_client: Callable[..., Client], sample_interval: float = 5.0, admin: bool = False):
        self.make_client = make_client
        self.sample_interval = sample_interval
        # the admin token's client, for the cluster page's status and role calls only (read-only),
        # shown to sessions whose own user may read the cluster
        self.admin_client: Client | None = make_client(None, None, admin=True) if admin else None
        self.by_id: dict[str, Session] = {}
        self._anonymous_client: Client | None = None
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
        """Whether the store answers unsigned calls. Only a definite answer is kept (for
        OPEN_CHECK_S); a store that cannot be asked now is not taken for open."""
        now = time.monotonic()
        if self._open_store is not None and now - self._open_store[0] < OPEN_CHECK_S:
            return self._open_store[1]
        c = self._anonymous()
        try:  # (the nodes, which any signed-in caller may learn: ListTopics answers an unsigned caller with nothing)
            await asyncio.to_thread(c.nodes)
            is_open = True
        except StoreError as e:
            if e.code.name not in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
                return False
            is_open = False
        self._open_store = (now, is_open)
        return is_open

    def _anonymous(self) -> Client:
        if self._anonymous_client is None:
            self._anonymous_client = self.make_client(None, None)
        return self._anonymous_client

    def anonymous(self) -> Session:
        """A session for a browser on a store that checks no callers (see store_is_open)."""
        anonymous = [s for s in self.by_id.values() if s.user is None]
        if len(anonymous) >= MAX_ANONYMOUS:
            self.end(min(anonymous, key=lambda x: x.last_seen))
        s = Session(secrets.token_urlsafe(32), self._anonymous(), None)
        self.by_id[s.id] = s
        return s

    async def sign_in(self, access_key: str, secret_key: str) -> Session:
        """A session for the user, once the store accepted a call signed with their keys;
        StoreError (UNAUTHENTICATED, ...) otherwise."""
        c = self.make_client(access_key, secret_key)
        try:
            await asyncio.to_thread(c.nodes)
            reader = await asyncio.to_thread(_reads_cluster, c)
        except BaseException:
            c.close()
            raise
        own = [s for s in self.by_id.values() if s.user == access_key]
        signed = [s for s in self.by_id.values() if s.user is not None]
        if len(own) >= PER_USER:
            self.end(min(own, key=lambda x: x.last_seen))
        elif len(signed) >= MAX_SESSIONS:  # the longest idle goes first
            self.end(min(signed, key=lambda x: x.last_seen))
        s = Session(secrets.token_urlsafe(32), c, access_key, cluster_reader=reader)
        self.by_id[s.id] = s
        log.info("console session for %s", access_key)
        return s

    def watch(self, s: Session, kind: str, name: str, fresh: bool = False) -> None:
        """Plot ``name`` for this session from now on (its last WATCHED pages only). The sampler
        starts with the first plot, except for a session made by this very request (a browser
        that keeps no cookie would start one per request) and beyond MAX_SAMPLERS."""
        s.watched.pop((kind, name), None)
        s.watched[(kind, name)] = None
        while len(s.watched) > WATCHED:
            s.history.series.pop(series_name(*s.watched.popitem(last=False)[0]), None)
        if s.sampler is None and not fresh and sum(1 for x in self.by_id.values() if x.sampler is not None) < MAX_SAMPLERS:
            s.sampler = asyncio.ensure_future(self._sample(s))

    async def reap(self, every: float = 60.0) -> None:
        """End sessions idle for IDLE_S (their clients' connections go with them), whether or
        not a plot's sampler would have noticed."""
        while True:
            await asyncio.sleep(every)
            now = time.monotonic()
            for s in [s for s in self.by_id.values() if now - s.last_seen > IDLE_S]:
                self.end(s)

    def end(self, s: Session) -> None:
        self.by_id.pop(s.id, None)
        s.close()

    def close_all(self) -> None:
        for s in list(self.by_id.values()):
            self.end(s)
        for c in (self.admin_client, self._anonymous_client):
            if c is not None:
                c.close()

    async def _sample(self, s: Session) -> None:
        """Figures the session's pages plot, taken with its own client: what it may read. It
        also ends the session once idle: a browser that never comes back must not keep a
        client and its connections for ever."""
        while s.id in self.by_id:
            idle = time.monotonic() - s.last_seen
            if idle > SAMPLE_IDLE_S:  # nobody looks: the next plot a page asks for starts it again
                s.sampler = None
                return
            if s.watched:
                await asyncio.to_thread(sample, s)
            await asyncio.sleep(self.sample_interval)


def _reads_cluster(c: Client) -> bool:
    """Whether the user may read the cluster (every group, the store's `cluster get`). Anything
    but a yes from every node is a no: a node that does not answer must not keep people from
    signing in during the very incident they come to look at (they sign in again to retry)."""
    skipped: list[str] = []  # (nodes down are skipped, not waited for, and then the answer is no)
    try:
        c.describe_groups(skipped=skipped)
        return not skipped
    except StoreError:
        return False


def series_name(kind: str, name: str) -> str:
    """The history key of a watched page's plot (``lag:GROUP``, ``stored:TOPIC``): the sampler
    writes it, the pages name it, and a page no longer watched drops it."""
    return f"{SERIES[kind]}:{name}"


def sample(s: Session) -> None:
    at = time.time()
    for kind, name in list(s.watched):
        try:
            if kind == "group":
                s.history.add(series_name(kind, name), views.lag_of(s.client, name), at)
            elif kind == "topic":
                _held, stored = views.held(s.client, name)
                s.history.add(series_name(kind, name), stored, at)
        except Exception as e:  # a node down, a refusal, a name that is no topic: a gap in that plot only
            log.debug("sampling %s %s for %s: %s", kind, name, s.user, e)
