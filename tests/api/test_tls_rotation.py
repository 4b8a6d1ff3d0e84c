"""Issue 32, TLS: a renewed certificate is used without a restart (the files are followed, as
the token files are), a renewal landing file by file never leaves the server with a key that does
not match its certificate, and members replicate over TLS, verifying each other with a CA bundle
of their own (``serve --tls-ca``). Real server processes; certificates from openssl."""

from __future__ import annotations

import os
import shutil

import grpc
import pytest

from msgstore.client import Client, OutMessage, StoreError
from tests.support.servers import ServerProcess, free_port, wait_until
from tests.support.tls import make_certs


def reaches(address: str, ca: str) -> bool:
    """A new client trusting ``ca`` can send (a new connection: a new handshake)."""
    try:
        with Client(address, tls_ca=ca, timeout=3, send_streams=False) as c:
            return c.send("tls", b"probe").status == "PUT_OK"
    except StoreError:
        return False


def test_a_renewed_certificate_is_used_without_a_restart(servers, tmp_path):
    old, new = make_certs(str(tmp_path / "old")), make_certs(str(tmp_path / "new"))
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(old.server_cert, live / "tls.crt")
    shutil.copy(old.server_key, live / "tls.key")
    node = servers("tls", tls_ca=old.ca, args=["--tls-cert", str(live / "tls.crt"), "--tls-key", str(live / "tls.key")])
    pid = node.proc.pid
    kept = Client(node.address, tls_ca=old.ca, timeout=10)  # a connection made before the renewal
    assert kept.send("tls", b"before").status == "PUT_OK"
    # the renewal lands file by file: the new key first, and a handshake in between
    shutil.copy(new.server_key, live / "tls.key.tmp")
    os.replace(live / "tls.key.tmp", live / "tls.key")
    # handshakes meanwhile still get the previous pair (the old certificate), and the server says why
    wait_until(
        lambda: reaches(node.address, old.ca) and "not usable yet" in node.whole_log(),
        what="the server to look at the half-renewed pair and keep the previous one",
    )
    shutil.copy(new.server_cert, live / "tls.crt.tmp")
    os.replace(live / "tls.crt.tmp", live / "tls.crt")
    wait_until(lambda: reaches(node.address, new.ca), what="a new connection to get the renewed certificate")
    assert not reaches(node.address, old.ca)  # every new handshake now shows the new certificate
    assert kept.send("tls", b"after").status == "PUT_OK"  # an open connection keeps going
    assert node.proc.pid == pid and node.proc.poll() is None  # no restart
    kept.close()


def test_a_certificate_that_does_not_match_its_key_stops_the_start(servers, tmp_path):
    a, b = make_certs(str(tmp_path / "a")), make_certs(str(tmp_path / "b"))
    node = ServerProcess(str(tmp_path / "bad"), name="bad", args=["--tls-cert", a.server_cert, "--tls-key", b.server_key])
    node.start(wait=False)
    assert node.proc.wait(30) != 0
    assert "are not a usable pair" in node.whole_log()


def test_members_replicate_over_tls_verifying_each_other_with_their_ca(tmp_path):
    certs = make_certs(str(tmp_path / "certs"))
    ports = [free_port(), free_port()]
    tls = ["--tls-cert", certs.server_cert, "--tls-key", certs.server_key, "--tls-ca", certs.ca]
    master = ServerProcess(str(tmp_path / "m0"), port=ports[0], name="m0", tls_ca=certs.ca, args=["--group", "g", *tls])
    follower = ServerProcess(
        str(tmp_path / "m1"), port=ports[1], name="m1", tls_ca=certs.ca, args=["--group", "g", "--replica-of", master.address, *tls]
    )
    try:
        master.start()
        follower.start()
        with Client([master.address, follower.address], tls_ca=certs.ca, timeout=10) as c:
            assert c.send_batch("tls", [OutMessage(b"m%d" % i) for i in range(50)]).all_ok
            end = c.admin(master.address).role_pb().end_offset

            def copied() -> bool:
                r = c.admin(follower.address).role_pb()
                return r.connected and r.end_offset == end

            wait_until(copied, what="the follower to copy the master's log over TLS")
        # a member that cannot verify the master (another CA) is not let copy anything
        stranger = ServerProcess(
            str(tmp_path / "m2"),
            name="m2",
            tls_ca=certs.ca,
            args=["--group", "g", "--replica-of", master.address, *tls[:4], "--tls-ca", certs.other_ca],
        )
        stranger.start()
        with Client(stranger.address, tls_ca=certs.ca, timeout=10) as c:
            wait_until(lambda: "certificate" in stranger.whole_log().lower(), what="the stranger to fail its handshake")
            assert c.admin(stranger.address).role_pb().end_offset == 0
        stranger.kill()
    finally:
        follower.kill()
        master.kill()


def test_users_are_checked_over_tls(servers, tmp_path):
    certs = make_certs(str(tmp_path / "certs"))
    (tmp_path / "admin").write_text("tls-admin-token")
    node = servers(
        "tls-users",
        tls_ca=certs.ca,
        settings=["authorizationEnabled=true"],
        args=["--tls-cert", certs.server_cert, "--tls-key", certs.server_key, "--admin-token-file", str(tmp_path / "admin")],
    )
    with Client(node.address, tls_ca=certs.ca, admin_token="tls-admin-token", timeout=10) as admin:
        admin.put_user("app", "app-secret-key", entries=[{"resource": "topic:tls", "actions": ["pub"]}])
    with Client(node.address, tls_ca=certs.ca, access_key="app", secret_key="app-secret-key", timeout=10) as app:
        assert app.send("tls", b"signed, encrypted").status == "PUT_OK"
        with pytest.raises(StoreError) as e:
            app.send("elsewhere", b"x")
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
