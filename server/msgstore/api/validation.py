"""Request checks that turn bad input into INVALID_ARGUMENT naming the field.

The limits are the ones stated in ``proto/msgstore/v1/msgstore.proto``.
"""

from __future__ import annotations

import grpc
from google.protobuf.message import DecodeError

from ..acl.identity import Denied, NotReady
from ..broker.system_topics import is_store_topic
from ..record import codec
from ..record.selector import Selector, SelectorError, compile_selector
from ..wire.varint import read_varint

MAX_REQUEST_BYTES = 64 * 1024 * 1024
MAX_BATCH = 10_000
MAX_PULL_MESSAGES = 1024
DEFAULT_PULL_MESSAGES = 32
MAX_PULL_BYTES = 64 * 1024 * 1024
DEFAULT_PULL_BYTES = 4 * 1024 * 1024
MAX_TIMEOUT_MS = 60_000
MAX_QUERY_RESULTS = 64
DEFAULT_QUERY_RESULTS = 32


class BadRequest:
    """Stands in for a request that did not deserialize (its reason names what is wrong)."""

    def __init__(self, reason: str):
        self.reason = reason


class InvalidArgument(ValueError):
    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field


def refusal(e: InvalidArgument | TopicNotFound | Denied | NotReady) -> tuple[grpc.StatusCode, str]:
    """The status and details a refused request answers with, on every msgstore.v1 path (a
    call, a stream's request, the caller's check before either)."""
    if isinstance(e, InvalidArgument):
        return grpc.StatusCode.INVALID_ARGUMENT, str(e)
    if isinstance(e, TopicNotFound):
        return grpc.StatusCode.NOT_FOUND, str(e)
    if isinstance(e, NotReady):
        return grpc.StatusCode.UNAVAILABLE, str(e)
    return (grpc.StatusCode.UNAUTHENTICATED if e.unauthenticated else grpc.StatusCode.PERMISSION_DENIED), e.message


def check_filter(tag_filter: str, sql_filter: str, enabled: bool, field: str = "sql_filter") -> str | Selector | None:
    """What a read filters by: a tag expression, a compiled SQL92 selector, or None (every
    message). InvalidArgument naming the field (and the column of a selector's error)."""
    if not sql_filter:
        return tag_filter or None
    if tag_filter.strip() not in ("", "*"):
        raise InvalidArgument(field, "give a tag filter or a SQL92 selector, not both (a selector can test tags: TAGS IN ('a', 'b'))")
    if not enabled:
        raise InvalidArgument(field, "SQL92 selectors are off on this store (enablePropertyFilter is false): filter by tag, or set it")
    try:
        return compile_selector(sql_filter)
    except SelectorError as e:
        raise InvalidArgument(field, f"not a SQL92 selector: {e}") from None


class TopicNotFound(LookupError):
    """A read or route of a topic that does not exist where a send would not create it: gRPC
    NOT_FOUND on msgstore.v1, TOPIC_NOT_FOUND on apache.rocketmq.v2 (as RocketMQ's proxy
    answers), rather than an empty answer that looks like a quiet topic."""


def check_known_topic(store, topic: str) -> str:
    """``topic``, unless it does not exist and autoCreateTopicEnable is off. The store's own
    topics (retries, dead letters, timers) exist once used and are never refused; nor is a
    topic whose queues are on disk without its config (a directory copied without config/)."""
    if store.config.autoCreateTopicEnable or store.topics.get(topic) is not None or is_store_topic(topic):
        return topic
    if store.queues_of(topic):
        return topic
    raise TopicNotFound(f"topic: no topic {topic} (autoCreateTopicEnable is off: create it first)")


def check_topic(topic: str, field: str = "topic") -> str:
    err = codec.topic_error(topic)
    if err:
        raise InvalidArgument(field, f"{err} (got {topic[:140]!r})")
    return topic


def check_group(group: str, field: str = "group") -> str:
    err = codec.group_error(group or "")
    if err:
        raise InvalidArgument(field, err)
    return group


def check_queue_id(queue_id: int, field: str = "queue_id") -> int:
    if queue_id < 0:
        raise InvalidArgument(field, f"must be >= 0, got {queue_id}")
    return queue_id


def check_non_negative(value: int, field: str) -> int:
    if value < 0:
        raise InvalidArgument(field, f"must be >= 0, got {value}")
    return value


def check_range(value: int, field: str, low: int, high: int) -> int:
    if not low <= value <= high:
        raise InvalidArgument(field, f"must be between {low} and {high}, got {value}")
    return value


