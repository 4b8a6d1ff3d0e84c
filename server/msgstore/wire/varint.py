"""Protobuf's base-128 varints, for the messages written or read by hand (raw pull responses,
replication chunks, the client's tagged Send requests, the diagnosis of a request protobuf
refused): one encoder and one reader instead of a copy beside each."""

from __future__ import annotations

from google.protobuf.message import DecodeError

_U64 = (1 << 64) - 1


def varint(n: int) -> bytes:
    """``n`` as protobuf writes an int64 or uint64 (a negative as ten bytes)."""
    n &= _U64
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_varint(buf: bytes | memoryview, pos: int, max_bytes: int = 10) -> tuple[int, int]:
    """(value, the position after it) for the varint at ``pos``: bits beyond 64 dropped, as
    protobuf drops them; DecodeError when it is truncated or longer than ``max_bytes`` (10 for
    a value, 5 for a field's key)."""
    result = shift = 0
    for _ in range(max_bytes):
        if pos >= len(buf):
            raise DecodeError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result & _U64, pos
        shift += 7
    raise DecodeError("varint too long")
