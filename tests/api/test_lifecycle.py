"""Crashes, clean shutdowns, restarts, tokens and TLS with real server processes."""

import fcntl
import json
import os
import threading

import grpc
import pytest
from grpc_health.v1 import health_pb2

from msgstore.client import Client, OutMessage, StoreError
from msgstore.v1 import admin_pb2 as apb
from msgstore.v1 import admin_pb2_grpc
from msgstore.v1 import msgstore_pb2 as pb
from msgstore.v1 import msgstore_pb2_grpc as pbg
from tests.support.servers import ServerProcess, wait_until
from tests.support.tls import make_certs

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class Load:
    """Sends batches from a thread and remembers what was acknowledged."""

    def __init__(self, client: Client, topic: str):
        self.client = client
        self.topic = topic
        self.acked: dict[tuple[int, int], bytes] = {}
        self.stop = threading.Event()
        self.enough = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        i = 0
        qs = self.client.route(self.topic).queues
        while not self.stop.is_set():
            q = qs[i % len(qs)]
            msgs = [OutMessage(b"load-%d-%d" % (i, k), key=f"key-{i}-{k}") for k in range(20)]
            try:
                results = self.client.send_batch(self.topic, msgs, queue=q)
            except StoreError:
                return  # the server died under us
            for m, r in zip(msgs, results):
                if r.status == "PUT_OK":
                    self.acked[(r.queue_id, r.queue_offset)] = m.body
            if len(self.acked) >= 400:
                self.enough.set()
            i += 1


