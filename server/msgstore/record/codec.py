"""Commit-log record format (docs/store-format.md §2), byte-compatible with RocketMQ.

Everything that knows where a field sits inside a record lives here, so the commit log, the
dispatcher, recovery, the API and the Spark pipeline all decode through the same code.
"""

from __future__ import annotations

import functools
import ipaddress
import mmap
import os
import re
import socket
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    import numpy as np

from .crc import FOR_NATIVE as _crc_native
from .crc import crc32 as _crc32

_native: ModuleType | None
try:  # compiled hot loops (see _native.pyx); this module is their reference and fallback
    if os.environ.get("MSGSTORE_PURE_PYTHON") == "1":
        raise ImportError("pure Python requested")
    from . import _native  # type: ignore[attr-defined,no-redef]
except ImportError:
    _native = None

Buffer = bytes | bytearray | memoryview | mmap.mmap  # what records are read from and written as


class Batch(Protocol):
    """A batch of records for one queue, encoded but for its positions: :class:`PreparedBatch`,
    or its compiled twin ``_native.Prepared`` (the server transcodes SendRequests into those)."""

    topic: str
    queue_id: int
    total: int
    sizes: list[int]
    tags_codes: list[int]
    sys_flags: list[int]
    takes_offset: list[bool]
    key_hashes: list[int]
    key_owner: list[int]
    count_offsets: int
    wait_flush: bool

    def __len__(self) -> int: ...

    def finalize(self, queue_offset: int, phy_offset: int, store_ts: int) -> Any: ...


MAGIC_V1 = -626843481  # 0xDAA320A7 as a signed int
MAGIC_V2 = -626843477  # 0xDAA320AB
BLANK_MAGIC = -875286124  # 0xCBD43194
BLANK_SIZE = 8  # TOTALSIZE + MAGIC of the end-of-segment record

# SYSFLAG bits
FLAG_COMPRESSED = 0x1
FLAG_MULTI_TAGS = 0x2
TRANSACTION_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED = 0x4
TRANSACTION_COMMIT = 0x8
TRANSACTION_ROLLBACK = 0xC
FLAG_BORNHOST_V6 = 0x10
FLAG_STOREHOST_V6 = 0x20

PROP_KEYS = "KEYS"
PROP_TAGS = "TAGS"
PROP_UNIQ_KEY = "UNIQ_KEY"
PROP_WAIT = "WAIT"
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

MAX_PROPERTIES_LENGTH = 32767
MAX_TOPIC_LENGTH = 127
_TOPIC_RE = re.compile(r"^[A-Za-z0-9_%|-]{1,127}$")

# Offsets of the fixed fields (identical for every host layout up to BORNHOST).
OFF_TOTALSIZE = 0
OFF_MAGIC = 4
OFF_BODYCRC = 8
OFF_QUEUEID = 12
OFF_FLAG = 16
OFF_QUEUEOFFSET = 20
OFF_PHYOFFSET = 28
OFF_SYSFLAG = 36
OFF_BORNTIMESTAMP = 40
OFF_BORNHOST = 48
# Smallest legal record: IPv4 hosts, V1, empty body/properties, 1-byte topic.
MIN_RECORD_SIZE = 91 + 1

_S_INT = struct.Struct(">i")
_S_SIZE_MAGIC = struct.Struct(">ii")
_S_LONG = struct.Struct(">q")


def crc32(data: bytes | bytearray | memoryview) -> int:
    """BODYCRC as the reference computes it: zlib CRC-32 masked to a non-negative int."""
    return _crc32(data) & 0x7FFFFFFF


