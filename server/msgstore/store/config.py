"""Store configuration (docs/store-format.md §11): reference names, defaults, validation, hot vs restart.

A config is validated as a whole (§12.3): a change that would leave the ratios out of order or
name an unknown key is refused entirely, never half-applied.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

GiB = 1024 * 1024 * 1024
CQ_UNIT_SIZE = 20


class ConfigError(ValueError):
    """A bad configuration; ``key`` names the offending setting."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key
        self.reason = message


HOURS_PATTERN = r"^([01]?[0-9]|2[0-3])(;([01]?[0-9]|2[0-3]))*$"  # deleteWhen: "04", "3;15"
GROUPS_PATTERN = r"^[A-Za-z0-9_%|;-]*$"  # retentionGuardGroups: names separated by ;
MAX_SEGMENT_SIZE = 2 * GiB - 1  # positions are 32-bit in the reference


@dataclass(frozen=True)
class KeySpec:
    default: Any
    kind: type
    hot: bool
    doc: str
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] | None = None
    pattern: str | None = None  # for strings, as a JSON Schema pattern (validate() checks the same)
    typed: bool = False  # a field of its own in the MessageStore CRD's spec.store and the chart's store.config
    fixed: bool = False  # fixed when the store is made: segments keep the size they were written with


def _k(
    default: Any,
    hot: bool,
    doc: str,
    minimum: int | None = None,
    maximum: int | None = None,
    choices: tuple[str, ...] | None = None,
    pattern: str | None = None,
    typed: bool = False,
    fixed: bool = False,
) -> KeySpec:
    return KeySpec(default, type(default), hot, doc, minimum, maximum, choices, pattern, typed, fixed)


