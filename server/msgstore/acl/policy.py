"""Users and what they may do (docs/store-format.md §20), after RocketMQ 5.3's ACL 2.0.

A user is an access key and a secret key. Its entries each name a resource pattern, actions,
allow or deny, and optionally the source addresses they apply to:

- resources: ``topic:orders`` (exact), ``topic:orders-*`` (a prefix), ``topic:*``,
  ``group:billing``, ``group:*``, ``cluster`` (the admin service), ``*`` (everything);
- actions: RocketMQ's ``pub``, ``sub``, ``create``, ``update``, ``delete``, ``get``, ``list``
  and ``all`` (``publish``/``subscribe`` are read as ``pub``/``sub``);
- a deny that matches wins over any allow, whichever is more specific (RocketMQ ranks entries
  by how specific their resource is, and the first match decides: here a deny is never
  overridden, the rule the issue asked for and the easier one to review);
- nothing matching is a deny. A super user may do everything (RocketMQ's ``Super`` type).

A policy that cannot mean what it says is refused when it is set, naming the field: an unknown
action, a wildcard anywhere but at the end, a name no topic or group can have, and an allow
that a deny voids entirely (its resource covers the allow's, for any address or the allow's,
with every action the allow names)."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any

from ..record import codec
from ..store.metadata import group_error

ACTIONS = ("pub", "sub", "create", "update", "delete", "get", "list", "all")
ALIASES = {"publish": "pub", "subscribe": "sub"}
_ACCESS_KEY = re.compile(r"^[A-Za-z0-9_.@-]{3,64}$")
MIN_SECRET = 8
MAX_ENTRIES = 256


class PolicyError(ValueError):
    """``field`` (as the admin API spells it) and what is wrong with it."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class Resource:
    kind: str  # topic, group, cluster or * (any)
    name: str  # the exact name, or the prefix when ``prefix``
    prefix: bool = False

    def matches(self, kind: str, name: str) -> bool:
        if self.kind == "*":
            return True
        if self.kind != kind:
            return False
        if kind == "cluster":
            return True
        return name.startswith(self.name) if self.prefix else name == self.name

    def covers(self, other: Resource) -> bool:
        """Every name ``other`` matches, this matches too."""
        if self.kind == "*":
            return True
        if self.kind != other.kind:
            return False
        if self.kind == "cluster":
            return True
        if self.prefix:
            return other.name.startswith(self.name)
        return not other.prefix and other.name == self.name

    def __str__(self) -> str:
        if self.kind in ("*", "cluster"):
            return self.kind
        return f"{self.kind}:{self.name}{'*' if self.prefix else ''}"


@dataclass(frozen=True)
class Entry:
    resource: Resource
    actions: frozenset[str]
    allow: bool
    sources: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    def covers(self, action: str, source: str | None) -> bool:
        return self.names(action) and self.applies_from(source)

    def names(self, action: str) -> bool:
        return "all" in self.actions or action in self.actions

    def applies_from(self, source: str | None) -> bool:
        if not self.sources:
            return True
        ip = _address(source)
        return ip is not None and any(ip.version == net.version and ip in net for net in self.sources)

    def describe(self) -> str:
        where = f" from {', '.join(map(str, self.sources))}" if self.sources else ""
        return f"{'allow' if self.allow else 'deny'} {','.join(sorted(self.actions))} on {self.resource}{where}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "resource": str(self.resource),
            "actions": sorted(self.actions),
            "decision": "allow" if self.allow else "deny",
        }
        if self.sources:
            out["sourceIps"] = [str(s) for s in self.sources]
        return out


@dataclass(frozen=True)
class User:
    name: str  # the access key
    secret: str = field(repr=False)
    super_user: bool = False
    entries: tuple[Entry, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "secretKey": self.secret,
            "userType": "Super" if self.super_user else "Normal",
            "entries": [e.to_json() for e in self.entries],
        }

    def uses(self, kind: str, name: str, source: str | None) -> bool:
        """Whether any action on the resource is allowed (one pass over the entries: a listing
        asks this of every topic)."""
        if self.super_user:
            return True
        allowed: set[str] = set()
        denied: set[str] = set()
        for e in self.entries:
            if e.resource.matches(kind, name) and e.applies_from(source):
                (allowed if e.allow else denied).update(_expanded(e.actions))
        return bool(allowed - denied)

    def decide(self, kind: str, name: str, action: str, source: str | None) -> tuple[bool, str]:
        """(allowed, why): why names the entry that decided, or that none matched."""
        if self.super_user:
            return True, "a super user"
        allowed_by = None
        for i, e in enumerate(self.entries):
            if e.resource.matches(kind, name) and e.covers(action, source):
                if not e.allow:
                    return False, f"entries[{i}] ({e.describe()}) denies it"
                allowed_by = allowed_by or f"entries[{i}] ({e.describe()})"
        if allowed_by is None:
            for i, e in enumerate(self.entries):  # say so when only the caller's address kept an entry out
                if e.allow and e.sources and e.resource.matches(kind, name) and e.names(action):
                    return False, f"entries[{i}] ({e.describe()}) does not cover calls from {source or 'an unknown address'}"
            return False, "no entry of the user allows it"
        return True, f"allowed by {allowed_by}"


