"""Fuzzing: every RPC with generated field values, raw bytes on the port, and damaged store
files offline. The server answers (OK or a clear error naming the field), stays healthy and
keeps its data; fsck and recovery never crash and never loop."""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
from contextlib import contextmanager

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msgstore.store import GetStatus, Message, MessageStore, offline
from msgstore.store.config import ConfigError
from msgstore.store.segment_queue import SegmentSizeError
from msgstore.v1 import admin_pb2
from msgstore.v1 import msgstore_pb2 as pb
from msgstore.v1 import msgstore_pb2_grpc as pbg
from tests.reliability.conftest import SOAK, scale
from tests.support.servers import ServerProcess

EXAMPLES = scale(40, 400)
# CI replays the same examples every run (a landing must not depend on luck); `make soak` explores.
FIELD = re.compile(r"^[a-z_]+(\[\d+\])?(\.[a-z_]+(\[\d+\])?)*(\[[^\]]*\])?: \S")
ANSWERS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.OUT_OF_RANGE}
SERVICES = [
    (pb.DESCRIPTOR.services_by_name["MessageStore"], "msgstore.v1.MessageStore"),
    (admin_pb2.DESCRIPTOR.services_by_name["Admin"], "msgstore.v1.Admin"),
]
METHODS = [(f"/{full}/{m.name}", m) for svc, full in SERVICES for m in svc.methods]

# values that have broken parsers before: edges of every integer width, path tricks, odd text
INTS = st.one_of(st.integers(-3, 300), st.sampled_from([-1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 2**32, 60_001]))
TEXT = st.one_of(
    st.sampled_from(
        [
            "",
            "keep",
            "t",
            "..",
            "../x",
            "a/b",
            "%",
            "*",
            "x" * 300,
            "TagA || TagB",
            "ünï",
            "a\x00b",
            "fileReservedTime",
            "deleteWhen",
            "SYNC_FLUSH",
            "0",
            "-5",
            "true",
        ]
    ),
    st.text(max_size=40),
)


def message_strategy(desc, depth: int = 0):
    """A strategy for any message type, walking its descriptor (so new fields are fuzzed too)."""
    fields = {}
    for f in desc.fields:
        if f.type == F.TYPE_MESSAGE:
            if f.message_type.GetOptions().map_entry:
                value = st.dictionaries(TEXT, TEXT, max_size=4)
            elif depth > 2:
                continue
            else:
                value = message_strategy(f.message_type, depth + 1)
        elif f.type in (F.TYPE_STRING,):
            value = TEXT
        elif f.type == F.TYPE_BYTES:
            value = st.binary(max_size=64)
        elif f.type == F.TYPE_BOOL:
            value = st.booleans()
        elif f.type == F.TYPE_ENUM:
            value = st.sampled_from([v.number for v in f.enum_type.values])
        elif f.type in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
            value = st.floats(allow_nan=False, width=32)
        else:
            bits = 32 if f.type in (F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_SFIXED32, F.TYPE_UINT32, F.TYPE_FIXED32) else 64
            unsigned = f.type in (F.TYPE_UINT32, F.TYPE_UINT64, F.TYPE_FIXED32, F.TYPE_FIXED64)
            lo, hi = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
            value = INTS.map(lambda v, lo=lo, hi=hi: min(max(v, lo), hi))
        if f.name == "timeout_ms":  # long polls would only wait: keep them short
            value = st.integers(-5, 100)
        if f.is_repeated and not (f.type == F.TYPE_MESSAGE and f.message_type.GetOptions().map_entry):
            value = st.lists(value, max_size=3)
        fields[f.name] = st.one_of(st.none(), value)

    def build(values):
        msg = desc._concrete_class()
        for name, v in values.items():
            if v is None:
                continue
            f = desc.fields_by_name[name]
            if f.is_repeated and not isinstance(v, dict):
                target = getattr(msg, name)
                for item in v:
                    target.add().CopyFrom(item) if f.type == F.TYPE_MESSAGE else target.append(item)
            elif isinstance(v, dict):
                getattr(msg, name).update(v)
            elif f.type == F.TYPE_MESSAGE:
                getattr(msg, name).CopyFrom(v)
            else:
                setattr(msg, name, v)
        if name_of(desc) == "UpdateConfigRequest":
            msg.dry_run = True  # validate everything, change nothing: the data check below stays meaningful
        return msg

    return st.fixed_dictionaries({}, optional=fields).map(build)


