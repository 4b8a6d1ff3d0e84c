"""The replication stream's common chunk, a MasterChunk with nothing but log bytes and positions
(or positions alone: a keepalive, a confirm offset), encoded and decoded by hand: under load
nearly every chunk is one, and protobuf would copy its bytes (up to CHUNK_BYTES) into a message
and out again on each side. Any other chunk (the first, a state or epoch change) is left to
protobuf."""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import DecodeError

from ..v1 import ha_pb2 as hpb
from ..wire.varint import read_varint, varint

# MasterChunk's field numbers (ha.proto) this module writes and reads
_OFFSET, _DATA, _MASTER_END, _SENT_US, _CONFIRM = 1, 2, 3, 7, 8
_INT_FIELDS = {_OFFSET: "offset", _MASTER_END: "master_end", _SENT_US: "sent_us", _CONFIRM: "confirm_offset"}
_VARINT, _LENGTH = 0, 2


def data_chunk(offset: int, data: bytes | memoryview, master_end: int, sent_us: int = 0, confirm_offset: int = 0) -> bytes:
    """A serialized MasterChunk{offset, data, master_end, sent_us, confirm_offset}: what
    ``hpb.MasterChunk(...).SerializeToString()`` gives, with one copy of ``data`` (which may be
    a view of the mapped log)."""
    parts = [b"\x08", varint(offset)] if offset else []
    if len(data):
        parts += [b"\x12", varint(len(data)), data]
    if master_end:
        parts += [b"\x18", varint(master_end)]
    if sent_us:
        parts += [b"\x38", varint(sent_us)]
    if confirm_offset:
        parts += [b"\x40", varint(confirm_offset)]
    return b"".join(parts)


@dataclass(slots=True)
class DataChunk:
    """A received data chunk: MasterChunk's attributes, ``data`` a view of the received bytes."""

    offset: int = 0
    data: memoryview | bytes = b""
    master_end: int = 0
    sent_us: int = 0
    confirm_offset: int = 0
    # what only other chunks carry, at protobuf's defaults
    state: bool = False
    epochs: tuple = ()
    truncate_to: int = 0
    start_offset: int = 0


def read_chunk(raw: bytes) -> hpb.MasterChunk | DataChunk:
    """The deserializer of the follower's stream: a DataChunk when ``raw`` holds only the
    fields data_chunk writes, else protobuf's MasterChunk (which also reports bad bytes)."""
    chunk = DataChunk()
    view = memoryview(raw)
    pos, end = 0, len(raw)
    try:
        while pos < end:
            key, pos = read_varint(raw, pos, 5)
            field, wire = key >> 3, key & 7
            if field == _DATA and wire == _LENGTH:
                size, pos = read_varint(raw, pos)
                if pos + size > end:
                    raise DecodeError("truncated data")
                chunk.data = view[pos : pos + size]
                pos += size
            elif field in _INT_FIELDS and wire == _VARINT:
                value, pos = read_varint(raw, pos)
                setattr(chunk, _INT_FIELDS[field], value - (1 << 64) if value >> 63 else value)
            else:
                return hpb.MasterChunk.FromString(raw)
    except DecodeError:
        return hpb.MasterChunk.FromString(raw)
    return chunk