def jhash(s: str) -> int:
    """Java's ``String.hashCode``: the tagsCode in consume queues and the index key hash."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


@functools.lru_cache(maxsize=65536)
def tags_code(tags: str | None) -> int:
    """tagsCode of a consume-queue unit; tags repeat a lot, hence the cache."""
    return jhash(tags) if tags else 0


def jhash_many(strings: Sequence[str]) -> np.ndarray:
    """Vectorised ``jhash`` for a batch of keys (the index hashes every key of every record).

    The hash is sum(c_i * 31^(n-1-i)) mod 2^32, so with uint32 arithmetic it becomes one
    multiply and one segmented sum over all code units of the batch.
    """
    import numpy as np

    n = len(strings)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    joined = "".join(strings)
    units = np.frombuffer(joined.encode("utf-16-be"), dtype=">u2").astype(np.uint32)
    if len(units) == len(joined):
        lengths = np.fromiter((len(s) for s in strings), dtype=np.int64, count=n)
    else:  # astral characters take two UTF-16 code units
        lengths = np.fromiter((len(s.encode("utf-16-be")) // 2 for s in strings), dtype=np.int64, count=n)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    if len(units) == 0:
        return np.zeros(n, dtype=np.int32)
    pos = np.arange(len(units), dtype=np.int64)
    owner = np.repeat(np.arange(n), lengths)
    exponent = ends[owner] - 1 - pos
    pow31 = _pow31(int(lengths.max()))
    terms = units * pow31[exponent]
    sums = np.zeros(n, dtype=np.uint32)
    nonempty = lengths > 0
    if nonempty.any():
        sums[nonempty] = np.add.reduceat(terms, starts[nonempty], dtype=np.uint32)
    return sums.view(np.int32)


@functools.lru_cache(maxsize=8)
def _pow31_cached(n: int) -> np.ndarray:
    import numpy as np

    out = np.ones(n, dtype=np.uint32)
    for i in range(1, n):
        out[i] = (int(out[i - 1]) * 31) & 0xFFFFFFFF
    return out


def _pow31(max_len: int) -> np.ndarray:
    size = 64
    while size < max_len:
        size *= 4
    return _pow31_cached(size)


def index_hash(key: str) -> int:
    """abs(jhash) with Integer.MIN_VALUE mapped to 0, as the reference index does."""
    h = jhash(key)
    return 0 if h == -0x80000000 else abs(h)


def valid_topic(topic: str) -> bool:
    return bool(_TOPIC_RE.match(topic)) and len(topic.encode()) <= MAX_TOPIC_LENGTH


def topic_error(topic: object) -> str | None:
    """Why a topic name is illegal, or None; topics become directory names, so this is strict."""
    if not isinstance(topic, str) or not topic:
        return "topic must be a non-empty string"
    if len(topic.encode("utf-8", "surrogatepass")) > MAX_TOPIC_LENGTH:
        return f"topic is longer than {MAX_TOPIC_LENGTH} bytes"
    if not _TOPIC_RE.match(topic):
        return "topic may contain only A-Z a-z 0-9 _ % | -"
    return None


_GROUP_RE = re.compile(r"^[A-Za-z0-9_%|-]{1,255}$")


def group_error(group: object) -> str | None:
    """Why a consumer or producer group's name is illegal, or None (RocketMQ's character set)."""
    if not isinstance(group, str) or not _GROUP_RE.match(group):
        return "must be 1-255 characters of A-Z a-z 0-9 _ % | -"
    return None


_CLIENT_ID_RE = re.compile(r"^[\x21-\x7e]{1,255}$")


def client_id_error(client_id: object) -> str | None:
    """Why a consumer's client id is illegal, or None."""
    if not isinstance(client_id, str) or not _CLIENT_ID_RE.match(client_id):
        return "must be 1-255 printable ASCII characters without spaces"
    return None


# ---------------------------------------------------------------------------------------------
# properties


def properties_to_bytes(props: dict[str, str] | None) -> bytes:
    if not props:
        return b""
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode("utf-8")


def properties_error(props: dict[str, str] | None) -> str | None:
    """Names and values may not contain the two separators, or the record would not round-trip."""
    if not props:
        return None
    for k, v in props.items():
        if not isinstance(k, str) or not isinstance(v, str):
            return "property names and values must be strings"
        if not k:
            return "property name must not be empty"
        if "\x01" in k or "\x02" in k or "\x01" in v or "\x02" in v:
            return f"property {k!r} contains a separator character (\\x01 or \\x02)"
    return None