def name_of(desc) -> str:
    return desc.name


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    server = ServerProcess(str(tmp_path_factory.mktemp("fuzz") / "data")).start()
    with server.channel() as ch:
        stub = pbg.MessageStoreStub(ch)
        stub.Send(pb.SendRequest(entries=[pb.SendEntry(topic="keep", queue_id=0, body=b"precious", keys=["k"])]), timeout=10)
    yield server
    server.kill()


def intact(server: ServerProcess, reads: bool = True) -> None:
    assert server.running and server.health() == 1, server.log()[-3000:]
    if not reads:
        return
    with server.channel() as ch:
        res = pbg.MessageStoreStub(ch).Pull(pb.PullRequest(topic="keep", queue_id=0, offset=0, timeout_ms=5000), timeout=10)
    assert [m.body for m in res.messages][:1] == [b"precious"]


# An admin may make a node follow another, fence or promote it: such calls get a node of their
# own, which must stay up and healthy (reads are a follower's master's to serve).
ROLE_CHANGING = ("SetRole", "Fence", "Promote")


@pytest.fixture
def own_node(tmp_path):
    server = ServerProcess(str(tmp_path / "data")).start()
    yield server
    server.kill()


@pytest.mark.parametrize("path, method", METHODS, ids=[p.rsplit("/", 1)[1] for p, _ in METHODS])
def test_every_rpc_with_generated_fields(request, path, method):
    role_changing = method.name in ROLE_CHANGING
    node = request.getfixturevalue("own_node" if role_changing else "node")

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=not SOAK)
    @given(message_strategy(method.input_type))
    def run(request):
        with node.channel() as ch:
            if method.server_streaming:
                call = ch.unary_stream(path, request_serializer=lambda m: m.SerializeToString(), response_deserializer=lambda b: b)
                stream = call(request, timeout=1)  # a valid subscription waits for messages
                try:
                    next(stream, None)
                    stream.cancel()
                except grpc.RpcError as e:
                    if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                        check(e)
                return
            call = ch.unary_unary(path, request_serializer=lambda m: m.SerializeToString(), response_deserializer=lambda b: b)
            try:
                call(request, timeout=10)
            except grpc.RpcError as e:
                check(e)

    def check(e: grpc.RpcError) -> None:
        if e.code() == grpc.StatusCode.CANCELLED:
            return
        assert e.code() in ANSWERS, (path, e.code(), e.details())
        if e.code() == grpc.StatusCode.INVALID_ARGUMENT:
            assert FIELD.match(e.details()), f"{path}: INVALID_ARGUMENT should name the field: {e.details()!r}"

    run()
    intact(node, reads=not role_changing)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=not SOAK)
@given(
    st.one_of(
        st.binary(max_size=2000),
        st.binary(max_size=500).map(lambda b: b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b),  # HTTP/2 preface, then junk frames
        st.binary(max_size=200).map(lambda b: b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b),
        st.binary(max_size=200).map(lambda b: b"\x16\x03\x01\x02\x00\x01" + b),  # a TLS ClientHello start
    )
)
def test_raw_bytes_on_the_port(node, data):
    with socket.create_connection(("127.0.0.1", node.port), timeout=5) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            s.recv(4096)
        except OSError:
            pass  # the server may close on us: that is an answer
    intact(node)


# ---------------------------------------------------------------------- offline

