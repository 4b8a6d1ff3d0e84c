"""The compiled codec must agree byte for byte with the Python reference in codec.py."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msgstore.record import codec, crc
from msgstore.record.codec import Message

native = pytest.importorskip("msgstore.record._native")

HOST = codec.host_bytes(("10.0.0.7", 10911))
HOST6 = codec.host_bytes(("fe80::1", 10911))

text = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=12)
props = st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "a", "Zz", "ü"]) | text.filter(bool), text, max_size=5)
messages = st.builds(
    Message,
    topic=st.just("Topic_1"),
    body=st.binary(max_size=300),
    queue_id=st.just(3),
    flag=st.integers(-(2**31), 2**31 - 1),
    properties=props,
    born_timestamp=st.integers(0, 2**45),
    born_host=st.sampled_from([("127.0.0.1", 5), ("::1", 6), ("192.168.0.9", 65535)]),
    sys_flag=st.sampled_from([0, 0, 0, codec.TRANSACTION_PREPARED, codec.TRANSACTION_COMMIT, codec.TRANSACTION_ROLLBACK, 0x1]),
    reconsume_times=st.integers(0, 16),
    prepared_txn_offset=st.integers(0, 2**40),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(messages, min_size=1, max_size=8),
    st.booleans(),
    st.integers(0, 2**40),
    st.integers(0, 2**40),
    st.booleans(),
    st.sampled_from([codec._crc32, crc.FOR_NATIVE]),
)
def test_prepare_and_finalize_match_the_reference(msgs, v6, qoff, phy, v2, crc_fn):
    host = HOST6 if v6 else HOST
    ref = codec.PreparedBatch("Topic_1", 3, msgs, host, 123456, v2)
    nat = native.prepare(list(msgs), "Topic_1", 3, host, 123456, 1 << 62, v2, crc_fn, codec.host_bytes_cached, codec.BatchError)
    assert nat.sizes == ref.sizes and nat.total == ref.total
    assert nat.tags_codes == ref.tags_codes and nat.sys_flags == ref.sys_flags
    assert nat.takes_offset == ref.takes_offset and nat.count_offsets == ref.count_offsets
    assert nat.key_hashes == ref.key_hashes and nat.key_owner == ref.key_owner
    assert nat.wait_flush == ref.wait_flush
    assert bytes(nat.finalize(qoff, phy, 99)) == bytes(ref.finalize(qoff, phy, 99))


@pytest.mark.parametrize(
    "bad,status",
    [
        (Message("Topic_1", b"x", queue_id=3, properties={"a": "x\x01"}), "MESSAGE_ILLEGAL"),
        (Message("Topic_1", b"x", queue_id=3, properties={"": "x"}), "MESSAGE_ILLEGAL"),
        (Message("Topic_1", b"x", queue_id=3, properties={"P": "v" * 40000}), "PROPERTIES_SIZE_EXCEEDED"),
        (Message("Topic_1", b"x" * 11, queue_id=3), "MESSAGE_ILLEGAL"),
        (Message("Other", b"x", queue_id=3), "MESSAGE_ILLEGAL"),
        (Message("Topic_1", "text", queue_id=3), "MESSAGE_ILLEGAL"),
    ],
)
def test_both_refuse_the_same_messages(bad, status):
    good = Message("Topic_1", b"ok", queue_id=3)
    with pytest.raises(codec.BatchError) as ref:
        codec.PreparedBatch("Topic_1", 3, [good, bad], HOST, 1, False, 10)
    with pytest.raises(codec.BatchError) as nat:
        native.prepare([good, bad], "Topic_1", 3, HOST, 1, 10, False, codec._crc32, codec.host_bytes_cached, codec.BatchError)
    assert (nat.value.status, nat.value.index) == (ref.value.status, ref.value.index) == (status, 1)


@settings(max_examples=100, deadline=None)
@given(st.lists(messages, min_size=1, max_size=10), st.integers(0, 400), st.binary(max_size=40), st.booleans())
def test_scan_matches_the_reference_on_damaged_streams(msgs, cut, garbage, crc):
    batch = codec.PreparedBatch("Topic_1", 3, msgs, HOST, 1, False)
    data = bytearray(batch.finalize(0, 5000, 77))
    cut = min(cut, len(data))
    damaged = bytes(data[: len(data) - cut]) + garbage + bytes(64)
    if random.Random(cut).random() < 0.3 and len(damaged) > 100:
        damaged = damaged[:90] + bytes([damaged[90] ^ 0xFF]) + damaged[91:]
    saved = codec._native
    try:
        codec._native = None
        ref = codec.scan_records(damaged, 0, len(damaged), crc, 5000)
    finally:
        codec._native = saved
    nat = codec.scan_records(damaged, 0, len(damaged), crc, 5000)
    assert nat[1:] == ref[1:]
    for name in codec.Columns.__slots__:
        a, b = getattr(nat[0], name), getattr(ref[0], name)
        assert list(a) == list(b), name


def test_the_compiled_code_calls_zlib_ng_s_c_function_itself():
    """The pinned zlib-ng exports zng_crc32: the compiled loops get its address, not the
    Python wrapper (whose call per record was a third of the transcoder's time)."""
    assert isinstance(crc.FOR_NATIVE, int) and crc.FOR_NATIVE == crc.c_function_address()
    assert codec._crc_native == crc.FOR_NATIVE


@pytest.mark.parametrize("through", ["callable", "address"])
def test_scan_finds_a_damaged_body_through_either_crc(through, monkeypatch):
    """A body byte flipped after its record was written: the CRC check (recovery's, with
    checkCRCOnRecover) stops there, whichever form of the CRC function scan_records hands the
    compiled scan."""
    monkeypatch.setattr(codec, "_crc_native", codec._crc32 if through == "callable" else crc.FOR_NATIVE)
    batch = codec.PreparedBatch(
        "Topic_1", 3, [Message("Topic_1", b"first body", queue_id=3), Message("Topic_1", b"second body", queue_id=3)], HOST, 1, False
    )
    data = bytearray(batch.finalize(0, 0, 77))
    size = batch.sizes[0]
    at = data.index(b"second body")
    cols, pos, stop, _bad = codec.scan_records(bytes(data), 0, len(data), True, 0)
    assert (len(cols), len(cols.key_hashes), pos, stop) == (2, 0, len(data), "limit")
    data[at] ^= 0x01
    cols, pos, stop, _bad = codec.scan_records(bytes(data), 0, len(data), True, 0)
    assert (len(cols), pos, stop) == (1, size, "bad")
    cols, pos, stop, _bad = codec.scan_records(bytes(data), 0, len(data), False, 0)
    assert (len(cols), len(cols.key_hashes), pos, stop) == (2, 0, len(data), "limit")


def test_index_hashes_and_jhash():
    keys = ["hello", "", "a b", "😀", "Aa", "BB"]
    assert native.index_hashes("test", keys) == [codec.index_hash(f"test#{k}") for k in keys]
    assert [native.jhash(k) for k in keys] == [codec.jhash(k) for k in keys]
