"""The compiled wire code (SendRequest → records, requests, responses, pulled records) must
agree with the protobuf path it replaces."""

import types

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from msgstore.api import validation as v
from msgstore.api.servicer import DataPlane
from msgstore.client.client import OutMessage, encode_send
from msgstore.record import codec, crc
from msgstore.record.codec import decode as decode_one
from msgstore.v1 import msgstore_pb2 as pb

native = pytest.importorskip("msgstore.wire._native")

BORN = codec.host_bytes(("10.1.1.1", 5000))
STORE_HOST = codec.host_bytes(("10.2.2.2", 10911))

safe_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02 "), max_size=8)
any_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8)
topics = st.sampled_from(["T1", "T2", "a-b_%|c", "", "bad/topic", "x" * 128])
entries = st.builds(
    pb.SendEntry,
    topic=topics,
    queue_id=st.integers(-2, 3),
    body=st.binary(max_size=64),
    tags=any_text,
    keys=st.lists(any_text, max_size=3),
    uniq_key=any_text,
    properties=st.dictionaries(any_text, any_text, max_size=3),
    flag=st.integers(-(2**31), 2**31 - 1),
    born_timestamp=st.integers(-5, 2**42),
)


@pytest.fixture
def plane(make_store):
    store = make_store()
    return DataPlane(types.SimpleNamespace(store=store)), store


def _python(plane, request):
    dp, store = plane
    store.commitlog.set_store_host(codec.host_from_bytes(STORE_HOST))
    groups, n, _handles = dp._prepare_parsed(request, BORN)
    return groups, n


def _native(plane, data):
    _, store = plane
    return native.transcode_send(
        data, store.config.maxMessageSize, STORE_HOST, store.clock.now_ms(), codec._crc32, BORN, v.InvalidArgument, v.MAX_BATCH
    )


def _records(batch):
    data = bytes(batch.finalize(7, 1000, 55))
    out, pos = [], 0
    while pos < len(data):
        m = codec.decode(data, pos)
        out.append(m._replace(born_timestamp=0 if m.born_timestamp > 10**12 else m.born_timestamp))
        pos += m.store_size
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(entries, min_size=1, max_size=6), st.one_of(st.none(), st.booleans()))
def test_transcode_agrees_with_the_protobuf_path(plane, items, wait):
    req = pb.SendRequest(entries=items)
    if wait is not None:
        req.wait_flush = wait
    data = req.SerializeToString()
    try:
        expected, n = _python(plane, pb.SendRequest.FromString(data))
    except v.InvalidArgument as e:
        with pytest.raises(v.InvalidArgument) as got:
            _native(plane, data)
        assert got.value.field.split(".")[0] == e.field.split(".")[0], (e, got.value)  # the same entry
        return
    groups, w, visible, request_id, count = _native(plane, data)
    assert count == n == len(items) and w == (-1 if wait is None else int(wait)) and visible is False and request_id == 0
    assert [(t, q, idx) for t, q, _, idx in groups] == [(t, q, idx) for t, q, _, idx in expected]
    for (_, _, nb, _), (_, _, pbatch, _) in zip(groups, expected):
        assert nb.sizes == pbatch.sizes and nb.tags_codes == pbatch.tags_codes
        assert nb.sys_flags == pbatch.sys_flags and nb.takes_offset == pbatch.takes_offset
        assert sorted(zip(nb.key_owner, nb.key_hashes)) == sorted(zip(pbatch.key_owner, pbatch.key_hashes))
        assert nb.wait_flush == pbatch.wait_flush
        for a, b in zip(_records(nb), _records(pbatch)):
            assert a._replace(properties={}) == b._replace(properties={})  # map order is not defined by protobuf
            assert a.properties == b.properties


@pytest.mark.parametrize(
    "bad,field",
    [
        (pb.SendEntry(topic="ok", body=b"x", keys=["a b"]), "entries[1].keys[0]"),
        (pb.SendEntry(topic="ok", body=b"x", properties={"TAGS": "v"}), "entries[1].properties['TAGS']"),
        (pb.SendEntry(topic="ok", body=b"x" * (4 * 1024 * 1024 + 1)), "entries[1].body"),
        (pb.SendEntry(topic="ok", body=b"x", born_timestamp=-1), "entries[1].born_timestamp"),
        (pb.SendEntry(topic="ok", body=b"x", properties={"p": "v" * 40000}), "entries[1].properties"),
    ],
)
def test_both_paths_name_the_same_field(plane, bad, field):
    data = pb.SendRequest(entries=[pb.SendEntry(topic="ok", body=b"fine"), bad]).SerializeToString()
    for run in (lambda: _python(plane, pb.SendRequest.FromString(data)), lambda: _native(plane, data)):
        with pytest.raises(v.InvalidArgument) as e:
            run()
        assert e.value.field == field


