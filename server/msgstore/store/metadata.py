"""Metadata JSON files under ``config/`` (docs/store-format.md §10): topics, consumer offsets,
subscription groups and the persisted store configuration.

Every file is written atomically (new file, fsync, rename) with the previous version kept as
``<file>.bak``; loading falls back to the ``.bak`` when the file is missing or unparseable, so
a crash mid-write never loses the metadata. Files RocketMQ wrote are read as they are:
fastjson writes integer map keys bare (``{"offsetTable":{"orders@g1":{0:250}}}``), and the
fields we do not use (``dataVersion``'s timestamp, ``forbiddenTable``) are written back.

A file that exists but neither it nor its backup can be read stops the start
(:class:`UnreadableConfig`), as RocketMQ refuses to start ("load consumer offset failed"):
carrying on with an empty table would forget every group's offsets, and the next save would
replace the file. ``msgstore serve --set-aside-unreadable-config`` starts anyway, keeping the
file as ``<file>.unreadable``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

log = logging.getLogger(__name__)

PERM_READ = 4
PERM_WRITE = 2
MESSAGE_TYPE_ATTRIBUTE = "message.type"  # RocketMQ 5's TopicAttributes.TOPIC_MESSAGE_TYPE_ATTRIBUTE
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")


def write_atomic(path: str, data: bytes, current_is_good: bool = False, mode: int = 0o666) -> None:
    """``current_is_good``: the file there now is known to parse (we wrote or read it), so it
    becomes the backup without being parsed again (topics.json of 12,500 topics is 1.3 MB).
    ``mode``: the new file's permissions (before the umask), 0o600 for secrets."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    tmp = path + ".tmp"
    if os.path.exists(tmp):
        os.unlink(tmp)  # (a crashed write's leftover keeps its mode otherwise)
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if (current_is_good and os.path.exists(path)) or _parses(path):  # a corrupt current file must never replace a good backup
        os.replace(path, path + ".bak")
    os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _parses(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            parse_config(f.read())
        return True
    except (OSError, ValueError, UnicodeDecodeError):
        return False


# the set_aside switch of ``serve --set-aside-unreadable-config`` (one per process, like logging's level)
SET_ASIDE_UNREADABLE = False
UNREADABLE = ".unreadable"


class UnreadableConfig(ValueError):
    """A config file that exists, but neither it nor its backup parses."""

    def __init__(self, path: str, reasons: list[str]):
        self.path = path
        super().__init__(
            f"{path} cannot be read ({'; '.join(reasons)}): refusing to start with it empty, which would lose what it holds "
            f"(RocketMQ refuses too). `msgstore fsck` names every such file; to start anyway, give --set-aside-unreadable-config "
            f"(the file is kept as {os.path.basename(path)}{UNREADABLE})"
        )


_BARE_KEY = re.compile(rb"(-?\d+)(\s*:)")


def parse_config(data: bytes) -> Any:
    """JSON, or RocketMQ's fastjson JSON: its integer map keys come bare (``{0:250,1:250}``).
    Quoting them must leave strings alone (a filter expression may hold ``{1:``), so the
    text is walked token by token (json has no option for this, and json5 does not take
    keys that start with a digit)."""
    try:
        return json.loads(data)
    except ValueError:
        pass
    return json.loads(_quote_bare_keys(data))


def _quote_bare_keys(data: bytes) -> bytes:
    out = bytearray()
    i, n = 0, len(data)
    expect_key = False  # just after { or , (outside a string): a key may come
    while i < n:
        c = data[i]
        if c == 0x22:  # a string: copy it whole, escapes included
            j = i + 1
            while j < n and data[j] != 0x22:
                j += 2 if data[j] == 0x5C else 1
            out += data[i : j + 1]
            i = j + 1
            expect_key = False
            continue
        if expect_key and (0x30 <= c <= 0x39 or c == 0x2D):
            m = _BARE_KEY.match(data, i)
            if m:
                out += b'"' + m.group(1) + b'"' + m.group(2)
                i = m.end()
                expect_key = False
                continue
        if c in b"{,":
            expect_key = True
        elif c not in b" \t\r\n":
            expect_key = False
        out.append(c)
        i += 1
    return bytes(out)


def _free_name(path: str) -> str:
    """``path``, or ``path.1``, ``path.2``...: a copy set aside before is never overwritten."""
    k, name = 0, path
    while os.path.exists(name):
        k += 1
        name = f"{path}.{k}"
    return name


def read_json(path: str, strict: bool = True) -> Any | None:
    """The file's JSON, else its ``.bak``'s; None when neither exists. Neither parsing raises
    :class:`UnreadableConfig`, unless SET_ASIDE_UNREADABLE: then they are renamed aside.
    ``strict=False`` for the store's own progress files, which it can rebuild (``timercheck``
    is binary where RocketMQ 5 wrote it): None, and the file left as it is."""
    reasons: list[str] = []
    present: list[str] = []
    for candidate in (path, path + ".bak"):
        try:
            with open(candidate, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            reasons.append(f"{os.path.basename(candidate)} missing")
            continue
        try:
            return parse_config(data)
        except (ValueError, UnicodeDecodeError) as e:
            log.error("%s is unreadable (%s); trying the backup", candidate, e)
            reasons.append(f"{os.path.basename(candidate)}: {e}")
            present.append(candidate)
    if not present or not strict:
        return None
    if not SET_ASIDE_UNREADABLE:
        raise UnreadableConfig(path, reasons)
    for candidate in present:
        os.replace(candidate, _free_name(candidate + UNREADABLE))
    log.error("%s cannot be read (%s): starting without it, as asked; kept as %s%s", path, "; ".join(reasons), path, UNREADABLE)
    return None


def check_config_dir(config_dir: str) -> tuple[list[str], list[str]]:
    """(problems, notes) of the files under ``config/`` for ``msgstore fsck``: a file that
    neither it nor its backup parses is a problem (the store will not start with it); one
    whose backup is used instead is a note; so is one written by RocketMQ (fastjson)."""
    problems: list[str] = []
    notes: list[str] = []
    try:
        names = sorted(os.listdir(config_dir))
    except FileNotFoundError:
        return problems, notes
    for name in names:
        if not name.endswith(".json"):
            continue
        path = os.path.join(config_dir, name)
        found = []
        for candidate in (path, path + ".bak"):
            try:
                with open(candidate, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                found.append(f"{os.path.basename(candidate)} missing")
                continue
            try:
                json.loads(data)
                found.append("")
            except ValueError:
                try:
                    parse_config(data)
                    found.append("")
                    notes.append(f"config/{os.path.basename(candidate)}: written by RocketMQ (fastjson: bare integer keys); read as such")
                except (ValueError, UnicodeDecodeError) as e:
                    found.append(f"{os.path.basename(candidate)}: {e}")
            except UnicodeDecodeError as e:
                found.append(f"{os.path.basename(candidate)}: {e}")
        if found[0] == "":
            continue
        if found[1] == "":
            notes.append(f"config/{name} cannot be read ({found[0]}); its backup will be used")
        else:
            problems.append(
                f"config/{name} cannot be read ({'; '.join(found)}): the store will not start with it "
                f"(serve --set-aside-unreadable-config starts without it, keeping it as {name}{UNREADABLE})"
            )
    return problems, notes


class JsonFile:
    """One metadata file with a lock, a count of changes and atomic persistence.

    Writers take turns and each writes a snapshot of every change made before it, so an older
    snapshot never lands after a newer one, and a change that must be durable before it is
    acknowledged (:meth:`persist_change`) often finds itself written by a write already under
    way: concurrent commits share one fsync, as concurrent puts share one group commit."""

    name = ""
    mode = 0o666  # permissions of a new file (before the umask)

    def __init__(self, config_dir: str):
        self.path = os.path.join(config_dir, self.name)
        self.lock = threading.RLock()
        self._changes = 0  # changes made so far
        self._persisted = 0  # changes known to be on disk
        self._write_lock = threading.Lock()
        self._written = False  # the file on disk is one this process wrote (it parses)
        self.data_version = 0
        self._version_doc: dict[str, Any] = {}  # dataVersion as read (RocketMQ's has timestamp, stateVersion)
        self._kept: dict[str, Any] = {}  # top-level fields we do not use, written back as read

    @property
    def dirty(self) -> bool:
        return self._changes != self._persisted

    @property
    def changes(self) -> int:
        """How many changes were made so far (a version for caches built from the table)."""
        return self._changes

    def changed(self) -> int:
        """Count a change (call with ``lock`` held); returns its number for :meth:`persist_change`."""
        self._changes += 1
        return self._changes

    def load(self) -> None:
        raw = read_json(self.path)
        if raw is None:
            return
        if not isinstance(raw, dict):
            raise UnreadableConfig(self.path, [f"a JSON {type(raw).__name__}, not an object"])
        version = raw.get("dataVersion")
        self._version_doc = dict(version) if isinstance(version, dict) else {}
        self.data_version = int(self._version_doc.get("counter", 0))
        self.decode(raw)
        self._kept = {k: v for k, v in raw.items() if k not in self.encode()}

    def _payload(self) -> bytes:
        doc = {**self._kept, **self.encode()}
        if self.data_version != int(self._version_doc.get("counter", -1)):  # changed: RocketMQ's nextVersion()
            self._version_doc = {**self._version_doc, "counter": self.data_version, "timestamp": int(time.time() * 1000)}
        doc["dataVersion"] = self._version_doc
        # compact: json's C encoder serves only indent=None; indented, 12,500 topics took 20x as long
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    def persist(self) -> None:
        with self._write_lock:
            with self.lock:
                payload = self._payload()
                snapshot = self._changes
            write_atomic(self.path, payload, self._written, self.mode)
            self._written = True
            self._persisted = max(self._persisted, snapshot)

    def persist_change(self, change: int) -> None:
        """Return once change number ``change`` is on disk (writing it, unless a write that
        covers it got there first)."""
        if self._persisted >= change:
            return
        with self._write_lock:
            if self._persisted >= change:
                return
            with self.lock:
                payload = self._payload()
                snapshot = self._changes
            write_atomic(self.path, payload, self._written, self.mode)
            self._written = True
            self._persisted = snapshot

    def persist_if_dirty(self) -> None:
        if self.dirty:
            self.persist()

    def decode(self, raw: Any) -> None:
        raise NotImplementedError

    def encode(self) -> Any:
        raise NotImplementedError


@dataclass
class TopicConfig:
    name: str
    read_queue_nums: int = 8
    write_queue_nums: int = 8
    perm: int = PERM_READ | PERM_WRITE
    kept: dict[str, Any] | None = None  # fields RocketMQ wrote that we do not use (attributes, order), written back

    @property
    def message_type(self) -> str:
        """RocketMQ 5's ``message.type`` attribute (NORMAL, FIFO, DELAY, TRANSACTION, MIXED), or ''."""
        return str(((self.kept or {}).get("attributes") or {}).get(MESSAGE_TYPE_ATTRIBUTE, ""))

    def with_message_type(self, message_type: str) -> TopicConfig:
        kept = dict(self.kept or {})
        attributes = {k: v for k, v in (kept.get("attributes") or {}).items() if k != MESSAGE_TYPE_ATTRIBUTE}
        if message_type:
            attributes[MESSAGE_TYPE_ATTRIBUTE] = message_type
        kept["attributes"] = attributes
        return replace(self, kept=kept)

    def to_json(self) -> dict[str, Any]:
        return {
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": False,
            **(self.kept or {}),
            "topicName": self.name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TopicConfig:
        kept = {k: v for k, v in d.items() if k not in _TOPIC_FIELDS}
        return cls(d["topicName"], int(d.get("readQueueNums", 8)), int(d.get("writeQueueNums", 8)), int(d.get("perm", 6)), kept or None)


_TOPIC_FIELDS = frozenset({"topicName", "readQueueNums", "writeQueueNums", "perm"})


class TopicTable(JsonFile):
    """``topics.json``: topic → queue counts and permissions (RocketMQ's topicConfigTable)."""

    name = "topics.json"

    def __init__(self, config_dir: str):
        super().__init__(config_dir)
        self.topics: dict[str, TopicConfig] = {}

    def decode(self, raw: Any) -> None:
        table = raw.get("topicConfigTable", {})
        self.topics = {name: TopicConfig.from_json(d) for name, d in table.items()}

    def encode(self) -> Any:
        return {"topicConfigTable": {n: t.to_json() for n, t in sorted(self.topics.items())}}

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def put(self, cfg: TopicConfig) -> TopicConfig:
        """Durable on return; concurrent creations share one write (12,500 topics one by one
        would rewrite a growing file 12,500 times)."""
        with self.lock:
            self.topics = {**self.topics, cfg.name: cfg}  # replaced, never changed in place: readers iterate it unlocked
            self.data_version += 1
            change = self.changed()
        self.persist_change(change)
        return cfg

    def delete(self, topic: str) -> bool:
        with self.lock:
            gone = topic in self.topics
            if gone:
                self.topics = {n: t for n, t in self.topics.items() if n != topic}
                self.data_version += 1
                change = self.changed()
        if gone:
            self.persist_change(change)
        return gone


class ConsumerOffsets(JsonFile):
    """``consumerOffset.json``: ``"topic@group"`` → queue id → next offset to consume."""

    name = "consumerOffset.json"

    def __init__(self, config_dir: str):
        super().__init__(config_dir)
        self.table: dict[str, dict[int, int]] = {}

    def decode(self, raw: Any) -> None:
        table = raw.get("offsetTable", {})
        self.table = {k: {int(q): int(o) for q, o in v.items()} for k, v in table.items()}

    def encode(self) -> Any:
        return {"offsetTable": {k: {str(q): o for q, o in sorted(v.items())} for k, v in sorted(self.table.items())}}

    def commit(self, group: str, topic: str, queue_id: int, offset: int, durable: bool = False) -> None:
        """Record a group's next offset; ``durable`` returns only once it is on disk (a crash
        right after the acknowledgement must not send the group back)."""
        with self.lock:
            self.table.setdefault(f"{topic}@{group}", {})[queue_id] = offset
            change = self.changed()
        if durable:
            self.persist_change(change)

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """-1 when the group never committed for this queue."""
        with self.lock:
            return self.table.get(f"{topic}@{group}", {}).get(queue_id, -1)

    def groups_of(self, topic: str) -> list[str]:
        with self.lock:
            return sorted(k.split("@", 1)[1] for k in self.table if k.split("@", 1)[0] == topic)

    def offsets_of_group(self, group: str) -> dict[str, dict[int, int]]:
        """topic → queue → offset for one group."""
        with self.lock:
            out: dict[str, dict[int, int]] = {}
            for k, v in self.table.items():
                topic, _, g = k.partition("@")
                if g == group:
                    out[topic] = dict(v)
            return out

    def drop_topic(self, topic: str) -> None:
        with self.lock:
            for k in [k for k in self.table if k.split("@", 1)[0] == topic]:
                del self.table[k]
                self.changed()

    def drop_group(self, group: str) -> int:
        """Forget the group's positions in every topic; how many topics it had."""
        with self.lock:
            keys = [k for k in self.table if k.partition("@")[2] == group]
            for k in keys:
                del self.table[k]
            change = self.changed() if keys else 0
        if keys:
            self.persist_change(change)
        return len(keys)


class SubscriptionGroups(JsonFile):
    """``subscriptionGroup.json``: the consumer groups known to the store."""

    name = "subscriptionGroup.json"

    def __init__(self, config_dir: str):
        super().__init__(config_dir)
        self.groups: dict[str, dict[str, Any]] = {}

    def decode(self, raw: Any) -> None:
        self.groups = dict(raw.get("subscriptionGroupTable", {}))

    def encode(self) -> Any:
        return {"subscriptionGroupTable": dict(sorted(self.groups.items()))}

    def ensure(self, group: str) -> None:
        if group in self.groups:
            return
        with self.lock:
            self.groups[group] = {
                "groupName": group,
                "consumeEnable": True,
                "consumeFromMinEnable": True,
                "consumeBroadcastEnable": True,
                "retryQueueNums": 1,
                "retryMaxTimes": 16,
                "brokerId": 0,
                "whichBrokerWhenConsumeSlowly": 1,
            }
            self.data_version += 1
            self.changed()

    def delete(self, group: str) -> bool:
        """Forget the group's entry (its order and retry policy go back to the defaults)."""
        with self.lock:
            if group not in self.groups:
                return False
            del self.groups[group]
            self.data_version += 1
            change = self.changed()
        self.persist_change(change)
        return True


class PersistedConfig(JsonFile):
    """``store.json``: settings changed at run time, with their generation, so a restarted
    store comes back with what was last applied."""

    name = "store.json"

    def __init__(self, config_dir: str):
        super().__init__(config_dir)
        self.values: dict[str, Any] = {}
        self.generation = 0

    def decode(self, raw: Any) -> None:
        self.values = dict(raw.get("values", {}))
        self.generation = int(raw.get("generation", 0))

    def encode(self) -> Any:
        return {"values": dict(sorted(self.values.items())), "generation": self.generation}


_GROUP_RE = re.compile(r"^[A-Za-z0-9_%|-]{1,255}$")


def group_error(group: object) -> str | None:
    if not isinstance(group, str) or not group:
        return "group must be a non-empty string"
    if not _GROUP_RE.match(group):
        return "group may contain only A-Z a-z 0-9 _ % | - (at most 255)"
    return None
