"""Who is calling: a user (signed with its access key and secret key), the holder of a token
(the old single data token, or the admin token a node vouches with: every permission), or
anyone at all on a store that does not check (no data token, authorizationEnabled off).

The same check serves msgstore.v1 and apache.rocketmq.v2 calls, direct or forwarded: a node
that passes a call on passes the caller's signature with it, so the node that serves the call
checks the caller itself. The caller's address travels as ``x-msgstore-origin`` with a proof
made with the cluster's secret (the admin token, else the data token); without a valid proof
the address of the connection is the one entries' source ranges are matched against."""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..broker.system_topics import DLQ_PREFIX, RETRY_PREFIX
from . import signature
from .policy import PolicyError, User, parse_user

ORIGIN = "x-msgstore-origin"
ORIGIN_PROOF = "x-msgstore-origin-proof"
ORIGIN_TIME = "x-msgstore-origin-time"
ORIGIN_WINDOW_S = 300  # how far the vouching node's clock and this one's may differ
HELP = (
    "sign calls with an access key and secret key (--access-key/--secret-file, MSGSTORE_ACCESS_KEY/MSGSTORE_SECRET_KEY, Credentials(...)), "
    "or present the store's token (--token-file or MSGSTORE_TOKEN; admin commands: --admin-token-file or MSGSTORE_ADMIN_TOKEN)"
)


class NotReady(Exception):
    """The users are not loaded yet (the store is recovering): ask again (UNAVAILABLE)."""


class Denied(Exception):
    """``unauthenticated``: who is calling could not be established (else: not allowed)."""

    def __init__(self, unauthenticated: bool, message: str):
        super().__init__(message)
        self.unauthenticated = unauthenticated
        self.message = message


def group_topic_owners(topic: str) -> list[tuple[str, str | None]]:
    """(group, topic or None) a consumer group's own topic may belong to: ``%DLQ%G`` is G's,
    ``%RETRY%G`` (RocketMQ 4), ``%RETRY%G_T`` and ``%RETRY%G+T`` (pop retries) are G's for T.
    A group name may itself hold ``_``: every split is a candidate. Empty for other topics."""
    if topic.startswith(DLQ_PREFIX):
        return [(topic[len(DLQ_PREFIX) :], None)]
    if not topic.startswith(RETRY_PREFIX):
        return []
    rest = topic[len(RETRY_PREFIX) :]
    return [(rest, None)] + [(rest[:i], rest[i + 1 :]) for i, ch in enumerate(rest) if ch in "_+" and 0 < i < len(rest) - 1]


@dataclass(frozen=True)
class Identity:
    name: str  # the access key; "token" for a token holder, "" on a store that does not check
    user: User | None  # None: may do everything
    source: str | None = None  # the caller's address
    signed: signature.Signed | None = None  # how it signed in (checked again on a long stream)

    def require(self, kind: str, name: str, action: str) -> None:
        """Raise :class:`Denied` naming the user, the resource and the action (``any``: pub
        or sub, RocketMQ's Any, which a route needs). A group's retry and dead-letter topics
        are its group's (RocketMQ's ACL 2.0 checks the group for them): ``sub`` on the group
        (and on the topic a retry topic names)."""
        if self.user is None:
            return
        owners = group_topic_owners(name) if kind == "topic" else []
        if owners:
            if any(self._decide("group", g, "sub") and (t is None or self._decide("topic", t, "sub")) for g, t in owners):
                return
            raise Denied(False, f"user {self.name} may not {action} {name}: it is group {owners[-1][0]}'s, and needs sub on that group")
        allowed, why = self.user.decide(kind, name, "pub" if action == "any" else action, self.source)
        if not allowed and action == "any":
            allowed = self.user.decide(kind, name, "sub", self.source)[0]
        if not allowed:
            what = kind if kind == "cluster" else f"{kind}:{name}"
            raise Denied(False, f"user {self.name} may not {'pub or sub' if action == 'any' else action} {what}: {why}")

    def _decide(self, kind: str, name: str, action: str) -> bool:
        return self.user is None or self.user.decide(kind, name, action, self.source)[0]

    def may(self, kind: str, name: str, action: str) -> bool:
        try:
            self.require(kind, name, action)
        except Denied:
            return False
        return True

    def uses(self, kind: str, name: str) -> bool:
        """Whether any action on the resource is allowed (what a listing shows)."""
        return self.user is None or self.user.uses(kind, name, self.source)


OPEN = Identity("", None)
# the caller of the call being served (set by the server's guard; read where a handler learns a
# resource only once it has read something, such as the topics of a send)
CALLER: contextvars.ContextVar[Identity] = contextvars.ContextVar("msgstore_caller", default=OPEN)