# Every knob, with the reference's name, unit and default. ``hot`` keys are re-read by the
# services on every cycle, so an update takes effect without a restart. This table is the one
# definition of the settings: the CRD's spec.store, the chart's values schema and the operator's
# typed keys are generated from it (scripts/render_deploy.py; a test fails when they are stale).
KEYS: dict[str, KeySpec] = {
    # fixed at start
    "mappedFileSizeCommitLog": _k(GiB, False, "commit-log segment size in bytes", 64, MAX_SEGMENT_SIZE, typed=True, fixed=True),
    "mappedFileSizeConsumeQueue": _k(
        300_000 * CQ_UNIT_SIZE,
        False,
        "consume-queue segment size in bytes (rounded up to 20)",
        CQ_UNIT_SIZE,
        MAX_SEGMENT_SIZE,
        typed=True,
        fixed=True,
    ),
    "maxHashSlotNum": _k(5_000_000, False, "hash slots per index file", 1, typed=True),
    "maxIndexNum": _k(20_000_000, False, "entries per index file", 2, typed=True),
    "cleanResourceInterval": _k(10_000, False, "ms between cleaner runs", 1),
    "cleanResourceInitialDelay": _k(60_000, False, "ms before the first cleaner run", 0),
    "flushDiskType": _k("ASYNC_FLUSH", False, "SYNC_FLUSH or ASYNC_FLUSH", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), typed=True),
    "transientStorePoolEnable": _k(False, False, "append into memory write buffers committed periodically"),
    "transientStorePoolSize": _k(5, False, "number of write buffers", 1),
    "storePathCommitLog": _k("", False, "commit-log directory (default <root>/commitlog)"),
    "storePathConsumeQueue": _k("", False, "consume-queue directory (default <root>/consumequeue)"),
    "storePathIndex": _k("", False, "index directory (default <root>/index)"),
    # hot: cleanup
    "fileReservedTime": _k(
        72,
        True,
        "hours a commit-log segment is kept; 0 keeps none but the one being written past the next deleteWhen hour, "
        "read or not, unless retentionGuardGroups hold it (RocketMQ's meaning, not 'forever')",
        0,
        typed=True,
    ),
    "deleteWhen": _k("04", True, "local hours (00-23, ';'-separated) when expired segments are deleted", pattern=HOURS_PATTERN, typed=True),
    "diskMaxUsedSpaceRatio": _k(75, True, "disk usage % above which cleanup runs", 10, 95, typed=True),
    "diskSpaceCleanForciblyRatio": _k(85, True, "disk usage % above which unexpired segments are deleted", 10, 95, typed=True),
    "diskSpaceWarningLevelRatio": _k(90, True, "disk usage % above which writes are refused", 10, 95, typed=True),
    "cleanFileForciblyEnable": _k(True, True, "allow deleting unexpired segments under disk pressure", typed=True),
    "deleteFileBatchMax": _k(10, True, "segments deleted per cleaner run", 1, typed=True),
    "deleteCommitLogFilesInterval": _k(100, True, "ms between two segment deletions", 0),
    "deleteConsumeQueueFilesInterval": _k(100, True, "ms after a queue that deleted something", 0),
    "destroyMapedFileIntervalForcibly": _k(120_000, True, "ms a referenced segment may delay its deletion", 0),
    "redeleteHangedFileInterval": _k(120_000, True, "ms between retries of a hanged segment", 0),
    "retentionGuardGroups": _k(
        "", True, "';'-separated consumer groups whose unconsumed messages are kept (§12.5)", pattern=GROUPS_PATTERN, typed=True
    ),
    # hot: flush
    "flushIntervalCommitLog": _k(500, True, "ms between async flushes", 1, typed=True),
    "flushCommitLogLeastPages": _k(4, True, "dirty 4 KiB pages before an async flush", 0),
    "flushCommitLogThoroughInterval": _k(10_000, True, "ms after which everything is flushed", 0),
    "cachedCommitLogBytes": _k(
        0,
        True,
        "the page cache of commit-log bytes further than this behind the flushed, dispatched end is given back to the kernel, "
        "once (0: never, as the reference; for VMs whose host reclaims freed memory, and pods with tight memory limits)",
        0,
    ),
    "syncFlushTimeout": _k(5_000, True, "ms a SYNC_FLUSH put waits before FLUSH_DISK_TIMEOUT", 1, typed=True),
    "commitIntervalCommitLog": _k(200, True, "ms between write-buffer commits", 1),
    "commitCommitLogLeastPages": _k(4, True, "dirty pages before a write-buffer commit", 0),
    "commitCommitLogThoroughInterval": _k(200, True, "ms after which the write buffer is fully committed", 0),
    "flushIntervalConsumeQueue": _k(1_000, True, "ms between consume-queue and checkpoint flushes", 1),
    "flushConsumeQueueLeastPages": _k(2, True, "dirty pages before a consume-queue flush", 0),
    "flushConsumeQueueThoroughInterval": _k(60_000, True, "ms after which consume queues are fully flushed", 0),
    "queueStateInterval": _k(10_000, True, "ms between saves of the consume queues' ends (consumequeue/state.json)", 0),
    "maxOpenQueueFiles": _k(1_024, False, "consume-queue files open at once (a pool; more are reopened on use)", 16, 1_000_000),
    "flushConsumerOffsetInterval": _k(5_000, True, "ms between consumer-offset persists", 1),
    "osPageCacheBusyTimeOutMills": _k(1_000, True, "ms the append lock may be awaited before OS_PAGE_CACHE_BUSY", 1),
    # hot: messages and queries
    "maxMessageSize": _k(4 * 1024 * 1024, True, "largest body in bytes", 1, typed=True),
    "messageIndexEnable": _k(True, True, "build the key index", typed=True),
    "maxMsgsNumBatch": _k(64, True, "most records a key query returns", 1, 64),
    "checkCRCOnRecover": _k(True, True, "verify body CRCs while recovering"),
    "autoCreateTopicEnable": _k(True, True, "create a topic on its first message"),
    "authorizationEnabled": _k(
        False, True, "check every data call's user and permissions (users.json, §20; needs an admin token)", typed=True
    ),
    "enablePropertyFilter": _k(True, True, "serve SQL92 selectors on message properties (RocketMQ's is off unless set)"),
    "defaultTopicQueueNums": _k(8, True, "queues of an auto-created topic", 1, 1024),
    "diskMonitorInterval": _k(1_000, True, "ms between disk-usage readings (§12.4)", 10, 1000),
    # delayed delivery (broker/, docs/store-format.md §15)
    "messageDelayLevel": _k(
        "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
        False,
        "the delays of RocketMQ 4's delay levels 1, 2, ... (a message's DELAY property), each a number and s, m, h or d",
        pattern=r"^[0-9]+[smhd]( +[0-9]+[smhd])*$",
    ),
    "transactionTimeOut": _k(6_000, True, "ms a half message waits for its commit or rollback before it is checked back", 1),
    "transactionCheckInterval": _k(60_000, True, "ms between check-backs of one unresolved half message", 1),
    "transactionCheckMax": _k(15, True, "check-backs of a half message before it is set aside in TRANS_CHECK_MAX_TIME_TOPIC", 1, 1000),
    "timerMaxDelaySec": _k(259_200, True, "longest delay of a message with a delivery time (s); a longer one is refused", 1),
    "pushInvisibleTime": _k(
        60_000, True, "ms a RocketMQ 5 push consumer's delivery stays invisible at a time (renewed until it is done; §18)", 1_000, 3_600_000
    ),
    # replication (§14): the role a member starts in; later changes come from a controller
    "brokerRole": _k(
        "ASYNC_MASTER",
        False,
        "ASYNC_MASTER, SYNC_MASTER (acknowledge once inSyncReplicas members hold a put) or SLAVE (follow haMasterAddress)",
        choices=("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"),
    ),
    "haMasterAddress": _k("", False, "host:port of the master a SLAVE follows"),
    "inSyncReplicas": _k(
        1, True, "members, master included, that must hold a SYNC put (a SYNC master waits for at least 1 follower)", 1, 16
    ),
    "slaveTimeout": _k(3_000, True, "ms a SYNC put waits for its followers before FLUSH_SLAVE_TIMEOUT", 1),
    "slaveReadEnable": _k(False, True, "a follower serves pulls (reads go on while the master is down)"),
    "haMaxTimeSlaveNotCatchup": _k(
        15_000, True, "ms a follower may go without having all the master had before it leaves the in-sync set", 100
    ),
    "haKeepaliveTimeout": _k(
        3_000,
        True,
        "ms without a chunk (follower) or a report (master) before a replication stream is dropped; a master of a group of "
        "three or more that hears from no majority for this long stops acknowledging (check-quorum)",
        200,
        600_000,
    ),
}

