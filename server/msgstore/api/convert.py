"""Between store objects and protobuf messages."""

from __future__ import annotations

from ..record import codec
from ..store.results import GetStatus, PutStatus
from ..v1 import msgstore_pb2 as pb
from ..wire.varint import varint

SEND_STATUS = {s: getattr(pb, s.name) for s in PutStatus}
PULL_STATUS = {s: getattr(pb, s.name) for s in GetStatus}
PULL_STATUS_BY_NUMBER = {v: k for k, v in PULL_STATUS.items()}
SEND_STATUS_BY_NUMBER = {v: k for k, v in SEND_STATUS.items()}


def message_to_pb(m: codec.StoredMessage) -> pb.Message:
    props = m.properties
    keys = props.get(codec.PROP_KEYS)
    return pb.Message(
        topic=m.topic,
        queue_id=m.queue_id,
        queue_offset=m.queue_offset,
        commitlog_offset=m.commitlog_offset,
        msg_id=m.msg_id,
        body=m.body,
        tags=props.get(codec.PROP_TAGS, ""),
        keys=[k for k in keys.split(" ") if k] if keys else [],
        properties=props,
        born_timestamp=m.born_timestamp,
        store_timestamp=m.store_timestamp,
        born_host=codec.host_str(m.born_host),
        store_host=codec.host_str(m.store_host),
        flag=m.flag,
        sys_flag=m.sys_flag,
        reconsume_times=m.reconsume_times,
        store_size=m.store_size,
        body_crc=m.body_crc,
    )


def raw_pull_response(result) -> bytes:
    """A raw-mode PullResponse serialized by hand: the records go from the mapped commit log
    into the response in one copy (through protobuf they would be copied three times)."""
    head = bytearray()
    status = PULL_STATUS[result.status]
    if status:
        head += b"\x08" + varint(status)
    for tag, value in ((0x10, result.next_offset), (0x18, result.min_offset), (0x20, result.max_offset)):
        if value:
            head.append(tag)
            head += varint(value)
    count = len(result)
    if count:
        head.append(0x38)
        head += varint(count)
        head.append(0x32)
        head += varint(result.buffer_total)
    return b"".join([head, *result.buffers])
