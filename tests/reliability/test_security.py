"""Who may do what: every admin RPC needs the admin token, every data RPC the data token when
one is set; hostile topic names never reach the file system; oversized requests are refused
before they are parsed; the pods the operator renders run non-root on a read-only root."""

from __future__ import annotations

import os

import grpc
import pytest

from msgstore.store import Message, MessageStore, PutStatus
from msgstore.v1 import msgstore_pb2 as pb
from msgstore.v1 import msgstore_pb2_grpc as pbg
from tests.reliability.test_fuzz import METHODS
from tests.support.servers import ServerProcess

TOKEN = "an-admin-token-of-some-length"
DATA_TOKEN = "a-data-token"
HOSTILE = ["../escape", "..", ".", "a/../../b", "/etc/passwd", "a\\b", "a\x00b", "x" * 128]


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    base = tmp_path_factory.mktemp("guarded")
    (base / "admin").write_text(TOKEN + "\n")
    (base / "data").write_text(DATA_TOKEN + "\n")
    server = ServerProcess(
        str(base / "store"), args=["--admin-token-file", str(base / "admin"), "--token-file", str(base / "data")]
    ).start()
    yield server
    server.kill()


def _call(server, path: str, method, token: str | None):
    req = method.input_type._concrete_class()
    metadata = (("authorization", f"Bearer {token}"),) if token is not None else ()
    with server.channel() as ch:
        if method.client_streaming:
            list(
                ch.stream_stream(path, request_serializer=lambda m: m.SerializeToString(), response_deserializer=lambda b: b)(
                    iter([req]), timeout=5, metadata=metadata
                )
            )
        elif method.server_streaming:
            stream = ch.unary_stream(path, request_serializer=lambda m: m.SerializeToString(), response_deserializer=lambda b: b)(
                req, timeout=2, metadata=metadata
            )
            try:
                next(stream, None)
            finally:
                stream.cancel()
        else:
            ch.unary_unary(path, request_serializer=lambda m: m.SerializeToString(), response_deserializer=lambda b: b)(
                req, timeout=5, metadata=metadata
            )


@pytest.mark.parametrize("path, method", METHODS, ids=[p.rsplit("/", 1)[1] for p, _ in METHODS])
def test_every_rpc_checks_its_token(guarded, path, method):
    admin = "/msgstore.v1.Admin/" in path
    right = TOKEN if admin else DATA_TOKEN
    wrong_same_length = right[:-1] + ("x" if right[-1] != "x" else "y")
    for token, code in (
        (None, grpc.StatusCode.UNAUTHENTICATED),
        (wrong_same_length, grpc.StatusCode.PERMISSION_DENIED),
        (right + "-longer", grpc.StatusCode.PERMISSION_DENIED),
        ("", grpc.StatusCode.PERMISSION_DENIED),
    ):
        with pytest.raises(grpc.RpcError) as e:
            _call(guarded, path, method, token)
        assert e.value.code() == code, (path, token, e.value.code(), e.value.details())
    if admin:  # the data token does not open the admin service
        with pytest.raises(grpc.RpcError) as e:
            _call(guarded, path, method, DATA_TOKEN)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    try:
        _call(guarded, path, method, right)
    except grpc.RpcError as e:  # let in: whatever it answers is about the (empty) request or the node, not the caller
        allowed = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.DEADLINE_EXCEEDED)
        if path.endswith("/Elect"):  # a node without an arbiter says so
            allowed += (grpc.StatusCode.FAILED_PRECONDITION,)
        assert e.code() in allowed, (
            path,
            e.code(),
            e.details(),
        )


def _tree(path: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, n), path) for d, dirs, names in os.walk(path) for n in names + dirs}


def test_hostile_topic_names_never_reach_the_file_system(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = outside / "store"
    server = ServerProcess(str(root)).start()
    try:
        before = _tree(str(tmp_path))
        with server.channel() as ch:
            stub = pbg.MessageStoreStub(ch)
            for topic in HOSTILE:
                for call, req in (
                    (stub.Send, pb.SendRequest(entries=[pb.SendEntry(topic=topic, body=b"x")])),
                    (stub.CreateTopic, pb.CreateTopicRequest(topic=topic)),
                    (stub.Pull, pb.PullRequest(topic=topic)),
                    (stub.CommitOffset, pb.CommitOffsetRequest(group="g", topic=topic, queue_id=0, offset=1)),
                ):
                    with pytest.raises(grpc.RpcError) as e:
                        call(req, timeout=5)
                    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and e.value.details().startswith(
                        ("topic", "entries[0].topic")
                    ), (topic, e.value.details())
        after = _tree(str(tmp_path))
        assert not {p for p in after - before if not p.startswith("outside/store")}
    finally:
        server.terminate()
    # and the engine refuses them itself, whoever calls it
    with MessageStore(str(tmp_path / "embedded")) as store:
        for topic in HOSTILE:
            r = store.put_messages(topic, 0, [Message(topic, b"x", queue_id=0)])
            assert r.status is PutStatus.MESSAGE_ILLEGAL, (topic, r)
            assert store.consume_queue(topic, 0) is None
    assert not (tmp_path / "escape").exists() and not (tmp_path.parent / "escape").exists()


def test_oversized_requests_are_refused_before_parsing(tmp_path):
    server = ServerProcess(str(tmp_path / "store")).start()
    try:
        with server.channel() as ch:
            stub = pbg.MessageStoreStub(ch)
            big = pb.SendRequest(entries=[pb.SendEntry(topic="t", body=b"x" * (4 << 20)) for _ in range(17)])  # 68 MiB
            with pytest.raises(grpc.RpcError) as e:
                stub.Send(big, timeout=60)
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert stub.ListTopics(pb.ListTopicsRequest(), timeout=5).topics == []  # nothing of it was stored
        assert server.health() == 1
    finally:
        server.terminate()


def test_rendered_store_pods_run_non_root_on_a_read_only_root():
    from msgstore_operator import render, spec

    s = spec.parse({"metadata": {"name": "s", "namespace": "n"}, "spec": {"replicas": 1}})
    pod = render.stateful_set(s)["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False and c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    writable = {m["mountPath"] for m in c["volumeMounts"] if not m.get("readOnly")}
    assert writable == {"/var/lib/msgstore", "/tmp"}  # the data volume and a scratch dir, nothing else