def parse_properties(data: bytes | str) -> dict[str, str]:
    """Inverse of :func:`properties_to_bytes`; drops pairs with an empty name or value."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = bytes(data).decode("utf-8", "replace")
    out: dict[str, str] = {}
    for pair in data.split("\x02"):
        name, sep, value = pair.partition("\x01")
        if sep and name and value:
            out[name] = value
    return out


def keys_of(props: dict[str, str]) -> list[str]:
    """Index keys of a record: its UNIQ_KEY and every non-empty word of KEYS."""
    keys = []
    uniq = props.get(PROP_UNIQ_KEY)
    if uniq:
        keys.append(uniq)
    k = props.get(PROP_KEYS)
    if k:
        keys.extend(w for w in k.split(" ") if w)
    return keys


# ---------------------------------------------------------------------------------------------
# hosts and message ids


def host_bytes(host: tuple[str, int]) -> bytes:
    """BORNHOST/STOREHOST: IPv4 4 B or IPv6 16 B, then the port as a 4-byte int."""
    ip, port = host
    try:
        packed = socket.inet_pton(socket.AF_INET, ip)
    except OSError:
        packed = socket.inet_pton(socket.AF_INET6, ip)
    return packed + _S_INT.pack(int(port))


def is_v6(host: tuple[str, int]) -> bool:
    return ":" in host[0]


def host_from_bytes(data: bytes) -> tuple[str, int]:
    ip = data[:-4]
    port = _S_INT.unpack(data[-4:])[0]
    fam = socket.AF_INET if len(ip) == 4 else socket.AF_INET6
    return socket.inet_ntop(fam, ip), port


def host_str(host: tuple[str, int]) -> str:
    ip, port = host
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def message_id(store_host: bytes, phy_offset: int) -> str:
    """Offset message id: upper-case hex of store IP | store port | phy offset."""
    return (store_host + _S_LONG.pack(phy_offset)).hex().upper()


def decode_message_id(msg_id: str) -> tuple[tuple[str, int], int]:
    """(store host, phy offset) of an offset message id; ValueError when malformed."""
    if len(msg_id) not in (32, 56):
        raise ValueError("message id must be 32 (IPv4) or 56 (IPv6) hex characters")
    raw = bytes.fromhex(msg_id)
    return host_from_bytes(raw[:-8]), _S_LONG.unpack(raw[-8:])[0]


def parse_host(text: str) -> tuple[str, int]:
    """'1.2.3.4:5' or '[::1]:5' → (ip, port); used for store hosts given on the command line."""
    if text.startswith("["):
        ip, _, port = text[1:].partition("]:")
    else:
        ip, _, port = text.rpartition(":")
    ipaddress.ip_address(ip)
    return ip, int(port)


# ---------------------------------------------------------------------------------------------
# messages


@dataclass(slots=True)
class Message:
    """A message as a producer hands it to the store."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    sys_flag: int = 0
    reconsume_times: int = 0
    prepared_txn_offset: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROP_TAGS)

    @property
    def keys(self) -> list[str]:
        return keys_of(self.properties)


class StoredMessage(NamedTuple):
    """A record decoded from the commit log, with every field of docs/store-format.md §2.

    A named tuple rather than a dataclass: pulls decode hundreds of thousands per second, and
    a tuple can be built in C without running a Python ``__init__``.
    """

    store_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    commitlog_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_txn_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]
    msg_id: str

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROP_TAGS)

    @property
    def keys(self) -> list[str]:
        return keys_of(self.properties)

    @property
    def user_keys(self) -> list[str]:
        k = self.properties.get(PROP_KEYS)
        return [w for w in k.split(" ") if w] if k else []


def transaction_type(sys_flag: int) -> int:
    return sys_flag & TRANSACTION_MASK


def takes_queue_offset(sys_flag: int) -> bool:
    """Prepared and rollback records get no consume-queue unit and QUEUEOFFSET 0."""
    t = sys_flag & TRANSACTION_MASK
    return t == TRANSACTION_NOT_TYPE or t == TRANSACTION_COMMIT


# ---------------------------------------------------------------------------------------------
# encoding

_HEADER_STRUCTS: dict[tuple[int, int], struct.Struct] = {}


def _header_struct(born_len: int, store_len: int) -> struct.Struct:
    """Fixed part from TOTALSIZE to BODYLENGTH for one host layout."""
    key = (born_len, store_len)
    s = _HEADER_STRUCTS.get(key)
    if s is None:
        s = struct.Struct(f">iiiiiqqiq{born_len}sq{store_len}siqi")
        _HEADER_STRUCTS[key] = s
    return s


def record_size(body_len: int, topic_len: int, props_len: int, sys_flag: int = 0, v2: bool = False) -> int:
    born = 20 if sys_flag & FLAG_BORNHOST_V6 else 8
    store = 20 if sys_flag & FLAG_STOREHOST_V6 else 8
    return 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born + 8 + store + 4 + 8 + 4 + body_len + (2 if v2 else 1) + topic_len + 2 + props_len


_HOST_BYTES: dict[tuple[str, int], bytes] = {}