def test_transcode_rejects_broken_wire_bytes(plane):
    for data in (b"\x0a\x10\x0a", b"\xff" * 11, b"\x0a\x05\x0a\x03ab"):
        with pytest.raises(v.InvalidArgument) as e:
            _native(plane, data)
        assert e.value.field == "request"


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.builds(
            OutMessage,
            body=st.binary(max_size=50),
            key=st.one_of(st.none(), safe_text.filter(bool)),
            keys=st.lists(safe_text.filter(bool), max_size=2),
            tags=st.one_of(st.none(), safe_text),
            properties=st.dictionaries(safe_text.filter(bool), safe_text, max_size=2),
            uniq_key=st.one_of(st.none(), safe_text),
            flag=st.integers(-(2**31), 2**31 - 1),
        ),
        min_size=1,
        max_size=5,
    ),
    st.integers(0, 7),
    st.sampled_from([None, True, False]),
)
def test_client_encoding_matches_protobuf(msgs, qid, wait):
    data = encode_send("Topic", qid, msgs, wait)
    expected = pb.SendRequest(entries=[m.entry("Topic", qid) for m in msgs])
    if wait is not None:
        expected.wait_flush = wait
    assert pb.SendRequest.FromString(data) == expected


def test_response_encoding_matches_protobuf():
    groups = [
        ([0, 2], pb.PUT_OK, 3, 10, 5000, [100, 120], STORE_HOST, ""),
        ([1], pb.SERVICE_NOT_AVAILABLE, 1, -1, -1, [90], STORE_HOST, "disk full: über"),
    ]
    data = native.encode_send_response(3, "node-7", groups)
    resp = pb.SendResponse.FromString(data)
    assert resp.node == "node-7"
    assert [(r.status, r.queue_id, r.queue_offset, r.commitlog_offset, r.error) for r in resp.results] == [
        (pb.PUT_OK, 3, 10, 5000, ""),
        (pb.SERVICE_NOT_AVAILABLE, 1, 0, 0, "disk full: über"),
        (pb.PUT_OK, 3, 11, 5100, ""),
    ]
    assert resp.results[2].message_id == codec.message_id(STORE_HOST, 5100)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.binary(max_size=40),
            st.dictionaries(safe_text.filter(bool), safe_text.filter(bool), max_size=3),
            st.sampled_from([("127.0.0.1", 1), ("::1", 2)]),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_record_decoding_matches_the_codec(items):
    data = b"".join(
        codec.encode_message(
            codec.Message("Dec", body, properties=props, born_host=host), i, i * 300, 9, ("fe80::5", 10911) if i % 2 else ("10.0.0.1", 1)
        )
        for i, (body, props, host) in enumerate(items)
    )
    assume(len(data) > 0)
    got = codec._native.decode_records(data, codec.StoredMessage, {}, codec.host_from_bytes)
    expected, pos = [], 0
    while pos < len(data):
        expected.append(decode_one(data, pos))
        pos += expected[-1].store_size
    assert got == expected
    assert all(type(m) is codec.StoredMessage for m in got)


def test_transcode_computes_the_same_body_crcs_through_zlib_ng_s_c_function(plane):
    """The server hands the transcoder zlib-ng's C function (its address): every record must
    come out byte for byte as through the Python callable, its BODYCRC zlib's CRC-32."""
    import zlib

    _, store = plane
    bodies = [b"", b"x", bytes(range(256)) * 4 + b"tail", b"\x00" * 4099]
    data = pb.SendRequest(entries=[pb.SendEntry(topic="T1", queue_id=1, body=b) for b in bodies]).SerializeToString()
    out = {}
    for name, crc_fn in (("callable", codec._crc32), ("address", crc.FOR_NATIVE)):
        groups = native.transcode_send(data, store.config.maxMessageSize, STORE_HOST, 5, crc_fn, BORN, v.InvalidArgument, v.MAX_BATCH)[0]
        out[name] = bytes(groups[0][2].finalize(0, 0, 9))
    assert isinstance(crc.FOR_NATIVE, int) and out["address"] == out["callable"]
    pos = 0
    for body in bodies:
        m = decode_one(out["address"], pos)
        assert m.body == body and m.body_crc == zlib.crc32(body) & 0x7FFFFFFF
        pos += m.store_size