def _address(source: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if not source:
        return None
    try:
        ip = ipaddress.ip_address(source.strip("[]"))
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def parse_resource(text: object, field: str) -> Resource:
    if not isinstance(text, str) or not text.strip():
        raise PolicyError(field, "a resource is needed: topic:NAME, topic:PREFIX*, group:NAME, group:PREFIX*, cluster or *")
    text = text.strip()
    if text == "*":
        return Resource("*", "")
    kind, sep, name = text.partition(":")
    kind = kind.lower()
    if kind == "cluster" and (not sep or name in ("", "*")):
        return Resource("cluster", "")
    if kind not in ("topic", "group") or not sep:
        raise PolicyError(field, f"{text[:80]!r} is no resource: write topic:NAME, topic:PREFIX*, group:NAME, group:PREFIX*, cluster or *")
    prefix = name.endswith("*")
    stem = name[:-1] if prefix else name
    if "*" in stem:
        raise PolicyError(field, f"{text[:80]!r}: only a trailing * is a wildcard (a name cannot contain *), so this matches nothing")
    if not stem and not prefix:
        raise PolicyError(field, f"{text[:80]!r}: the {kind} name is empty")
    if kind == "topic":
        err = codec.topic_error(stem) if stem else None  # (a prefix's stem obeys the same rules)
        if err:
            raise PolicyError(field, f"{text[:80]!r} matches no topic: {err.replace('topic ', 'a topic name ', 1)}")
    elif stem and group_error(stem):  # (a prefix's stem obeys the same rules)
        raise PolicyError(field, f"{text[:80]!r} matches no group: {group_error(stem)}")
    return Resource(kind, stem, prefix)


def parse_actions(value: object, field: str) -> frozenset[str]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise PolicyError(field, f"name at least one action of {', '.join(ACTIONS)}")
    out = set()
    for i, a in enumerate(items):
        word = ALIASES.get(str(a).strip().lower(), str(a).strip().lower())
        if word not in ACTIONS:
            raise PolicyError(f"{field}[{i}]", f"unknown action {str(a)[:40]!r}: one of {', '.join(ACTIONS)}")
        out.add(word)
    return frozenset(out)


def parse_sources(value: object, field: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    if value in (None, "", []):
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise PolicyError(field, "a list of addresses or CIDR ranges")
    out = []
    for i, s in enumerate(items):
        try:
            out.append(ipaddress.ip_network(str(s).strip(), strict=False))
        except ValueError:
            raise PolicyError(f"{field}[{i}]", f"{str(s)[:60]!r} is not an address or CIDR range (10.0.0.0/8, 192.168.1.7)") from None
    return tuple(out)


def parse_entry(raw: object, field: str) -> Entry:
    if not isinstance(raw, dict):
        raise PolicyError(field, "an object with resource, actions, decision and optionally sourceIps")
    unknown = set(raw) - {"resource", "actions", "decision", "sourceIps"}
    if unknown:
        raise PolicyError(f"{field}.{sorted(unknown)[0]}", "unknown field (resource, actions, decision, sourceIps)")
    decision = str(raw.get("decision", "allow")).lower()
    if decision not in ("allow", "deny"):
        raise PolicyError(f"{field}.decision", f"allow or deny, got {decision[:40]!r}")
    return Entry(
        parse_resource(raw.get("resource"), f"{field}.resource"),
        parse_actions(raw.get("actions"), f"{field}.actions"),
        decision == "allow",
        parse_sources(raw.get("sourceIps"), f"{field}.sourceIps"),
    )


def check_entries(entries: list[Entry], field: str = "entries") -> None:
    """Refuse an allow that a deny of the same resource and sources voids entirely (a deny
    always wins, so it could never allow anything). An allow of ``all`` beside a deny of
    ``delete`` is fine: everything but deleting."""
    if len(entries) > MAX_ENTRIES:
        raise PolicyError(field, f"at most {MAX_ENTRIES} entries per user")
    for j, b in enumerate(entries):
        for i, a in enumerate(entries[:j]):
            if a.allow == b.allow:
                continue
            allow, deny = (a, b) if a.allow else (b, a)
            everywhere = not deny.sources or set(deny.sources) == set(allow.sources)  # (the deny applies wherever the allow does)
            if deny.resource.covers(allow.resource) and everywhere and _expanded(allow.actions) <= _expanded(deny.actions):
                raise PolicyError(
                    f"{field}[{j}]",
                    f"{b.describe()} contradicts {field}[{i}] ({a.describe()}): the deny covers every name, address and "
                    "action the allow does, and a deny always wins, so the allow would never allow anything: drop one of them",
                )


def _expanded(actions: frozenset[str]) -> set[str]:
    return set(ACTIONS) if "all" in actions else set(actions)


def check_access_key(name: object, field: str = "access_key") -> str:
    if not isinstance(name, str) or not _ACCESS_KEY.match(name):
        raise PolicyError(field, "3-64 characters of A-Z a-z 0-9 _ . @ -")
    return name


def check_secret(secret: object, field: str = "secret_key") -> str:
    if not isinstance(secret, str) or len(secret) < MIN_SECRET or len(secret) > 1024 or secret != secret.strip():
        raise PolicyError(field, f"{MIN_SECRET}-1024 characters without leading or trailing spaces")
    return secret


def parse_user(name: str, raw: dict[str, Any]) -> User:
    """A user as the admin API or users.json gives it; PolicyError names the field."""
    check_access_key(name)
    secret = check_secret(raw.get("secretKey"), "secret_key")
    kind = str(raw.get("userType", "Normal"))
    if kind not in ("Normal", "Super"):
        raise PolicyError("user_type", f"Normal or Super, got {kind[:20]!r}")
    entries_raw = raw.get("entries") or []
    if not isinstance(entries_raw, list):
        raise PolicyError("entries", "a list")
    entries = [parse_entry(e, f"entries[{i}]") for i, e in enumerate(entries_raw)]
    if kind == "Super" and entries:
        raise PolicyError("entries", "a Super user may do everything: its entries would mean nothing (make it Normal to limit it)")
    check_entries(entries)
    return User(name, secret, kind == "Super", tuple(entries))