def _no_separators(text: str, field: str) -> None:
    if "\x01" in text or "\x02" in text:
        raise InvalidArgument(field, "must not contain the characters \\x01 or \\x02")


def entry_to_message(entry, index: int, max_body: int, born_host: tuple[str, int]) -> codec.Message:
    """A SendEntry → store Message, or InvalidArgument naming ``entries[i].<field>``."""
    prefix = f"entries[{index}]"
    topic = check_topic(entry.topic, f"{prefix}.topic")
    check_queue_id(entry.queue_id, f"{prefix}.queue_id")
    body = entry.body
    if len(body) > max_body:
        raise InvalidArgument(f"{prefix}.body", f"{len(body)} bytes exceeds maxMessageSize {max_body}")
    props: dict[str, str] = {}
    if entry.properties:
        for k, v in entry.properties.items():
            if not k:
                raise InvalidArgument(f"{prefix}.properties", "property names must not be empty")
            _no_separators(k, f"{prefix}.properties[{k!r}]")
            _no_separators(v, f"{prefix}.properties[{k!r}]")
            if k in (codec.PROP_TAGS, codec.PROP_KEYS, codec.PROP_UNIQ_KEY):
                raise InvalidArgument(f"{prefix}.properties[{k!r}]", f"use the {k.lower()} field instead")
            props[k] = v
    if entry.tags:
        _no_separators(entry.tags, f"{prefix}.tags")
        if "|" in entry.tags:
            raise InvalidArgument(f"{prefix}.tags", "must not contain '|' (a tag filter separates tags with '||'; RocketMQ refuses it too)")
        props[codec.PROP_TAGS] = entry.tags
    if entry.keys:
        for j, k in enumerate(entry.keys):
            field = f"{prefix}.keys[{j}]"
            if not k:
                raise InvalidArgument(field, "must not be empty")
            if " " in k:
                raise InvalidArgument(field, "must not contain spaces")
            _no_separators(k, field)
        props[codec.PROP_KEYS] = " ".join(entry.keys)
    if entry.uniq_key:
        _no_separators(entry.uniq_key, f"{prefix}.uniq_key")
        props[codec.PROP_UNIQ_KEY] = entry.uniq_key
    if props:
        size = len(codec.properties_to_bytes(props))
        if size > codec.MAX_PROPERTIES_LENGTH:
            raise InvalidArgument(f"{prefix}.properties", f"{size} bytes encoded exceed {codec.MAX_PROPERTIES_LENGTH}")
    check_non_negative(entry.born_timestamp, f"{prefix}.born_timestamp")
    return codec.Message(topic, body, entry.queue_id, entry.flag, props, entry.born_timestamp, born_host)


# ------------------------------------------------------------------------------------------------
# requests that do not even parse


def explain_decode_error(message_cls, data: bytes) -> str:
    """Why ``data`` is not a valid ``message_cls``: names a string field with invalid UTF-8
    when that is the reason (protobuf itself only says the message failed to parse)."""
    try:
        path = _find_bad_utf8(message_cls.DESCRIPTOR, memoryview(data), "")
    except Exception:  # this runs on hostile bytes: never let it fail the answer
        path = None
    if path:
        return f"{path}: not valid UTF-8"
    return f"request is not a valid {message_cls.DESCRIPTOR.full_name}"


def _find_bad_utf8(desc, buf: memoryview, prefix: str) -> str | None:
    from google.protobuf.descriptor import FieldDescriptor as FD

    counts: dict[int, int] = {}
    pos = 0
    try:
        while pos < len(buf):
            key, pos = read_varint(buf, pos)
            number, wire = key >> 3, key & 7
            if wire == 0:
                _, pos = read_varint(buf, pos)
                continue
            if wire == 1:
                pos += 8
                continue
            if wire == 5:
                pos += 4
                continue
            if wire != 2:
                return None
            length, pos = read_varint(buf, pos)
            chunk = buf[pos : pos + length]
            pos += length
            field = desc.fields_by_number.get(number)
            if field is None:
                continue
            idx = counts.get(number, 0)
            counts[number] = idx + 1
            repeated = field.is_repeated
            name = f"{prefix}{field.name}" + (f"[{idx}]" if repeated and not _is_map(field) else "")
            if field.type == FD.TYPE_STRING:
                try:
                    bytes(chunk).decode("utf-8")
                except UnicodeDecodeError:
                    return name
            elif field.type == FD.TYPE_MESSAGE:
                found = _find_bad_utf8(field.message_type, chunk, name + ".")
                if found:
                    return found
    except DecodeError:
        return None
    return None


def _is_map(field) -> bool:
    mt = field.message_type
    return mt is not None and mt.GetOptions().map_entry
