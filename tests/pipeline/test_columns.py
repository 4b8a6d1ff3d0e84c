"""Records → Arrow: the compiled decoder must equal per-record decoding with the codec."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msgstore.pipeline.columns import Decoder, batch_from_messages
from msgstore.record import codec

pytest.importorskip("msgstore.record._native")

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"), max_size=6)
records = st.lists(
    st.tuples(
        st.sampled_from(["a", "topic_b", "c-1"]),
        st.binary(max_size=60),
        st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "x", "y"]) | text.filter(bool), text, max_size=4),
        st.sampled_from([("127.0.0.1", 1), ("::1", 2), ("10.9.8.7", 65535)]),
        st.sampled_from([0, 0, codec.TRANSACTION_PREPARED, codec.TRANSACTION_COMMIT, codec.TRANSACTION_ROLLBACK]),
        st.booleans(),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=120, deadline=None)
@given(records, st.integers(1, 5))
def test_native_columns_equal_codec_decoding(items, rows_per_batch):
    data = b""
    for i, (topic, body, props, host, txn, v6_store) in enumerate(items):
        msg = codec.Message(
            topic, body, queue_id=i % 3, flag=i, properties=props, born_host=host, sys_flag=txn, born_timestamp=1_700_000_000_000 + i
        )
        data += codec.encode_message(msg, i, len(data), 1_700_000_000_500 + i, ("fe80::9", 10911) if v6_store else ("10.0.0.5", 10911))
    expected = [m for m in (codec.decode(data, p) for p in _positions(data)) if codec.takes_queue_offset(m.sys_flag)]
    d = Decoder()
    got = []
    pos = 0
    while pos < len(data):
        batch, pos, stop = d.decode(data, pos, len(data), rows_per_batch)
        if batch is not None:
            got.extend(batch.to_pylist())
        if stop != "limit":
            break
    want = batch_from_messages(expected).to_pylist() if expected else []
    assert got == want


def _positions(data: bytes):
    pos = 0
    while pos < len(data):
        yield pos
        pos += int.from_bytes(data[pos : pos + 4], "big")