def test_the_broker_s_entries_are_recognised_by_their_properties_and_topics_never_by_their_bodies(plane):
    """Issue 30: a delayed, timed or transactional entry, or one for a system topic, makes the
    transcoder hand the request to the protobuf path (the broker's); a body that merely contains
    those words (a JSON status "DELAYED", say) stays on the compiled path."""
    from msgstore.api.scheduled import BROKER_HANDLED

    _, store = plane

    def transcode(*items: pb.SendEntry):
        data = pb.SendRequest(entries=list(items)).SerializeToString()
        return native.transcode_send(
            data, store.config.maxMessageSize, STORE_HOST, 0, codec._crc32, BORN, v.InvalidArgument, v.MAX_BATCH, BROKER_HANDLED
        )

    words = b'{"status": "DELAYED", "TIMER_DELIVER_MS": 1, "TRAN_MSG": true, "topic": "SCHEDULE_TOPIC_XXXX", "rmq_sys_x": 0}'
    plain = transcode(pb.SendEntry(topic="orders", body=words, properties={"note": "DELAY TRAN_MSG"}))
    assert plain is not None and plain[4] == 1  # compiled: the words are in a body and a property's value
    for props in ({"DELAY": "3"}, {"TIMER_DELIVER_MS": "1"}, {"TIMER_DELAY_SEC": "5"}, {"TIMER_DELAY_MS": "5"}, {"TRAN_MSG": "true"}):
        entries = [pb.SendEntry(topic="orders", body=b"x"), pb.SendEntry(topic="orders", body=b"y", properties=props)]
        assert transcode(*entries) is None, props  # one such entry sends the whole request to the broker's path
    for topic in ("SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_anything"):
        assert transcode(pb.SendEntry(topic=topic, body=b"x")) is None, topic
    assert transcode(pb.SendEntry(topic="rmq_sys", body=b"x")) is not None  # a prefix alone is not one of them


def test_client_encoding_takes_any_buffer_and_writes_the_properties_it_sized():
    """Bodies may be bytearray or memoryview; properties are read once (a snapshot), so an
    attribute that changes a shared dict between the passes cannot make the writer overrun."""
    shared = {"k": "v"}

    class Sneaky(OutMessage):
        @property  # type: ignore[override]
        def flag(self) -> int:
            shared["k"] = "v" * 1000
            return 0

        @flag.setter
        def flag(self, _value: int) -> None:
            pass

    msgs = [OutMessage(bytearray(b"ab"), properties=shared), OutMessage(memoryview(b"cd")), Sneaky(b"ef")]
    got = pb.SendRequest.FromString(encode_send("T", 0, msgs, None))
    assert [e.body for e in got.entries] == [b"ab", b"cd", b"ef"]
    assert dict(got.entries[0].properties) == {"k": "v"}  # what it held when it was sized


def test_send_response_keeps_request_order_long_errors_and_refuses_a_missing_or_stray_entry():
    """The response is written into one buffer and copied out in request order (issue 30: a
    bytes object per result cost ~250 µs per 500-message answer); a result the groups do not
    cover, or an index outside the request, is an error rather than a gap or a write past it."""
    long_error = "disk full: " + "ü" * 100  # 211 bytes: a two-byte length inside a two-byte length
    groups = [
        ([4, 1, 3], pb.PUT_OK, 2, 1 << 40, 1 << 50, [1 << 20, 7, 300], STORE_HOST, ""),
        ([0, 2], pb.SERVICE_NOT_AVAILABLE, 0, -1, -1, [], STORE_HOST, long_error),
    ]
    resp = pb.SendResponse.FromString(native.encode_send_response(5, "", groups, 1 << 63))
    assert resp.request_id == 1 << 63 and resp.node == ""
    assert [(r.status, r.queue_offset, r.commitlog_offset, r.error) for r in resp.results] == [
        (pb.SERVICE_NOT_AVAILABLE, 0, 0, long_error),
        (pb.PUT_OK, (1 << 40) + 1, (1 << 50) + (1 << 20), ""),
        (pb.SERVICE_NOT_AVAILABLE, 0, 0, long_error),
        (pb.PUT_OK, (1 << 40) + 2, (1 << 50) + (1 << 20) + 7, ""),
        (pb.PUT_OK, 1 << 40, 1 << 50, ""),
    ]
    with pytest.raises(ValueError, match="no result for entry 1"):
        native.encode_send_response(2, "n", [([0], pb.PUT_OK, 0, 0, 0, [1], STORE_HOST, "")])
    with pytest.raises(IndexError, match="entry index 3"):
        native.encode_send_response(1, "n", [([3], pb.PUT_OK, 0, 0, 0, [1], STORE_HOST, "")])
