"""Record format byte-compatibility (docs/store-format.md §2) and the hash functions."""

import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msgstore.record import codec
from msgstore.record.codec import Message


def test_jhash_vectors():
    assert codec.jhash("TagA") == 2598919
    assert codec.jhash("TAG1") == 2567159
    assert codec.jhash("test#hello") == 342082977
    assert codec.jhash("FooBar#Hello") == -101609924
    assert codec.jhash("") == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=40), min_size=1, max_size=30))
def test_vectorised_jhash_matches_scalar(strings):
    assert codec.jhash_many(strings).tolist() == [codec.jhash(s) for s in strings]


def test_index_hash_maps_min_value_to_zero():
    # "polygenelubricants" is a known Java string whose hashCode is Integer.MIN_VALUE
    assert codec.jhash("polygenelubricants") == -0x80000000
    assert codec.index_hash("polygenelubricants") == 0
    assert codec.index_hash("FooBar#Hello") == 101609924


def test_worked_example_is_158_bytes_with_fields_at_documented_offsets():
    keys = "1700000000000"
    msg = Message(
        "FooBar",
        b"Once, there was a chance for me!",
        queue_id=3,
        flag=7,
        properties={"TAGS": "TAG1", "KEYS": keys},
        born_timestamp=1111,
        born_host=("10.0.0.1", 5555),
    )
    rec = codec.encode_message(msg, queue_offset=42, phy_offset=1580, store_ts=2222, store_host=("10.0.0.2", 10911))
    assert len(rec) == 158
    total, magic, crc, qid, flag, qoff, phy, sysflag, born_ts = struct.unpack_from(">iIiiiqqiq", rec, 0)
    assert (total, magic, qid, flag, qoff, phy, sysflag, born_ts) == (158, 0xDAA320A7, 3, 7, 42, 1580, 0, 1111)
    assert crc == zlib.crc32(b"Once, there was a chance for me!") & 0x7FFFFFFF
    assert rec[48:52] == bytes([10, 0, 0, 1]) and struct.unpack_from(">i", rec, 52)[0] == 5555
    assert struct.unpack_from(">q", rec, 56)[0] == 2222
    assert rec[64:68] == bytes([10, 0, 0, 2]) and struct.unpack_from(">i", rec, 68)[0] == 10911
    assert struct.unpack_from(">iqi", rec, 72) == (0, 0, 32)
    assert rec[88:120] == b"Once, there was a chance for me!"
    assert rec[120] == 6 and rec[121:127] == b"FooBar"
    plen = struct.unpack_from(">h", rec, 127)[0]
    assert plen == 29
    assert codec.parse_properties(rec[129 : 129 + plen]) == {"TAGS": "TAG1", "KEYS": keys}
    assert codec.check(rec, 0, len(rec), True) == (158, True)


def test_ten_worked_examples_end_at_1580():
    phy = 0
    for i in range(10):
        rec = codec.encode_message(
            Message("FooBar", b"Once, there was a chance for me!", properties={"TAGS": "TAG1", "KEYS": str(1700000000000 + i)}),
            i,
            phy,
            1,
            ("127.0.0.1", 1),
        )
        phy += len(rec)
    assert phy == 1580


def test_v2_magic_and_ipv6_hosts_round_trip():
    msg = Message("T", b"body", properties={"KEYS": "a b", "UNIQ_KEY": "U1"}, born_host=("::1", 7), born_timestamp=5)
    rec = codec.encode_message(msg, 1, 100, 9, ("fe80::2", 10911), v2=True)
    assert len(rec) == 91 + 12 + 12 + 1 + 4 + 1 + len(codec.properties_to_bytes(msg.properties))
    d = codec.decode(rec)
    assert d.magic == codec.MAGIC_V2
    assert d.sys_flag & codec.FLAG_BORNHOST_V6 and d.sys_flag & codec.FLAG_STOREHOST_V6
    assert d.born_host == ("::1", 7) and d.store_host == ("fe80::2", 10911)
    assert d.topic == "T" and d.body == b"body" and d.keys == ["U1", "a", "b"]
    assert codec.check(rec, 0, len(rec), True) == (len(rec), True)
    assert len(d.msg_id) == 56
    assert codec.decode_message_id(d.msg_id) == (("fe80::2", 10911), 100)


