"""Answers in apache.rocketmq.v2's terms: every response carries a ``Status`` whose code is one
StatusCode.md (apache/rocketmq-apis) defines. The v2 service calls the msgstore.v1 handlers;
what they refuse with a gRPC status (through :class:`CallContext`) or ``InvalidArgument``
becomes the v2 code that says the same thing, with the same message naming the field."""

from __future__ import annotations

from typing import Any

import grpc

from ...store.results import PutStatus
from ...v1 import msgstore_pb2 as pb
from .protocol import definition as d


class Refusal(Exception):
    """A request answered with a non-OK v2 status (the code and a message naming the field)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def status(code: int = d.OK, message: str = "OK") -> Any:
    return d.Status(code=code, message=message)


# msgstore.v1's gRPC refusals → v2 codes (the message is kept: it says which and why)
_BY_GRPC = {
    grpc.StatusCode.INVALID_ARGUMENT: d.BAD_REQUEST,
    grpc.StatusCode.NOT_FOUND: d.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION: d.PRECONDITION_FAILED,
    grpc.StatusCode.RESOURCE_EXHAUSTED: d.TOO_MANY_REQUESTS,
    grpc.StatusCode.UNAVAILABLE: d.INTERNAL_SERVER_ERROR,  # a node that cannot serve now: the client tries another
    grpc.StatusCode.UNAUTHENTICATED: d.UNAUTHORIZED,
    grpc.StatusCode.PERMISSION_DENIED: d.FORBIDDEN,
    grpc.StatusCode.DEADLINE_EXCEEDED: d.PROXY_TIMEOUT,
}


def from_grpc(code: grpc.StatusCode, message: str) -> Refusal:
    return Refusal(_BY_GRPC.get(code, d.INTERNAL_SERVER_ERROR), message)


# A send's per-message outcome (msgstore.v1 SendStatus) → v2. Stored-but-not-confirmed
# outcomes are errors to a RocketMQ 5 client too (it retries; RocketMQ's proxy does the same).
SEND_CODES = {
    pb.PUT_OK: d.OK,
    pb.FLUSH_DISK_TIMEOUT: d.MASTER_PERSISTENCE_TIMEOUT,
    pb.FLUSH_SLAVE_TIMEOUT: d.SLAVE_PERSISTENCE_TIMEOUT,
    pb.SLAVE_NOT_AVAILABLE: d.HA_NOT_AVAILABLE,
    pb.IN_SYNC_REPLICAS_NOT_ENOUGH: d.HA_NOT_AVAILABLE,
    pb.SERVICE_NOT_AVAILABLE: d.INTERNAL_SERVER_ERROR,
    pb.MESSAGE_ILLEGAL: d.BAD_REQUEST,
    pb.PROPERTIES_SIZE_EXCEEDED: d.MESSAGE_PROPERTIES_TOO_LARGE,
    pb.OS_PAGE_CACHE_BUSY: d.TOO_MANY_REQUESTS,
    pb.CREATE_MAPPED_FILE_FAILED: d.INTERNAL_SERVER_ERROR,
    pb.UNKNOWN_ERROR: d.INTERNAL_SERVER_ERROR,
}
assert len(SEND_CODES) == len(PutStatus), "a SendStatus without a v2 code"


def field_code(field: str, default: int = d.BAD_REQUEST) -> int:
    """The specific ILLEGAL_* code for a msgstore.v1 InvalidArgument's field."""
    last = field.rsplit(".", 1)[-1].split("[", 1)[0]
    return {
        "topic": d.ILLEGAL_TOPIC,
        "group": d.ILLEGAL_CONSUMER_GROUP,
        "tags": d.ILLEGAL_MESSAGE_TAG,
        "tag_filter": d.ILLEGAL_FILTER_EXPRESSION,
        "sql_filter": d.ILLEGAL_FILTER_EXPRESSION,
        "keys": d.ILLEGAL_MESSAGE_KEY,
        "receipt_handle": d.INVALID_RECEIPT_HANDLE,
        "receipt_handles": d.INVALID_RECEIPT_HANDLE,
        "invisible_ms": d.ILLEGAL_INVISIBLE_TIME,
        "transaction_id": d.INVALID_TRANSACTION_ID,
        "wait_ms": d.ILLEGAL_POLLING_TIME,
        "offset": d.ILLEGAL_OFFSET,
        "properties": d.ILLEGAL_MESSAGE_PROPERTY_KEY,
        "body": d.MESSAGE_BODY_TOO_LARGE,
    }.get(last, default)


def send_refusal(e: Any) -> Refusal:
    """A msgstore.v1 InvalidArgument of the Send a SendMessage became, in the v2 request's terms:
    ``entries[i]`` is ``messages[i]`` there, and properties too large for a record are
    MESSAGE_PROPERTIES_TOO_LARGE (not a property key's fault)."""
    field, _, reason = str(e).partition(": ")
    v2_field = field.replace("entries[", "messages[", 1)
    if field.endswith(".properties") and "encoded exceed" in reason:  # (user properties, tag, keys and ours, together)
        message = v2_field.removesuffix(".properties")
        return Refusal(d.MESSAGE_PROPERTIES_TOO_LARGE, f"{message}: its properties (user properties, tag, keys and system ones) {reason}")
    return Refusal(field_code(e.field), f"{v2_field}: {reason}")