def host_bytes_cached(host: tuple[str, int]) -> bytes:
    hb = _HOST_BYTES.get(host)
    if hb is None:
        if len(_HOST_BYTES) > 4096:
            _HOST_BYTES.clear()
        hb = _HOST_BYTES[host] = host_bytes(host)
    return hb


@functools.lru_cache(maxsize=4096)
def _tags_only_part(tag: str) -> bytes:
    pb = f"TAGS\x01{tag}\x02".encode()
    return len(pb).to_bytes(2, "big") + pb


class BatchError(ValueError):
    """A message of a batch that cannot be stored; ``status`` is the PutStatus name."""

    def __init__(self, status: str, reason: str, index: int):
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.index = index


class PreparedBatch:
    """Everything about a batch that does not depend on where it lands in the commit log.

    Built outside the append lock in one pass over the messages (validation, CRCs, encoded
    properties, sizes, dispatch fields); :meth:`encode` then only packs headers with the final
    queue offsets, phy offsets and store timestamp. The put path is bound by per-message Python
    work, so every message is touched as few times as possible.
    """

    __slots__ = (
        "topic",
        "topic_part",
        "queue_id",
        "v2",
        "bodies",
        "props_parts",
        "crcs",
        "flags",
        "sys_flags",
        "born_ts",
        "born_hosts",
        "reconsumes",
        "prepared",
        "sizes",
        "total",
        "tags_codes",
        "keys",
        "takes_offset",
        "wait_flush",
        "count_offsets",
        "uniform",
        "store_host",
        "key_hashes",
        "key_owner",
    )

    def __init__(
        self, topic: str, queue_id: int, msgs: Sequence[Message], store_host: bytes, now_ms: int, v2: bool = False, max_body: int = 1 << 62
    ):
        self.topic = topic
        self.store_host = store_host
        store_v6 = len(store_host) != 8
        self.queue_id = queue_id
        self.v2 = v2
        tb = topic.encode("utf-8")
        self.topic_part = topic_part = (len(tb).to_bytes(2 if v2 else 1, "big")) + tb
        store_len = 20 if store_v6 else 8
        store_flag = FLAG_STOREHOST_V6 if store_v6 else 0
        fixed = 72 + len(topic_part) + store_len
        bodies: list[bytes] = []
        self.bodies = bodies
        crcs: list[int] = []
        self.crcs = crcs
        flags: list[int] = []
        self.flags = flags
        sys_flags: list[int] = []
        self.sys_flags = sys_flags
        born_ts: list[int] = []
        self.born_ts = born_ts
        born_hosts: list[bytes] = []
        self.born_hosts = born_hosts
        reconsumes: list[int] = []
        self.reconsumes = reconsumes
        prepared: list[int] = []
        self.prepared = prepared
        props_parts: list[bytes] = []
        self.props_parts = props_parts
        tags_codes: list[int] = []
        self.tags_codes = tags_codes
        keys: list[list[str] | None] = []
        self.keys = keys
        sizes: list[int] = []
        self.sizes = sizes
        takes: list[bool] = []
        self.takes_offset = takes
        wait = True
        total = 0
        uniform = True  # all hosts IPv4 and no transactions: the fast encode path applies
        crc = _crc32
        for i, m in enumerate(msgs):
            body = m.body
            if m.topic != topic or m.queue_id != queue_id:
                raise BatchError("MESSAGE_ILLEGAL", "every message of a batch must have the batch's topic and queue id", i)
            if type(body) is not bytes:
                if not isinstance(body, (bytearray, memoryview)):
                    raise BatchError("MESSAGE_ILLEGAL", "body must be bytes", i)
                body = bytes(body)
            blen = len(body)
            if blen > max_body:
                raise BatchError("MESSAGE_ILLEGAL", f"body of {blen} bytes exceeds maxMessageSize {max_body}", i)
            bodies.append(body)
            crcs.append(crc(body) & 0x7FFFFFFF)
            p = m.properties
            if not p:
                part = b"\0\0"
                tags_codes.append(0)
                keys.append(None)
            elif len(p) == 1 and PROP_TAGS in p:
                tag = p[PROP_TAGS]
                if "\x01" in tag or "\x02" in tag or not isinstance(tag, str):
                    raise BatchError("MESSAGE_ILLEGAL", properties_error(p) or "bad TAGS", i)
                part = _tags_only_part(tag)
                tags_codes.append(tags_code(tag))
                keys.append(None)
            else:
                err = properties_error(p)
                if err:
                    raise BatchError("MESSAGE_ILLEGAL", err, i)
                pb = properties_to_bytes(p)
                if len(pb) > MAX_PROPERTIES_LENGTH:
                    raise BatchError("PROPERTIES_SIZE_EXCEEDED", f"properties of {len(pb)} bytes exceed {MAX_PROPERTIES_LENGTH}", i)
                part = len(pb).to_bytes(2, "big") + pb
                tags_codes.append(tags_code(p.get(PROP_TAGS)))
                keys.append(keys_of(p) if (PROP_KEYS in p or PROP_UNIQ_KEY in p) else None)
                if p.get(PROP_WAIT) == "false":
                    wait = False
            props_parts.append(part)
            flags.append(m.flag)
            born_ts.append(m.born_timestamp or now_ms)
            bh = host_bytes_cached(m.born_host)
            born_hosts.append(bh)
            sf = m.sys_flag
            if sf or len(bh) != 8:
                sf = (sf & ~(FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6)) | (FLAG_BORNHOST_V6 if len(bh) != 8 else 0)
                uniform = False
            sf |= store_flag
            sys_flags.append(sf)
            t = sf & TRANSACTION_MASK
            takes.append(t == TRANSACTION_NOT_TYPE or t == TRANSACTION_COMMIT)
            reconsumes.append(m.reconsume_times)
            prepared.append(m.prepared_txn_offset)
            size = fixed + len(bh) + blen + len(part)
            sizes.append(size)
            total += size
        self.total = total
        self.wait_flush = wait
        self.uniform = uniform and not store_v6
        self.count_offsets = len(bodies) if self.uniform else sum(takes)
        self.key_hashes: list[int] = []
        self.key_owner: list[int] = []
        if any(k is not None for k in keys):
            flat = [(i, f"{topic}#{k}") for i, ks in enumerate(keys) if ks for k in ks]
            self.key_owner = [i for i, _ in flat]
            self.key_hashes = [0 if h == -0x80000000 else abs(h) for h in jhash_many([k for _, k in flat]).tolist()]

    def __len__(self) -> int:
        return len(self.bodies)

    def finalize(self, queue_offset: int, phy_offset: int, store_ts: int) -> bytearray:
        """The records with their final positions (called inside the append lock)."""
        return self.encode(queue_offset, phy_offset, store_ts, self.store_host)

    def encode(self, queue_offset: int, phy_offset: int, store_ts: int, store_host: bytes) -> bytearray:
        parts: list[bytes] = []
        append = parts.append
        topic_part = self.topic_part
        magic = MAGIC_V2 if self.v2 else MAGIC_V1
        qid = self.queue_id
        phy = phy_offset
        bodies, crcs, flags, sys_flags = self.bodies, self.crcs, self.flags, self.sys_flags
        born_ts, born_hosts, reconsumes, prepared = self.born_ts, self.born_hosts, self.reconsumes, self.prepared
        props = self.props_parts
        if self.uniform:
            pack = _header_struct(8, 8).pack
            for i, size in enumerate(self.sizes):
                body = bodies[i]
                append(
                    pack(
                        size,
                        magic,
                        crcs[i],
                        qid,
                        flags[i],
                        queue_offset + i,
                        phy,
                        sys_flags[i],
                        born_ts[i],
                        born_hosts[i],
                        store_ts,
                        store_host,
                        reconsumes[i],
                        prepared[i],
                        len(body),
                    )
                )
                append(body)
                append(topic_part)
                append(props[i])
                phy += size
            return bytearray(b"".join(parts))
        store_len = len(store_host)
        qoff = queue_offset
        takes = self.takes_offset
        for i, size in enumerate(self.sizes):
            born = born_hosts[i]
            body = bodies[i]
            append(
                _header_struct(len(born), store_len).pack(
                    size,
                    magic,
                    crcs[i],
                    qid,
                    flags[i],
                    qoff if takes[i] else 0,
                    phy,
                    sys_flags[i],
                    born_ts[i],
                    born,
                    store_ts,
                    store_host,
                    reconsumes[i],
                    prepared[i],
                    len(body),
                )
            )
            append(body)
            append(topic_part)
            append(props[i])
            if takes[i]:
                qoff += 1
            phy += size
        return bytearray(b"".join(parts))


