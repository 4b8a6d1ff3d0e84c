"""Reader options, after Spark's Kafka source, validated with messages naming the option.

Offsets: ``earliest``, ``latest`` or JSON per topic and queue, e.g.
``{"orders": {"0": 42, "node-1/3": -2}}`` where a key is a queue id on every node or
``node/queue`` for one node, and -2 / -1 mean earliest / latest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

EARLIEST, LATEST = -2, -1


class OptionError(ValueError):
    def __init__(self, option: str, reason: str):
        super().__init__(f"msgstore source option '{option}': {reason}")
        self.option = option


@dataclass(frozen=True)
class Bound:
    """A starting or ending position: earliest, latest, or explicit offsets."""

    kind: str  # "earliest" | "latest" | "json"
    offsets: Mapping[str, Mapping[str, int]] | None = None

    def for_queue(self, topic: str, node: str, queue_id: int) -> int | None:
        """-2 earliest, -1 latest, an offset, or None (not mentioned: the default applies)."""
        if self.kind == "earliest":
            return EARLIEST
        if self.kind == "latest":
            return LATEST
        per = (self.offsets or {}).get(topic)
        if per is None:
            return None
        for key in (f"{node}/{queue_id}", str(queue_id), "*"):
            if key in per:
                return per[key]
        if node == "*":  # a store directory is one node: "node-1/3" names its queue 3 whatever the node's name
            for key, value in per.items():
                if key.rpartition("/")[2] == str(queue_id) and "/" in key:
                    return value
        return None


def parse_bound(option: str, text: str | None, default: str) -> Bound:
    value = (text or default).strip()
    if value in ("earliest", "latest"):
        return Bound(value)
    try:
        data = json.loads(value)
    except ValueError:
        raise OptionError(option, f"expected earliest, latest or JSON offsets, got {value!r}") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise OptionError(option, 'JSON offsets look like {"topic": {"0": 42, "node-1/3": -2}}')
    for topic, per in data.items():
        for key, off in per.items():
            if not isinstance(off, int) or isinstance(off, bool) or off < -2:
                raise OptionError(option, f"offset for {topic} {key} must be an integer >= -2, got {off!r}")
    return Bound("json", data)


def _int(options: Mapping[str, str], name: str, default: int | None, minimum: int = 0) -> int | None:
    raw = options.get(name.lower())
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise OptionError(name, f"expected an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(name, f"must be >= {minimum}, got {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    if str(raw).lower() in ("true", "false"):
        return str(raw).lower() == "true"
    raise OptionError(name, f"expected true or false, got {raw!r}")


OPTIONS = (
    "endpoints",
    "path",
    "topics",
    "kind",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "failOnDataLoss",
    "systemTopics",
    "maxMessagesPerPartition",
    "maxOffsetsPerTrigger",
    "token",
    "accessKey",
    "secretKey",
    "tlsCa",
    "tlsCert",
    "tlsKey",
    "serverName",
)
CANONICAL = {o.lower(): o for o in OPTIONS} | {"paths": "paths"}  # ("paths": Spark's own, from load(path))


@dataclass(frozen=True)
class ReaderOptions:
    endpoints: tuple[str, ...]
    path: str | None
    topics: tuple[str, ...]
    kind: str
    starting: Bound
    ending: Bound
    starting_ts: int | None
    ending_ts: int | None
    fail_on_data_loss: bool
    system_topics: bool  # an offline read without 'topics' includes the store's own topics (delays, retries, DLQs)
    max_per_partition: int
    max_per_trigger: int | None
    token: str | None
    access_key: str | None  # a user's (docs/store-format.md §20), with secret_key
    secret_key: str | None
    tls_ca: str | None
    tls_cert: str | None
    tls_key: str | None
    server_name: str | None

    @classmethod
    def parse(cls, options: Mapping[str, Any], streaming: bool = False) -> ReaderOptions:
        opts = {str(k).lower(): v for k, v in options.items()}
        for name in opts:
            if name not in CANONICAL:  # (a typo such as startingOffset read every message, silently)
                import difflib

                close = difflib.get_close_matches(name, sorted(CANONICAL), n=1)
                hint = f"did you mean {CANONICAL[close[0]]}?" if close else f"its options: {', '.join(OPTIONS)}"
                raise OptionError(name, f"not an option of this source ({hint})")  # (Spark gives option names in lower case)
        endpoints = tuple(e.strip() for e in (opts.get("endpoints") or "").split(",") if e.strip())
        path = opts.get("path") or None
        if bool(endpoints) == bool(path):
            raise OptionError("endpoints", "give exactly one of 'endpoints' (live stores) or 'path' (a directory)")
        if streaming and path:
            raise OptionError("path", "streaming reads need 'endpoints'")
        topics = tuple(t.strip() for t in (opts.get("topics") or "").split(",") if t.strip())
        if endpoints and not topics:
            raise OptionError("topics", "name the topics to read, comma-separated")
        from ..record.codec import topic_error

        for t in topics:
            if topic_error(t):
                raise OptionError("topics", f"{t!r}: {topic_error(t)}")
        kind = (opts.get("kind") or "messages").lower()
        if kind not in ("messages", "consumequeue", "index", "keyhashes"):
            raise OptionError("kind", "one of messages, consumequeue, index, keyhashes")
        if kind != "messages" and not path:
            raise OptionError("kind", f"{kind} is read from a store directory ('path')")
        if bool(opts.get("accesskey")) != bool(opts.get("secretkey")):
            raise OptionError("accessKey", "give a user's accessKey and secretKey together")
        return cls(
            endpoints=endpoints,
            path=path,
            topics=topics,
            kind=kind,
            starting=parse_bound("startingOffsets", opts.get("startingoffsets"), "latest" if streaming else "earliest"),
            ending=parse_bound("endingOffsets", opts.get("endingoffsets"), "latest"),
            starting_ts=_int(opts, "startingTimestamp", None),
            ending_ts=_int(opts, "endingTimestamp", None),
            fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
            system_topics=_bool(opts, "systemTopics", False),
            max_per_partition=_int(opts, "maxMessagesPerPartition", 100_000, 1),
            max_per_trigger=_int(opts, "maxOffsetsPerTrigger", None, 1),
            token=opts.get("token"),
            access_key=opts.get("accesskey"),
            secret_key=opts.get("secretkey"),
            tls_ca=opts.get("tlsca"),
            tls_cert=opts.get("tlscert"),
            tls_key=opts.get("tlskey"),
            server_name=opts.get("servername"),
        )

    def client(self, endpoints=None):
        from ..client import Client

        return Client(
            list(endpoints or self.endpoints),
            token=self.token,
            access_key=self.access_key,
            secret_key=self.secret_key,
            tls_ca=self.tls_ca,
            tls_cert=self.tls_cert,
            tls_key=self.tls_key,
            server_name=self.server_name,
            timeout=60,
        )