HOT_KEYS = frozenset(k for k, s in KEYS.items() if s.hot)
RESTART_KEYS = frozenset(k for k, s in KEYS.items() if not s.hot)
TYPED_KEYS = tuple(k for k, s in KEYS.items() if s.typed)
# disk ratios that must not decrease along the list: warning >= forcibly >= max used
RATIO_ORDER = ("diskSpaceWarningLevelRatio", "diskSpaceCleanForciblyRatio", "diskMaxUsedSpaceRatio")
_HOUR_RE = re.compile(r"^(?:[01]?[0-9]|2[0-3])$")  # the reference parses "4" as well as "04"
_GROUP_RE = re.compile(r"^[A-Za-z0-9_%|-]{1,255}$")


def json_schema(key: str) -> dict[str, Any]:
    """A setting as a JSON Schema (OpenAPI v3) property, for the CRD and the chart's values."""
    spec = KEYS[key]
    out: dict[str, Any] = {"type": {bool: "boolean", int: "integer", str: "string"}[spec.kind]}
    if spec.choices:
        out["enum"] = list(spec.choices)
    if spec.minimum is not None:
        out["minimum"] = spec.minimum
    if spec.maximum is not None:
        out["maximum"] = spec.maximum
    if spec.pattern:
        out["pattern"] = spec.pattern
    when = " (applied at the next restart)"
    if spec.fixed:
        when = " (fixed when the store is made: segments keep the size they were written with)"
    out["description"] = spec.doc[0].upper() + spec.doc[1:] + ("" if spec.hot else when) + "."
    return out