def prepare_batch(
    topic: str, queue_id: int, msgs: Sequence[Message], store_host: bytes, now_ms: int, max_body: int = 1 << 62, v2: bool = False
) -> Batch:
    """A prepared batch (compiled when available); raises :class:`BatchError`."""
    if _native is not None:
        batch: Batch = _native.prepare(
            list(msgs), topic, queue_id, store_host, now_ms, max_body, v2, _crc_native, host_bytes_cached, BatchError
        )
        return batch
    return PreparedBatch(topic, queue_id, msgs, store_host, now_ms, v2, max_body)


def encode_message(msg: Message, queue_offset: int, phy_offset: int, store_ts: int, store_host: tuple[str, int], v2: bool = False) -> bytes:
    """One record, for tests and tools; the store itself goes through :func:`prepare_batch`."""
    batch = prepare_batch(msg.topic, msg.queue_id, [msg], host_bytes(store_host), msg.born_timestamp or store_ts, v2=v2)
    return bytes(batch.finalize(queue_offset, phy_offset, store_ts))


def blank_record(remaining: int) -> bytes:
    return _S_SIZE_MAGIC.pack(remaining, BLANK_MAGIC)


# ---------------------------------------------------------------------------------------------
# decoding


class RecordLayout:
    """Offsets of the variable-position fields of one record, derived from its SYSFLAG/MAGIC."""

    __slots__ = (
        "born_len",
        "store_len",
        "off_store_ts",
        "off_store_host",
        "off_reconsume",
        "off_prepared",
        "off_body_len",
        "topic_len_size",
    )

    def __init__(self, sys_flag: int, magic: int):
        self.born_len = 20 if sys_flag & FLAG_BORNHOST_V6 else 8
        self.store_len = 20 if sys_flag & FLAG_STOREHOST_V6 else 8
        self.off_store_ts = OFF_BORNHOST + self.born_len
        self.off_store_host = self.off_store_ts + 8
        self.off_reconsume = self.off_store_host + self.store_len
        self.off_prepared = self.off_reconsume + 4
        self.off_body_len = self.off_prepared + 8
        self.topic_len_size = 2 if magic == MAGIC_V2 else 1