def origin_proof(secret: str, origin: str, stamp: str, authorization: str) -> str:
    """Binds the address to the time it was vouched for and to the caller's own signature: a
    captured proof is good for that signature only, and for ORIGIN_WINDOW_S."""
    text = f"origin:{origin}|{stamp}|{authorization}".encode()
    return hmac.new(secret.encode(), text, hashlib.sha256).hexdigest()


def origin_headers(secret: str | None, origin: str | None, metadata) -> list[tuple[str, str]]:
    """What a node adds to a call it passes on, so the next node judges the caller's address."""
    if not secret or not origin:
        return []
    stamp = str(int(time.time()))
    proof = origin_proof(secret, origin, stamp, signature.header(metadata, "authorization") or "")
    return [(ORIGIN, origin), (ORIGIN_TIME, stamp), (ORIGIN_PROOF, proof)]


class Users:
    """The store's users, parsed once per change of users.json."""

    def __init__(self, table_of: Callable[[], object | None]):
        self._table_of = table_of
        self._seen: tuple[int, int] | None = None
        self._users: dict[str, User] = {}

    def get(self, name: str) -> User | None:
        table = self._table_of()
        if table is None:
            raise NotReady("the store is starting (its users are not loaded yet): try again")
        version = (id(table), table.changes)  # type: ignore[attr-defined]
        if version != self._seen:
            users = {}
            for key, raw in dict(table.users).items():  # type: ignore[attr-defined]
                try:
                    users[key] = parse_user(key, raw)
                except PolicyError:
                    continue  # (the admin API refuses these; a hand-edited file's bad user cannot sign in)
            self._users, self._seen = users, version
        return self._users.get(name)


class Authenticator:
    def __init__(
        self,
        users: Users,
        enabled: Callable[[], bool],
        data_token: Callable[[], str | None],
        admin_token: Callable[[], str | None],
    ):
        self.users = users
        self.enabled = enabled
        self.data_token = data_token
        self.admin_token = admin_token

    def cluster_secret(self) -> str | None:
        return self.admin_token() or self.data_token()

    def identify(self, metadata, peer_host: str | None) -> Identity:
        """The caller, or :class:`Denied` (unauthenticated: no or bad credentials)."""
        if not self.enabled():
            return OPEN
        source = self._source(metadata, peer_host)
        auth = signature.header(metadata, "authorization")
        if not auth:
            raise Denied(True, f"this store checks who calls: {HELP}")
        auth = auth.strip()
        if not auth.startswith(signature.PREFIX):  # a bearer token (or a bare one, as before users)
            token = auth.removeprefix("Bearer").strip().encode()
            for known in (self.data_token(), self.admin_token()):
                if known and hmac.compare_digest(token, known.encode()):
                    return Identity("token", None, source)
            raise Denied(False, "the token is not valid for this call")
        try:
            signed = signature.parse(auth, metadata)
        except ValueError as e:
            raise Denied(True, str(e)) from None
        user = self.users.get(signed.access_key)
        if user is not None:
            if not signed.made_with(user.secret):
                raise Denied(True, f"access key {signed.access_key}: the signature does not match (wrong secret key)")
            return Identity(user.name, user, source, signed)
        data = self.data_token()
        if data and signed.made_with(data):  # the single data token as a secret key: every permission, as before users
            return Identity("token", None, source)
        if data:
            raise Denied(True, f"access key {signed.access_key[:64]!r}: no such user, and the signature does not match the data token")
        raise Denied(True, f"unknown access key {signed.access_key[:64]!r}: no such user on this store")

    def refreshed(self, identity: Identity) -> Identity:
        """The caller as the users are now: a stream checked when it opened is checked again
        for each message, so a deleted user, a changed secret or a revoked entry ends it
        (Denied) instead of lasting as long as the stream."""
        if identity.user is None or identity.signed is None:
            return identity
        user = self.users.get(identity.name)
        if user is None:
            raise Denied(True, f"user {identity.name} no longer exists")
        if user is identity.user:
            return identity
        if not identity.signed.made_with(user.secret):
            raise Denied(True, f"access key {identity.name}: its secret key changed: sign in again")
        return Identity(identity.name, user, identity.source, identity.signed)

    def may_now(self, identity: Identity, kind: str, name: str, action: str) -> bool:
        try:
            return self.refreshed(identity).may(kind, name, action)
        except (Denied, NotReady):
            return False

    def _source(self, metadata, peer_host: str | None) -> str | None:
        origin = signature.header(metadata, ORIGIN)
        secret = self.cluster_secret()
        if origin and secret:
            stamp = signature.header(metadata, ORIGIN_TIME) or ""
            proof = signature.header(metadata, ORIGIN_PROOF) or ""
            expected = origin_proof(secret, origin, stamp, signature.header(metadata, "authorization") or "")
            if stamp.isdigit() and abs(time.time() - int(stamp)) <= ORIGIN_WINDOW_S and hmac.compare_digest(proof, expected):
                return origin
        return peer_host