def _coerce(key: str, spec: KeySpec, value: Any) -> Any:
    """Accept native values and the strings a ConfigMap or ``--set`` carries."""
    if spec.kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigError(key, f"expected true or false, got {value!r}")
    if spec.kind is int:
        if isinstance(value, bool):
            raise ConfigError(key, f"expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise ConfigError(key, f"expected an integer, got {value!r}")
    if not isinstance(value, str):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and key == "deleteWhen":
            return f"{int(value):02d}"
        raise ConfigError(key, f"expected a string, got {value!r}")
    return value


def parse_delete_when(value: str) -> frozenset[int]:
    return frozenset(int(h) for h in value.split(";") if h != "")


_DELAY_UNITS_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(value: str) -> tuple[int, ...]:
    """messageDelayLevel → the delay of level 1, 2, ... in ms ("1s 5s 1m" → (1000, 5000, 60000))."""
    return tuple(int(w[:-1]) * _DELAY_UNITS_MS[w[-1]] for w in value.split())


def parse_groups(value: str) -> tuple[str, ...]:
    return tuple(g for g in value.split(";") if g)


class StoreConfig:
    """An immutable, validated set of store settings; attribute access by reference name."""

    def __init__(self, values: Mapping[str, Any] | None = None, **kw: Any):
        merged = dict(values or {})
        merged.update(kw)
        self._values = validate(merged)
        for k, v in self._values.items():
            object.__setattr__(self, k, v)
        self.delete_hours = parse_delete_when(self._values["deleteWhen"])
        self.guard_groups = parse_groups(self._values["retentionGuardGroups"])
        size = self._values["mappedFileSizeConsumeQueue"]
        self.cq_file_size = -(-size // CQ_UNIT_SIZE) * CQ_UNIT_SIZE
        self.delay_levels_ms = parse_delay_levels(self._values["messageDelayLevel"])

    def __setattr__(self, name: str, value: Any) -> None:
        if name in KEYS:
            raise AttributeError("StoreConfig is immutable; use with_changes()")
        object.__setattr__(self, name, value)

    if TYPE_CHECKING:  # every key is an attribute (set in __init__), typed by its KeySpec at run time

        def __getattr__(self, name: str) -> Any: ...

    def get(self, key: str) -> Any:
        return self._values[key]

    def to_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def non_defaults(self) -> dict[str, Any]:
        return {k: v for k, v in self._values.items() if v != KEYS[k].default}

    def with_changes(self, changes: Mapping[str, Any]) -> StoreConfig:
        merged = self.to_dict()
        merged.update(changes)
        return StoreConfig(merged)

    def diff(self, other: StoreConfig) -> dict[str, Any]:
        return {k: v for k, v in other._values.items() if self._values[k] != v}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StoreConfig) and other._values == self._values

    def __repr__(self) -> str:
        return f"StoreConfig({self.non_defaults()!r})"


def validate(values: Mapping[str, Any]) -> dict[str, Any]:
    """Whole-config validation; raises :class:`ConfigError` naming the first bad key."""
    out: dict[str, Any] = {}
    for key in values:
        if key not in KEYS:
            raise ConfigError(key, "unknown configuration key")
    for key, spec in KEYS.items():
        value = _coerce(key, spec, values[key]) if key in values else spec.default
        if spec.kind is int:
            if spec.minimum is not None and value < spec.minimum:
                raise ConfigError(key, f"must be >= {spec.minimum}, got {value}")
            if spec.maximum is not None and value > spec.maximum:
                raise ConfigError(key, f"must be <= {spec.maximum}, got {value}")
        if spec.choices and value not in spec.choices:
            raise ConfigError(key, f"must be one of {', '.join(spec.choices)}, got {value!r}")
        out[key] = value
    dw = out["deleteWhen"]
    parts = dw.split(";")
    if not dw or any(not _HOUR_RE.match(p) for p in parts if p) or all(p == "" for p in parts):
        raise ConfigError("deleteWhen", f"must be ';'-separated hours 00-23, got {dw!r}")
    for higher, lower in zip(RATIO_ORDER, RATIO_ORDER[1:]):
        if not out[higher] >= out[lower]:
            raise ConfigError(higher, f"must be >= {lower} ({out[higher]} < {out[lower]})")
    for g in parse_groups(out["retentionGuardGroups"]):
        if not _GROUP_RE.match(g):
            raise ConfigError("retentionGuardGroups", f"illegal group name {g!r}")
    levels = out["messageDelayLevel"]
    if not re.fullmatch(KEYS["messageDelayLevel"].pattern or "", levels) or len(levels.split()) > 64:
        raise ConfigError("messageDelayLevel", f"must be 1 to 64 delays like '1s 5s 1m 2h', got {levels!r}")
    if out["transientStorePoolEnable"] and out["flushDiskType"] != "ASYNC_FLUSH":
        raise ConfigError("transientStorePoolEnable", "the write buffer works only with flushDiskType=ASYNC_FLUSH")
    return out


def parse_assignments(items: list[str]) -> dict[str, str]:
    """``key=value`` strings (CLI ``--set``) → dict; the values are coerced by validation."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(item, "expected key=value")
        out[key.strip()] = value.strip()
    return out


@dataclass
class ConfigUpdate:
    """Outcome of an update: what took effect now and what waits for a restart (§12.3)."""

    applied: dict[str, Any]
    restart_required: dict[str, Any]
    generation: int
    dry_run: bool


Validator = Callable[[Mapping[str, Any]], dict[str, Any]]
