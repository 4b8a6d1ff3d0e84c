"""apache.rocketmq.v2 messages ↔ the store's: what a RocketMQ 5 client sends becomes a
msgstore.v1 SendEntry (so both protocols store the same bytes, RocketMQ's properties
included), and a stored message becomes the Message a RocketMQ 5 client decodes.

RocketMQ 5 names a message by the id its client made (``system_properties.message_id``); it
is stored as ``UNIQ_KEY`` as RocketMQ's proxy does, so `msgstore query --key` and the key
index find it. A stored message without one (sent by our client without a uniq_key) is named
by its offset message id.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from ...broker.fifo import PROP_MESSAGE_GROUP
from ...broker.pop import (
    PROP_DLQ_ORIGIN_MESSAGE_ID,
    PROP_DLQ_ORIGIN_TOPIC,
    PROP_ORIGIN_MESSAGE_ID,
    PROP_RETRY_GROUP,
    PROP_RETRY_TOPIC,
)
from ...broker.system_topics import (
    PROP_DELAY,
    PROP_TIMER_DEL_UNIQKEY,
    PROP_TIMER_DELAY_MS,
    PROP_TIMER_DELAY_SEC,
    PROP_TIMER_DELIVER_MS,
    PROP_TIMER_OUT_MS,
    SCHEDULING_PROPERTIES,
)
from ...broker.transactions import PROP_HALF_OFFSET, PROP_PRODUCER_GROUP, PROP_TRANSACTION_PREPARED
from ...record import codec
from ...v1 import msgstore_pb2 as pb
from .protocol import definition as d
from .status import Refusal

# Properties the store or RocketMQ set themselves: never a user property, in either direction
# (RocketMQ's MessageConst reserves these names too).
SYSTEM_PROPERTIES = frozenset(
    {
        codec.PROP_KEYS,
        codec.PROP_TAGS,
        codec.PROP_UNIQ_KEY,
        codec.PROP_WAIT,
        *SCHEDULING_PROPERTIES,
        PROP_TIMER_OUT_MS,
        PROP_TIMER_DEL_UNIQKEY,
        PROP_MESSAGE_GROUP,
        PROP_TRANSACTION_PREPARED,
        PROP_PRODUCER_GROUP,
        PROP_HALF_OFFSET,
        PROP_RETRY_TOPIC,
        PROP_ORIGIN_MESSAGE_ID,
        PROP_DLQ_ORIGIN_TOPIC,
        PROP_DLQ_ORIGIN_MESSAGE_ID,
        PROP_RETRY_GROUP,
        "MIN_OFFSET",
        "MAX_OFFSET",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "TRANSACTION_CHECK_TIMES",
        "CHECK_IMMUNITY_TIME_IN_SECONDS",
        "__STARTDELIVERTIME",
        "CONSUME_START_TIME",
        "MSG_REGION",
        "TRACE_ON",
        "INNER_NUM",
        "INNER_BASE",
        "POP_CK",
        "1ST_POP_TIME",
    }
)
_MESSAGE_ID = re.compile(r"^[0-9A-Fa-f]{1,128}$")
_TAG_BAD = ("|", "\x00", "\x01", "\x02")
SEPARATORS = "holds \\x01 or \\x02 (the record's separators)"
MAX_KEYS = 32
COMPRESSION_TYPE = 0x7 << 8  # RocketMQ's sys flag bits naming a compressed record's codec
COMPRESSION_ZLIB = 0x3 << 8  # (0: zlib too, before the bits existed; LZ4 and ZSTD are left as stored)
MAX_STORED_BODY = 64 * 1024 * 1024
SECONDS_THAT_ARE_MS = 10**11  # a Timestamp this many seconds out (year 5138) holds milliseconds


def _ms(ts: Timestamp) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def _ts(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def send_entry(m: Any, i: int, topic: str, queue_id: int, max_body: int, max_delay_ms: int, now_ms: int) -> pb.SendEntry:
    """One v2 Message → a v1 SendEntry, or a :class:`Refusal` with the code StatusCode.md
    gives and the field named."""
    sp = m.system_properties
    field = f"messages[{i}]"
    if not m.body:
        raise Refusal(d.MESSAGE_BODY_EMPTY, f"{field}.body: must not be empty")
    if len(m.body) > max_body:
        raise Refusal(d.MESSAGE_BODY_TOO_LARGE, f"{field}.body: {len(m.body)} bytes, over the {max_body} this store takes")
    if not _MESSAGE_ID.match(sp.message_id):
        raise Refusal(d.ILLEGAL_MESSAGE_ID, f"{field}.system_properties.message_id: 1-128 hex characters, got {sp.message_id[:40]!r}")
    entry = pb.SendEntry(topic=topic, queue_id=queue_id, body=_plain_body(m, field, max_body), uniq_key=sp.message_id)
    if sp.HasField("tag"):
        if not sp.tag.strip() or any(c in sp.tag for c in _TAG_BAD):
            raise Refusal(
                d.ILLEGAL_MESSAGE_TAG, f"{field}.system_properties.tag: must be non-blank, without '|' or \\x00-\\x02, got {sp.tag[:40]!r}"
            )
        entry.tags = sp.tag
    if len(sp.keys) > MAX_KEYS:
        raise Refusal(d.ILLEGAL_MESSAGE_KEY, f"{field}.system_properties.keys: at most {MAX_KEYS} keys, got {len(sp.keys)}")
    for k, key in enumerate(sp.keys):
        if not key.strip() or " " in key or "\x01" in key or "\x02" in key:
            raise Refusal(
                d.ILLEGAL_MESSAGE_KEY,
                f"{field}.system_properties.keys[{k}]: must be non-blank, without spaces or \\x01-\\x02, got {key[:40]!r}",
            )
    entry.keys.extend(sp.keys)
    for name, value in m.user_properties.items():
        if not name or name in SYSTEM_PROPERTIES or any(c in name for c in ("\x01", "\x02")):
            why = "is empty" if not name else "is reserved" if name in SYSTEM_PROPERTIES else SEPARATORS
            raise Refusal(d.ILLEGAL_MESSAGE_PROPERTY_KEY, f"{field}.user_properties: the name {name[:40]!r} {why}")
        if any(c in value for c in ("\x01", "\x02")):
            raise Refusal(
                d.BAD_REQUEST,  # (StatusCode.md has no code for a property value)
                f"{field}.user_properties[{name[:40]!r}]: the value {SEPARATORS}",
            )
        entry.properties[name] = value
    kind = sp.message_type
    if sp.HasField("born_timestamp") and 0 < sp.born_timestamp.seconds < SECONDS_THAT_ARE_MS:
        entry.born_timestamp = _ms(sp.born_timestamp)
    has_group = sp.HasField("message_group") and sp.message_group != ""
    has_time = sp.HasField("delivery_timestamp")
    conflict = {
        d.NORMAL: has_group or has_time,
        d.FIFO: not has_group or has_time,
        d.DELAY: not has_time or has_group,
        d.TRANSACTION: has_group or has_time,
    }
    if kind not in conflict:
        name = d.MessageType.Name(kind) if kind in d.MessageType.values() else str(kind)
        raise Refusal(d.BAD_REQUEST, f"{field}.system_properties.message_type: {name} is not supported here")
    if conflict[kind]:
        raise Refusal(
            d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"{field}.system_properties: a {d.MessageType.Name(kind)} message "
            + {
                d.NORMAL: "has neither message_group nor delivery_timestamp",
                d.FIFO: "needs message_group and no delivery_timestamp",
                d.DELAY: "needs delivery_timestamp and no message_group",
                d.TRANSACTION: "has neither message_group nor delivery_timestamp",
            }[kind],
        )
    if has_group:
        if len(sp.message_group) > 128:
            raise Refusal(
                d.ILLEGAL_MESSAGE_GROUP, f"{field}.system_properties.message_group: 1-128 characters, not {len(sp.message_group)}"
            )
        if any(c in sp.message_group for c in ("\x00", "\x01", "\x02")):
            raise Refusal(
                d.ILLEGAL_MESSAGE_GROUP, f"{field}.system_properties.message_group: must hold no \\x00-\\x02, got {sp.message_group[:40]!r}"
            )
        entry.properties[PROP_MESSAGE_GROUP] = sp.message_group
    if has_time:
        at = _ms(sp.delivery_timestamp)
        if sp.delivery_timestamp.seconds > SECONDS_THAT_ARE_MS:
            # rocketmq-python-client 5.1.2 documents delivery_timestamp in ms and sends that
            # number as the Timestamp's seconds: taken as the ms it meant
            at = sp.delivery_timestamp.seconds
        if at - now_ms > max_delay_ms:
            raise Refusal(
                d.ILLEGAL_DELIVERY_TIME,
                f"{field}.system_properties.delivery_timestamp: {at - now_ms} ms ahead, over timerMaxDelaySec ({max_delay_ms // 1000} s)",
            )
        entry.properties[PROP_TIMER_DELIVER_MS] = str(max(at, 1))
    if kind == d.TRANSACTION:
        entry.properties[PROP_TRANSACTION_PREPARED] = "true"
        entry.properties[PROP_PRODUCER_GROUP] = producer_group(topic)
    return entry


def compressed(m: Any) -> bool:
    return bool(m.system_properties.body_encoding == d.GZIP)


def _plain_body(m: Any, field: str, max_body: int) -> bytes:
    """The body as stored: a GZIP-encoded one (RocketMQ's Java client compresses large bodies)
    is stored uncompressed, so every consumer of either protocol reads the same bytes."""
    encoding = m.system_properties.body_encoding
    if encoding in (d.ENCODING_UNSPECIFIED, d.IDENTITY):
        return bytes(m.body)
    if encoding != d.GZIP:
        raise Refusal(d.BAD_REQUEST, f"{field}.system_properties.body_encoding: {encoding} is not one this store knows")
    body = inflate(m.body, max_body, wbits=31)
    if body is None:
        raise Refusal(d.MESSAGE_BODY_TOO_LARGE, f"{field}.body: over {max_body} bytes once uncompressed")
    if isinstance(body, str):
        raise Refusal(d.MESSAGE_CORRUPTED, f"{field}.body: not one whole GZIP stream ({body})")
    if not body:
        raise Refusal(d.MESSAGE_BODY_EMPTY, f"{field}.body: empty once uncompressed")
    return body


def inflate(data: bytes, limit: int, wbits: int) -> bytes | str | None:
    """``data`` uncompressed: None when over ``limit`` bytes, a reason when it is not one whole
    stream (cut short, damaged, or followed by more)."""
    d_obj = zlib.decompressobj(wbits=wbits)
    try:
        body = d_obj.decompress(data, limit + 1)
    except zlib.error as e:
        return str(e)
    if len(body) > limit or d_obj.unconsumed_tail:
        return None
    if not d_obj.eof or d_obj.unused_data:
        return "cut short" if not d_obj.eof else "more than one stream"
    return body


def producer_group(topic: str) -> str:
    """RocketMQ 5 producers have no group: check-backs go to a producer publishing the topic
    (as RocketMQ's proxy does), so the topic stands for the group."""
    return topic


def _scheduled(props: dict[str, str]) -> bool:
    """Sent with a delivery time (a retry also passes through the timer: it is not)."""
    return PROP_RETRY_TOPIC not in props and any(
        p in props for p in (PROP_TIMER_OUT_MS, PROP_TIMER_DELIVER_MS, PROP_TIMER_DELAY_MS, PROP_TIMER_DELAY_SEC, PROP_DELAY)
    )


def message_type(props: dict[str, str]) -> int:
    if props.get(PROP_TRANSACTION_PREPARED) == "true" or PROP_HALF_OFFSET in props:
        return d.TRANSACTION
    if props.get(PROP_MESSAGE_GROUP):
        return d.FIFO
    if _scheduled(props):
        return d.DELAY
    return d.NORMAL


def to_v2(m: pb.Message, topic: str | None = None) -> Any:
    """A stored message (as msgstore.v1 gives it) → an apache.rocketmq.v2 Message."""
    props = dict(m.properties)
    body = m.body
    if m.sys_flag & codec.FLAG_COMPRESSED and m.sys_flag & COMPRESSION_TYPE in (0, COMPRESSION_ZLIB):
        plain = inflate(body, MAX_STORED_BODY, wbits=15)  # written by a RocketMQ 4 client (zlib): delivered as sent
        if isinstance(plain, bytes):
            body = plain  # (otherwise as stored: the digest matches what is sent)
    out = d.Message(body=body)
    out.topic.name = topic or m.topic
    for k, v in props.items():
        if k not in SYSTEM_PROPERTIES:
            out.user_properties[k] = v
    sp = out.system_properties
    if m.tags:
        sp.tag = m.tags
    sp.keys.extend(m.keys)
    sp.message_id = props.get(codec.PROP_UNIQ_KEY) or m.msg_id
    sp.body_digest.type = d.CRC32
    sp.body_digest.checksum = format(zlib.crc32(body) & 0xFFFFFFFF, "08X")
    sp.body_encoding = d.IDENTITY
    sp.message_type = message_type(props)
    sp.born_timestamp.CopyFrom(_ts(m.born_timestamp))
    sp.born_host = m.born_host.rsplit(":", 1)[0]
    sp.store_timestamp.CopyFrom(_ts(m.store_timestamp))
    sp.store_host = m.store_host
    sp.queue_id = m.queue_id
    sp.queue_offset = m.queue_offset
    deliver = props.get(PROP_TIMER_OUT_MS) or props.get(PROP_TIMER_DELIVER_MS)  # (delivered: the time it was due)
    if deliver and deliver.isdigit() and _scheduled(props):
        sp.delivery_timestamp.CopyFrom(_ts(int(deliver)))
    if props.get(PROP_MESSAGE_GROUP):
        sp.message_group = props[PROP_MESSAGE_GROUP]
    if props.get(PROP_DLQ_ORIGIN_TOPIC):
        sp.dead_letter_queue.topic = props[PROP_DLQ_ORIGIN_TOPIC]
        sp.dead_letter_queue.message_id = props.get(PROP_DLQ_ORIGIN_MESSAGE_ID, "")
    return out


def received(r: pb.ReceivedMessage, invisible_ms: int) -> Any:
    """A delivery (msgstore.v1 Receive) → the v2 Message with its receipt and attempt."""
    out = to_v2(r.message)
    sp = out.system_properties
    sp.receipt_handle = r.receipt_handle
    sp.delivery_attempt = r.attempt
    sp.invisible_duration.FromMilliseconds(invisible_ms)
    # a retry names the message it retries (RocketMQ 5 clients show the original's id)
    origin = r.message.properties.get(PROP_ORIGIN_MESSAGE_ID)
    if origin:
        sp.message_id = origin
    return out