def test_message_id_is_ip_port_offset_in_upper_hex():
    mid = codec.message_id(codec.host_bytes(("127.0.0.1", 10911)), 1580)
    assert mid == "7F00000100002A9F000000000000062C"
    assert codec.decode_message_id(mid) == (("127.0.0.1", 10911), 1580)
    with pytest.raises(ValueError):
        codec.decode_message_id("XYZ")


def test_properties_drop_empty_names_and_values():
    assert codec.parse_properties("A\x011\x02\x01x\x02B\x01\x02C\x013\x02") == {"A": "1", "C": "3"}
    assert codec.properties_to_bytes({"A": "1", "B": "2"}) == b"A\x011\x02B\x012\x02"
    assert codec.properties_error({"A": "x\x01y"}) is not None
    assert codec.properties_error({"": "y"}) is not None


def test_check_statuses():
    rec = codec.encode_message(Message("t", b"hello"), 0, 0, 1, ("127.0.0.1", 1))
    n = len(rec)
    assert codec.check(rec, 0, n, True) == (n, True)
    assert codec.check(rec, 0, 4, True) == (-1, False)  # remaining <= 4
    assert codec.check(rec, 0, n - 1, True) == (-1, False)  # shorter than TOTALSIZE
    assert codec.check(codec.blank_record(64) + bytes(56), 0, 64, True) == (0, True)
    assert codec.check(bytes(200), 0, 200, True) == (-1, False)  # zeros: bad magic
    bad_crc = bytearray(rec)
    bad_crc[88] ^= 0xFF  # body byte
    assert codec.check(bad_crc, 0, n, True) == (-1, False)
    assert codec.check(bad_crc, 0, n, False) == (n, True)
    longer = bytearray(rec) + bytes(10)
    struct.pack_into(">i", longer, 0, n + 10)  # TOTALSIZE disagrees with the fields
    assert codec.check(longer, 0, n + 10, False) == (n + 10, False)


def test_topic_rules():
    assert codec.topic_error("ok_Topic-1%|x") is None
    for bad in ("", "a/b", "..", "a b", "x" * 128, "ü"):
        assert codec.topic_error(bad) is not None
    assert codec.topic_error("x" * 127) is None


def test_prepared_batch_sizes_match_encoding():
    msgs = [Message("Topic", bytes(i), properties={"TAGS": "a"} if i % 2 else {}) for i in range(20)]
    b = codec.prepare_batch("Topic", 0, msgs, codec.host_bytes(("127.0.0.1", 1)), 1)
    data = b.finalize(0, 1000, 5)
    assert len(data) == b.total == sum(b.sizes)
    pos = 0
    for i, size in enumerate(b.sizes):
        d = codec.decode(data, pos)
        assert d.commitlog_offset == 1000 + pos and d.queue_offset == i and d.body == bytes(i)
        pos += size


def test_prepared_and_rollback_records_take_no_queue_offset():
    msgs = [Message("T", b"a"), Message("T", b"b", sys_flag=codec.TRANSACTION_PREPARED), Message("T", b"c")]
    b = codec.prepare_batch("T", 0, msgs, codec.host_bytes(("127.0.0.1", 1)), 1)
    data = b.finalize(7, 0, 1)
    offs = []
    pos = 0
    for s in b.sizes:
        offs.append(codec.decode(data, pos).queue_offset)
        pos += s
    assert offs == [7, 0, 8] and b.count_offsets == 2


def test_jhash_many_handles_astral_and_empty():
    xs = ["😀", "a😀b", "", "x"]
    assert codec.jhash_many(xs).tolist() == [codec.jhash(s) for s in xs]
    assert codec.jhash_many([]).dtype == np.int32