def test_sigkill_under_load_then_restart(servers, tmp_path):
    node = servers("crashy", settings=["flushDiskType=SYNC_FLUSH"])
    client = Client(node.address, timeout=5)
    load = Load(client, "load")
    load.thread.start()
    assert load.enough.wait(60)
    node.kill()  # SIGKILL mid-load
    load.stop.set()
    load.thread.join(10)
    assert os.path.exists(os.path.join(node.data_dir, "abort"))
    # Hold the data directory's lock so the restarted server has to wait: it says whose lock it
    # waits for and does not listen (a port it cannot back) until it gets the directory.
    fd = os.open(os.path.join(node.data_dir, "lock"), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        node.start(wait=False)
        wait_until(lambda: "waiting for the lock" in node.log(), what="the waiting line")
        assert node.health() is None
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    node.wait_serving()
    client = Client(node.address, timeout=10)
    st = client.admin().status()
    assert st["recovery"]["mode"] == "abnormal" and st["recovery"]["state"] == "done"
    for (qid, off), body in load.acked.items():
        q = next(x for x in client.route("load").queues if x.queue_id == qid)
        got = client.pull("load", q, off, max_messages=1)
        assert got.messages and got.messages[0].body == body, f"acknowledged {qid}/{off} lost"
    assert client.send("load", b"after").ok


def test_sigterm_is_a_clean_shutdown(server):
    client = Client(server.address)
    for i in range(20):
        client.send("clean", b"%d" % i)
    assert server.terminate() == 0
    assert not os.path.exists(os.path.join(server.data_dir, "abort"))
    logs = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    assert any(entry["msg"] == "stopped" and entry.get("clean") is True for entry in logs)
    server.start()
    client = Client(server.address)
    assert client.admin().status()["recovery"]["mode"] == "normal"
    assert sum(hi for _, hi in client.queue_offsets("clean").values()) == 20


def test_admin_token_is_enforced(servers, tmp_path):
    token_file = tmp_path / "admin-token"
    token_file.write_text("s3cret-token\n")
    node = servers("guarded", args=["--admin-token-file", str(token_file)])
    with grpc.insecure_channel(node.address) as ch:
        admin = admin_pb2_grpc.AdminStub(ch)
        with pytest.raises(grpc.RpcError) as e:
            admin.GetStatus(apb.GetStatusRequest())
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as e:
            admin.GetStatus(apb.GetStatusRequest(), metadata=(("authorization", "Bearer wrong"),))
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
        st = admin.GetStatus(apb.GetStatusRequest(), metadata=(("authorization", "Bearer s3cret-token"),))
        assert st.state == "running"
        with pytest.raises(grpc.RpcError) as e:
            admin.UpdateConfig(apb.UpdateConfigRequest(changes={"fileReservedTime": "1"}))
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # the data plane is open unless a data token is configured
        assert pbg.MessageStoreStub(ch).ListTopics(pb.ListTopicsRequest()).topics == []
    assert Client(node.address, admin_token="s3cret-token").admin().config()["fileReservedTime"] == "72"


def test_a_rotated_token_file_takes_effect_without_a_restart(servers, tmp_path):
    """A Kubernetes Secret volume is rewritten in place when the Secret rotates; the server
    follows the file (a half-written or emptied file keeps the last good token)."""
    token_file = tmp_path / "admin-token"
    token_file.write_text("first\n")
    node = servers("rotating", args=["--admin-token-file", str(token_file)])
    pid = node.proc.pid
    assert Client(node.address, admin_token="first").admin().status()["state"] == "running"
    tmp = tmp_path / "admin-token.new"
    tmp.write_text("second\n")
    os.replace(tmp, token_file)  # as the kubelet's atomic writer does

    def accepts(token: str) -> bool:
        try:
            return Client(node.address, admin_token=token, timeout=3).admin().status()["state"] == "running"
        except StoreError as e:
            assert e.code == grpc.StatusCode.PERMISSION_DENIED
            return False

    wait_until(lambda: accepts("second"), 10, what="the rotated token")
    assert not accepts("first")
    token_file.write_text("")  # a moment mid-rotation: no token at all must not open the door
    # (the file is looked at, at most once a second, when a call comes)
    wait_until(lambda: accepts("second") and "keeping the previous token" in node.log(), 10, what="the server to see the emptied file")
    assert accepts("second")
    with grpc.insecure_channel(node.address) as ch:  # not an open door either: no token is still UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as e:
            admin_pb2_grpc.AdminStub(ch).GetStatus(apb.GetStatusRequest(), timeout=5)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert node.proc.pid == pid


def test_optional_data_token(servers, tmp_path):
    (tmp_path / "t").write_text("data-token")
    node = servers("tokened", args=["--token-file", str(tmp_path / "t")])
    with pytest.raises(StoreError) as e:
        Client(node.address).send("x", b"y")
    assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert Client(node.address, token="data-token").send("x", b"y").ok
    assert node.health() == SERVING  # probes never need a token


def test_tls_and_client_certificates(servers, tmp_path):
    certs = make_certs(str(tmp_path / "certs"))
    node = servers("tls", tls_ca=certs.ca, args=["--tls-cert", certs.server_cert, "--tls-key", certs.server_key])
    assert Client(node.address, tls_ca=certs.ca).send("tls", b"over tls").ok
    with pytest.raises(StoreError) as e:
        Client(node.address, timeout=3).send("tls", b"plaintext")  # a plaintext client is refused
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    with pytest.raises(StoreError) as e:
        Client(node.address, tls_ca=certs.other_ca, timeout=3).send("tls", b"wrong CA")
    assert e.value.code == grpc.StatusCode.UNAVAILABLE and "certificate" in e.value.details.lower(), e.value
    node.terminate()
    mtls = servers(
        "mtls",
        tls_ca=certs.ca,
        tls_client=(certs.client_cert, certs.client_key),
        args=["--tls-cert", certs.server_cert, "--tls-key", certs.server_key, "--tls-client-ca", certs.ca],
    )
    with pytest.raises(StoreError) as e:
        Client(mtls.address, tls_ca=certs.ca, timeout=3).send("tls", b"no client cert")
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    ok = Client(mtls.address, tls_ca=certs.ca, tls_cert=certs.client_cert, tls_key=certs.client_key)
    assert ok.send("tls", b"mutual").ok


def test_bad_configuration_fails_fast_naming_the_key(tmp_path):
    node = ServerProcess(str(tmp_path / "bad"), settings=["diskSpaceWarningLevelRatio=50"])
    node.start(wait=False)
    assert node.proc.wait(30) == 2
    assert "diskSpaceWarningLevelRatio" in node.log()
