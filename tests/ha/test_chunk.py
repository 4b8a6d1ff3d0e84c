"""The replication stream's data chunks, decoded by hand on the follower (ha/chunk.py): the same
values protobuf reads, the bytes a view of what was received, and anything else left to protobuf."""

from __future__ import annotations

import os

import pytest
from google.protobuf.message import DecodeError

from msgstore.ha.chunk import DataChunk, data_chunk, read_chunk
from msgstore.v1 import ha_pb2 as hpb

FIELDS = ("offset", "master_end", "sent_us", "confirm_offset")


@pytest.mark.parametrize(
    "offset, size, end, sent, confirm",
    [(0, 0, 0, 0, 0), (2621440, 300_000, 99_999_999_999, 123456789, 2621440), (5, 1, -1, 1, -7), (127, 2, 128, 2**62, 0)],
)
def test_a_data_chunk_reads_back_as_protobuf_reads_it(offset, size, end, sent, confirm):
    raw = data_chunk(offset, os.urandom(size), end, sent, confirm)
    mine, theirs = read_chunk(raw), hpb.MasterChunk.FromString(raw)
    assert isinstance(mine, DataChunk)
    assert bytes(mine.data) == theirs.data
    assert [getattr(mine, f) for f in FIELDS] == [getattr(theirs, f) for f in FIELDS]
    assert (mine.state, list(mine.epochs), mine.truncate_to, mine.start_offset) == (False, [], 0, 0)


def test_the_bytes_are_a_view_of_the_received_message_not_a_copy():
    data = os.urandom(4096)
    raw = data_chunk(77, data, 4173)
    chunk = read_chunk(raw)
    assert isinstance(chunk.data, memoryview) and chunk.data.obj is raw
    assert chunk.data == data


def test_a_data_chunk_from_a_view_of_the_log_is_the_same_bytes():
    data = os.urandom(1000)
    assert data_chunk(3, memoryview(data)[10:900], 5) == data_chunk(3, data[10:900], 5)


@pytest.mark.parametrize(
    "chunk",
    [
        hpb.MasterChunk(offset=1, data=b"x", state=True, mode="SYNC", sync_state_set=["m0"]),
        hpb.MasterChunk(offset=1, epochs=[hpb.EpochEntry(epoch=2, start_offset=0)]),
        hpb.MasterChunk(truncate_to=-1, start_offset=4096, master_end=8192),
        hpb.MasterChunk(fenced="deposed"),
    ],
)
def test_any_other_chunk_is_protobuf_s(chunk):
    got = read_chunk(chunk.SerializeToString())
    assert isinstance(got, hpb.MasterChunk) and got == chunk


def test_a_ten_byte_varint_s_bits_beyond_64_are_dropped_as_protobuf_drops_them():
    raw = b"\x08" + b"\x80" * 9 + b"\x7f"
    assert read_chunk(raw).offset == hpb.MasterChunk.FromString(raw).offset == -(2**63)


@pytest.mark.parametrize(
    "raw",
    [b"\x12\x05abc", b"\x08\xff", b"\x12", b"\x08" + b"\xff" * 11, b"\x88\x80\x80\x80\x80\x00\x01"],  # the last: a 6-byte key
)
def test_bad_bytes_fail_as_protobuf_fails_them(raw):
    with pytest.raises(DecodeError):
        read_chunk(raw)