STORE_SETTINGS = {
    "mappedFileSizeCommitLog": 16384,
    "mappedFileSizeConsumeQueue": 20 * 64,
    "maxHashSlotNum": 64,
    "maxIndexNum": 256,
    "cleanResourceInitialDelay": 3_600_000,
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A small store with several segments of every kind, left as a crash leaves it (abort file)."""
    root = str(tmp_path_factory.mktemp("pristine") / "store")
    store = MessageStore(root, STORE_SETTINGS).start()
    rnd = random.Random(5)
    for i in range(600):
        q = rnd.randrange(3)
        body = b"body-%d-" % i * rnd.randint(1, 6)
        res = store.put_messages("fz", q, [Message("fz", body, queue_id=q, properties={"KEYS": f"k{i}", "TAGS": "t"})])
        assert res.ok
        PRISTINE[(q, res.queue_offset)] = body
    assert store.wait_dispatched(10)
    store.shutdown()
    with open(os.path.join(root, "abort"), "w"):
        pass
    return root


PRISTINE: dict[tuple[int, int], bytes] = {}  # (queue, queue offset) -> body: every record the pristine store holds
REBUILDABLE = ("consumequeue" + os.sep, "index" + os.sep)  # derived from the commit log (§8): never a reason to refuse


@contextmanager
def no_loops(seconds: int):
    """Fail (instead of hanging) when fsck or recovery runs away."""

    def expired(*_):
        raise TimeoutError(f"did not finish within {seconds}s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def files_of(root: str) -> list[str]:
    out = []
    for d, _, names in os.walk(root):
        out += [os.path.relpath(os.path.join(d, n), root) for n in names if n != "lock"]
    return sorted(out)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=not SOAK)
@given(data=st.data())
def test_fsck_and_recovery_survive_damaged_files(pristine, tmp_path_factory, data):
    root = str(tmp_path_factory.mktemp("damaged") / "store")
    shutil.copytree(pristine, root)
    files = files_of(root)
    damaged = set()
    for _ in range(data.draw(st.integers(1, 4), label="damages")):
        rel = data.draw(st.sampled_from(files), label="file")
        damaged.add(rel)
        path = os.path.join(root, rel)
        size = os.path.getsize(path)
        how = data.draw(st.sampled_from(["bytes", "zero-run", "truncate", "garbage-file"]), label="how")
        with open(path, "r+b") as f:
            if how == "bytes" and size:
                for _ in range(data.draw(st.integers(1, 16))):
                    f.seek(data.draw(st.integers(0, size - 1)))
                    f.write(bytes([data.draw(st.integers(0, 255))]))
            elif how == "zero-run" and size:
                at = data.draw(st.integers(0, size - 1))
                f.seek(at)
                f.write(bytes(min(size - at, data.draw(st.integers(1, 4096)))))
            elif how == "truncate":
                f.truncate(data.draw(st.integers(0, size)))
            else:
                f.truncate(0)
                f.write(data.draw(st.binary(max_size=256)))
    with no_loops(30):
        report = offline.fsck(root, STORE_SETTINGS)  # a report, whatever it finds
        assert isinstance(report.ok, bool)
        rebuildable = all(rel.startswith(REBUILDABLE) for rel in damaged)
        try:
            store = MessageStore(root, STORE_SETTINGS).start()
        except (ConfigError, SegmentSizeError, ValueError) as e:
            # a file of the wrong size or unreadable config: refused at start with the reason
            assert not rebuildable, f"consume queues and index are rebuilt from the commit log, yet {sorted(damaged)} made it refuse: {e}"
            assert str(e), "a refusal must say why"
            return
        try:
            assert store.recovery_report.state == "done"
            for q in store.queues_of("fz"):
                offset = store.min_offset("fz", q)
                for _ in range(10_000):
                    res = store.get_message(None, "fz", q, offset, max_msgs=64)
                    try:
                        if res.status is not GetStatus.FOUND:
                            break
                        res.messages()  # decodable
                        offset = res.next_offset
                    finally:
                        res.release()
                else:
                    raise AssertionError("reading a queue did not end")
            if rebuildable:  # only derived files were damaged: every commit-log record is served, at its place
                served = {}
                for q in range(3):
                    res = store.get_message(None, "fz", q, 0, max_msgs=10_000)
                    try:
                        served.update({(q, m.queue_offset): bytes(m.body) for m in res.messages()} if res.status is GetStatus.FOUND else {})
                    finally:
                        res.release()
                missing = [k for k, body in PRISTINE.items() if served.get(k) != body]
                assert not missing, f"after damage to {sorted(damaged)}: {len(missing)} records not served as written, first {missing[:3]}"
            assert store.put_messages("fz", 0, [Message("fz", b"after", queue_id=0)]).ok
        finally:
            store.shutdown()