_LAYOUTS: dict[tuple[int, int], RecordLayout] = {}


def layout(sys_flag: int, magic: int) -> RecordLayout:
    key = (sys_flag & (FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6), magic)
    lay = _LAYOUTS.get(key)
    if lay is None:
        lay = _LAYOUTS[key] = RecordLayout(sys_flag, magic)
    return lay


_S_FIXED = struct.Struct(">iiiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP


def decode(buf: Buffer, pos: int = 0, *, with_body: bool = True) -> StoredMessage:
    """Decode one record starting at ``pos`` (no CRC check; see :func:`check`)."""
    size, magic, crc, qid, flag, qoff, phy, sysflag, born_ts = _S_FIXED.unpack_from(buf, pos)
    lay = layout(sysflag, magic)
    born = host_from_bytes(bytes(buf[pos + OFF_BORNHOST : pos + OFF_BORNHOST + lay.born_len]))
    store_ts = _S_LONG.unpack_from(buf, pos + lay.off_store_ts)[0]
    store_raw = bytes(buf[pos + lay.off_store_host : pos + lay.off_store_host + lay.store_len])
    reconsume = _S_INT.unpack_from(buf, pos + lay.off_reconsume)[0]
    prepared = _S_LONG.unpack_from(buf, pos + lay.off_prepared)[0]
    body_len = _S_INT.unpack_from(buf, pos + lay.off_body_len)[0]
    p = pos + lay.off_body_len + 4
    body = bytes(buf[p : p + body_len]) if with_body else b""
    p += body_len
    tlen = int.from_bytes(buf[p : p + lay.topic_len_size], "big")
    p += lay.topic_len_size
    topic = bytes(buf[p : p + tlen]).decode("utf-8", "replace")
    p += tlen
    plen = int.from_bytes(buf[p : p + 2], "big")
    props = parse_properties(bytes(buf[p + 2 : p + 2 + plen])) if plen else {}
    return StoredMessage(
        size,
        magic,
        crc,
        qid,
        flag,
        qoff,
        phy,
        sysflag,
        born_ts,
        born,
        store_ts,
        host_from_bytes(store_raw),
        reconsume,
        prepared,
        body,
        topic,
        props,
        message_id(store_raw, phy),
    )


def decode_records(data: bytes | memoryview) -> list[StoredMessage]:
    """Consecutive whole records (a raw pull's ``records``) as messages; compiled when available."""
    if _native is not None:
        decoded: list[StoredMessage] = _native.decode_records(data, StoredMessage, _HOSTS, host_from_bytes)
        return decoded
    out = []
    pos = 0
    n = len(data)
    while pos < n:
        m = decode(data, pos)
        out.append(m)
        pos += m.store_size
    return out


_HOSTS: dict[bytes, tuple[str, int]] = {}  # host bytes → (address, port), shared by every decode


def store_timestamp_of(buf: Buffer, pos: int = 0) -> int:
    sysflag = _S_INT.unpack_from(buf, pos + OFF_SYSFLAG)[0]
    off = OFF_BORNHOST + (20 if sysflag & FLAG_BORNHOST_V6 else 8)
    ts: int = _S_LONG.unpack_from(buf, pos + off)[0]
    return ts


def check(buf: Buffer, pos: int, limit: int, check_crc: bool) -> tuple[int, bool]:
    """docs/store-format.md §2 record validation → (size, ok).

    (-1, False) unreadable / bad magic / bad CRC; (0, True) BLANK; (TOTALSIZE, False) when the
    recomputed length disagrees; (TOTALSIZE, True) for a good record.
    """
    remaining = limit - pos
    if remaining <= 4:
        return -1, False
    if remaining < 8:
        return -1, False
    total, magic = _S_SIZE_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC:
        return 0, True
    if magic != MAGIC_V1 and magic != MAGIC_V2:
        return -1, False
    if total > remaining or total < MIN_RECORD_SIZE:
        return -1, False
    sysflag = _S_INT.unpack_from(buf, pos + OFF_SYSFLAG)[0]
    lay = layout(sysflag, magic)
    if lay.off_body_len + 4 > total:  # a damaged SYSFLAG can claim hosts the record has no room for
        return total, False
    body_len = _S_INT.unpack_from(buf, pos + lay.off_body_len)[0]
    p = pos + lay.off_body_len + 4
    if body_len < 0 or p + body_len + lay.topic_len_size > pos + total:
        return total, False
    if check_crc:
        body_crc = _S_INT.unpack_from(buf, pos + OFF_BODYCRC)[0]
        if _crc32(buf[p : p + body_len]) & 0x7FFFFFFF != body_crc:
            return -1, False
    p += body_len
    tlen = int.from_bytes(buf[p : p + lay.topic_len_size], "big")
    p += lay.topic_len_size + tlen
    if p + 2 > pos + total:
        return total, False
    plen = int.from_bytes(buf[p : p + 2], "big")
    expected = p + 2 + plen - pos
    if expected != total:
        return total, False
    return total, True


@dataclass(slots=True)
class DispatchRecord:
    """What the dispatcher needs of one record: CQ unit fields and index keys."""

    phy_offset: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    tags_code: int
    store_timestamp: int
    sys_flag: int
    keys: list[str] | None


def dispatch_record(buf: Buffer, pos: int, phy_offset: int) -> DispatchRecord:
    """Decode only the fields dispatch uses (no body copy)."""
    size, magic, _crc, qid, _flag, qoff, _phy, sysflag, _born = _S_FIXED.unpack_from(buf, pos)
    lay = layout(sysflag, magic)
    store_ts = _S_LONG.unpack_from(buf, pos + lay.off_store_ts)[0]
    body_len = _S_INT.unpack_from(buf, pos + lay.off_body_len)[0]
    p = pos + lay.off_body_len + 4 + body_len
    tlen = int.from_bytes(buf[p : p + lay.topic_len_size], "big")
    p += lay.topic_len_size
    topic = bytes(buf[p : p + tlen]).decode("utf-8", "replace")
    p += tlen
    plen = int.from_bytes(buf[p : p + 2], "big")
    tcode = 0
    keys = None
    if plen:
        raw = bytes(buf[p + 2 : p + 2 + plen])
        if b"TAGS\x01" in raw or b"KEYS\x01" in raw or b"UNIQ_KEY\x01" in raw:
            props = parse_properties(raw)
            tcode = tags_code(props.get(PROP_TAGS))
            k = keys_of(props)
            keys = k or None
    return DispatchRecord(phy_offset, size, topic, qid, qoff, tcode, store_ts, sysflag, keys)


class Columns:
    """Dispatch fields of a run of records as numpy arrays (what scanning produces).

    ``topic_ids`` index ``topic_names``; ``key_owner`` gives the record of each key hash.
    """

    __slots__ = (
        "phys",
        "sizes",
        "topic_ids",
        "queue_ids",
        "queue_offsets",
        "tags_codes",
        "store_timestamps",
        "sys_flags",
        "key_hashes",
        "key_owner",
        "topic_names",
    )

    def __init__(self, capacity: int, key_capacity: int):
        import numpy as np

        self.phys = np.empty(capacity, np.int64)
        self.sizes = np.empty(capacity, np.int32)
        self.topic_ids = np.empty(capacity, np.int32)
        self.queue_ids = np.empty(capacity, np.int32)
        self.queue_offsets = np.empty(capacity, np.int64)
        self.tags_codes = np.empty(capacity, np.int64)
        self.store_timestamps = np.empty(capacity, np.int64)
        self.sys_flags = np.empty(capacity, np.int32)
        self.key_hashes = np.empty(key_capacity, np.int64)
        self.key_owner = np.empty(key_capacity, np.int64)
        self.topic_names: list[str] = []

    def trim(self, count: int, key_count: int) -> Columns:
        for name in self.__slots__[:8]:
            setattr(self, name, getattr(self, name)[:count])
        self.key_hashes = self.key_hashes[:key_count]
        self.key_owner = self.key_owner[:key_count]
        return self

    def topic(self, i: int) -> str:
        name: str = self.topic_names[self.topic_ids[i]]
        return name

    def __len__(self) -> int:
        return len(self.phys)


def scan_records(
    buf: Buffer, start: int, limit: int, check_crc: bool, base_phy: int, max_records: int = 4096
) -> tuple[Columns, int, str, int]:
    """Walk records from ``start`` → (columns, next_pos, stop, bad_size).

    ``stop`` is 'limit' (reached ``limit`` or ``max_records``), 'blank' (a BLANK record at
    next_pos) or 'bad' (next_pos is the first bad record; ``bad_size`` is its TOTALSIZE when
    only the length disagreed, else -1).
    """
    cols = Columns(max_records, max_records * 4)
    if _native is not None:
        native_ids: dict[bytes, int] = {}
        n, nk, pos, stop, bad = _native.scan(
            buf,
            start,
            limit,
            check_crc,
            _crc_native,
            base_phy,
            cols.phys,
            cols.sizes,
            cols.topic_ids,
            cols.queue_ids,
            cols.queue_offsets,
            cols.tags_codes,
            cols.store_timestamps,
            cols.sys_flags,
            cols.key_hashes,
            cols.key_owner,
            native_ids,
            cols.topic_names,
        )
        return cols.trim(n, nk), pos, stop, bad
    pos = start
    n = nk = 0
    stop, bad = "limit", -1
    ids: dict[str, int] = {}
    while pos < limit and n < max_records:
        size, ok = check(buf, pos, limit, check_crc)
        if ok and size == 0:
            stop = "blank"
            break
        if not ok:
            stop, bad = "bad", size
            break
        r = dispatch_record(buf, pos, base_phy + pos)
        keys = r.keys or []
        if nk + len(keys) > len(cols.key_hashes):
            break
        tid = ids.get(r.topic)
        if tid is None:
            tid = ids[r.topic] = len(cols.topic_names)
            cols.topic_names.append(r.topic)
        for k in keys:
            cols.key_hashes[nk] = index_hash(f"{r.topic}#{k}")
            cols.key_owner[nk] = n
            nk += 1
        cols.phys[n] = r.phy_offset
        cols.sizes[n] = r.size
        cols.topic_ids[n] = tid
        cols.queue_ids[n] = r.queue_id
        cols.queue_offsets[n] = r.queue_offset
        cols.tags_codes[n] = r.tags_code
        cols.store_timestamps[n] = r.store_timestamp
        cols.sys_flags[n] = r.sys_flag
        n += 1
        pos += size
    return cols.trim(n, nk), pos, stop, bad


def iter_records(buf: Buffer, start: int, limit: int, check_crc: bool = False) -> Iterable[tuple[int, int, bool]]:
    """Walk records from ``start``; yields (pos, size, ok) and stops after BLANK or a bad record."""
    pos = start
    while True:
        size, ok = check(buf, pos, limit, check_crc)
        yield pos, size, ok
        if not ok or size <= 0:
            return
        pos += size
