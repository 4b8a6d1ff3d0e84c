"""spec.tls under the operator (kmock, real store processes): certificates the operator issues
and renews, or a Secret the user names, and clients that reach the pods only over TLS."""

import base64
import datetime
import os
import ssl

import grpc
import kubernetes_validate
import pytest

from msgstore.client import Client, OutMessage, StoreError
from msgstore_operator import certificates
from msgstore_operator.spec import RENEW_CERTIFICATES, Tls, parse
from msgstore_operator.tls import Certificates
from tests.operator.conftest import NS, ApiServer

STS = "apps/v1/statefulsets"
SECRETS = "v1/secrets"
SMALL = {"mappedFileSizeCommitLog": 65536, "mappedFileSizeConsumeQueue": 4000, "extra": {"maxHashSlotNum": "1024", "maxIndexNum": "4096"}}
SERVER_NAME = f"orders.{NS}.svc"


def _secret(env, name: str) -> dict[str, bytes]:
    obj = env.obj(SECRETS, name) or {}
    return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}


def _files(tmp_path, **data: bytes) -> dict[str, str]:
    out = {}
    for key, value in data.items():
        path = tmp_path / key
        path.write_bytes(value)
        out[key] = str(path)
    return out


def _served_certificate(address: str) -> bytes:
    host, port = address.rsplit(":", 1)
    return ssl.get_server_certificate((host, int(port))).encode()


def _same_certificate(a: bytes, b: bytes) -> bool:
    return ssl.PEM_cert_to_DER_cert(a.decode()) == ssl.PEM_cert_to_DER_cert(b.decode())


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_the_operator_issues_certificates_and_pods_serve_only_tls(env, tmp_path):
    await env.create(replicas=2, store=SMALL, tls={})
    await env.until(lambda: env.condition("Ready").get("status") == "True", what="Ready", timeout=90)
    tls, ca = _secret(env, "orders-tls"), _secret(env, "orders-ca")
    assert env.obj(SECRETS, "orders-tls")["type"] == "kubernetes.io/tls"
    assert env.obj(SECRETS, "orders-tls")["metadata"]["ownerReferences"][0]["name"] == "orders"
    assert tls["ca.crt"] == ca["ca.crt"] and certificates.signed_by(tls["tls.crt"], ca["ca.crt"])
    pod_ips = sorted(c.ip for c in env.cluster.containers.values())
    # the first certificate predates the pods' addresses; a later pass adds them
    await env.until(lambda: set(pod_ips) <= certificates.read(_secret(env, "orders-tls")["tls.crt"]).ips, what="pod addresses")
    issued = certificates.read(_secret(env, "orders-tls")["tls.crt"])
    assert {SERVER_NAME, "orders-0", "orders-1", f"*.orders-headless.{NS}.svc"} <= issued.dns
    st = env.store()["status"]["tls"]
    assert st["secretName"] == "orders-tls" and st["caSecretName"] == "orders-ca" and st["notAfter"].endswith("Z")
    assert st["caCertSecretName"] == "orders-ca-cert" and _secret(env, "orders-ca-cert") == {"ca.crt": ca["ca.crt"]}  # no key in it
    assert env.events("CertificateIssued")
    sts = env.obj(STS, "orders")
    kubernetes_validate.validate(sts, "1.30.0", strict=True)
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["grpc"]["port"] == env.port + 2  # the plain-text health port
    assert "--tls-server-name" in container["args"] and SERVER_NAME in container["args"]

    files = _files(tmp_path, **{"ca.crt": tls["ca.crt"]})
    address = env.cluster.containers["orders-0"].address
    with Client(address, tls_ca=files["ca.crt"], server_name=SERVER_NAME, timeout=10) as c:
        c.create_topic("t", 2)
        sent = c.send("t", b"over tls")
        q = next(x for x in c.route("t").queues if x.node == sent.node and x.queue_id == sent.queue_id)
        assert [m.body for m in c.pull("t", q, sent.queue_offset, timeout_ms=3000).messages] == [b"over tls"]
    with pytest.raises(StoreError) as e:
        Client(address, timeout=3).admin().status()
    assert e.value.code == grpc.StatusCode.UNAVAILABLE  # plain text is not served

    # a renewal asked for: a new certificate in the Secret, the same CA, no restart
    before = _secret(env, "orders-tls")["tls.crt"]
    pids = {p: c.proc.pid for p, c in env.cluster.containers.items()}
    await env.patch(annotations={RENEW_CERTIFICATES: "now"})
    await env.until(lambda: _secret(env, "orders-tls")["tls.crt"] != before, what="a renewed certificate")
    assert certificates.signed_by(_secret(env, "orders-tls")["tls.crt"], ca["ca.crt"])
    await env.until(lambda: env.events("CertificateRenewed"), what="the CertificateRenewed event")
    assert {p: c.proc.pid for p, c in env.cluster.containers.items()} == pids
    await env.until(lambda: env.store()["status"]["tls"].get("renewRequest") == "now", what="the request in status")


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_a_named_secret_with_mutual_tls(env, tmp_path):
    await env.create(replicas=1, store=SMALL, tls={"secretName": "orders-cert", "clientAuthentication": "Required"})
    await env.until(lambda: env.condition("ReferenceMissing").get("reason") == "SecretNotFound", what="SecretNotFound")
    assert "spec.tls.secretName" in env.condition("ReferenceMissing")["message"]
    # cert-manager's part: a CA and a certificate naming the client Service
    now = datetime.datetime.now(datetime.UTC)
    ca = certificates.issue_ca("users ca", now)
    pair = certificates.issue_server(ca, "orders", [SERVER_NAME], [], 30, now)
    await env.put_secret("orders-cert", {"tls.crt": pair.cert.decode(), "tls.key": pair.key.decode(), "ca.crt": ca.cert.decode()})
    await env.until(lambda: env.condition("Ready").get("status") == "True", what="Ready", timeout=90)
    assert env.obj(SECRETS, "orders-tls") is None and env.obj(SECRETS, "orders-ca") is None  # nothing issued
    assert _secret(env, "orders-ca-cert") == {"ca.crt": ca.cert}  # the user's CA, published for clients
    other_ca = certificates.issue_ca("someone else", now)
    stranger = certificates.issue_server(other_ca, "x", ["x"], [], 30, now)
    client_pair = certificates.issue_server(ca, "app", ["app"], [], 30, now)
    f = _files(tmp_path, **{"ca.crt": ca.cert, "app.crt": client_pair.cert, "app.key": client_pair.key})
    f |= _files(tmp_path, **{"x.crt": stranger.cert, "x.key": stranger.key})
    address = env.cluster.containers["orders-0"].address
    with Client(address, tls_ca=f["ca.crt"], tls_cert=f["app.crt"], tls_key=f["app.key"], server_name=SERVER_NAME, timeout=10) as c:
        c.create_topic("t", 1)
        sent = c.send("t", b"m")
        assert [m.body for m in c.pull("t", c.route("t").queues[0], sent.queue_offset, timeout_ms=3000).messages] == [b"m"]
    for cert, key in ((None, None), (f["x.crt"], f["x.key"])):
        with pytest.raises(StoreError) as e:
            with Client(address, tls_ca=f["ca.crt"], tls_cert=cert, tls_key=key, server_name=SERVER_NAME, timeout=3) as c:
                c.send("t", b"m")
        assert e.value.code == grpc.StatusCode.UNAVAILABLE
    assert _same_certificate(_served_certificate(address), pair.cert)


def _spec(**tls):
    return parse({"metadata": {"name": "orders", "namespace": NS}, "spec": {"replicas": 2, "tls": tls}})


def test_renewal_is_due_for_expiry_names_addresses_ca_and_requests():
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    spec = _spec(validityDays=30, renewBeforeDays=10)
    assert spec.tls == Tls(None, False, 30, 10)
    ca = certificates.issue_ca("ca", now)
    pair = certificates.issue_server(ca, SERVER_NAME, spec.tls_dns_names(), ["10.0.0.1"], 30, now)
    data = {"tls.crt": pair.cert, "tls.key": pair.key, "ca.crt": ca.cert}

    def due(at=now, ips=("10.0.0.1",), request="", status=None, with_ca=ca, with_data=data):
        return Certificates(None, [], now=at)._renewal_due(spec, with_ca, with_data, list(ips), request, status or {})

    assert due() == ""
    assert due(at=now + datetime.timedelta(days=19)) == ""
    assert "days left" in due(at=now + datetime.timedelta(days=21))
    assert "10.0.0.2" in due(ips=("10.0.0.1", "10.0.0.2"))
    assert "asked for" in due(request="x") and due(request="x", status={"renewRequest": "x"}) == ""
    assert "CA" in due(with_ca=certificates.issue_ca("new ca", now))
    assert due(with_data={**data, "tls.key": certificates.issue_ca("k", now).key}).startswith("the Secret's key")
    assert due(with_data={"tls.crt": pair.cert}) == "none yet"


@pytest.mark.parametrize(
    "tls, field",
    [
        ({"clientAuthentication": "Sometimes"}, "spec.tls.clientAuthentication"),
        ({"validityDays": 1}, "spec.tls.validityDays"),
        ({"validityDays": 10, "renewBeforeDays": 10}, "spec.tls.renewBeforeDays"),
    ],
)
def test_bad_tls_specs_name_the_field(tls, field):
    from msgstore_operator.spec import SpecError

    with pytest.raises(SpecError) as e:
        _spec(**tls)
    assert e.value.field == field


def test_the_operator_keeps_its_files_private(tmp_path, monkeypatch):
    from msgstore_operator.tls import _files

    monkeypatch.setenv("MSGSTORE_OPERATOR_TMP", str(tmp_path))
    reach = _files(_spec(clientAuthentication="Required"), {"ca.crt": b"C", "tls.crt": b"T", "tls.key": b"K"})
    assert reach.server_name == SERVER_NAME and open(reach.tls_key, "rb").read() == b"K"
    assert os.stat(reach.tls_key).st_mode & 0o077 == 0


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_switching_tls_on_and_off_rolls_the_pods_and_the_operator_follows(env, tmp_path):
    """During the roll each pod is reached as its own template serves (plain text or TLS), so
    the roll finishes both ways; afterwards only the new way is served."""
    await env.create(replicas=2, store=SMALL)
    await env.until(lambda: env.condition("Ready").get("status") == "True", what="Ready", timeout=90)

    def rolled_and_ready() -> bool:
        st = env.store().get("status") or {}
        return (
            (st.get("lastRoll") or {}).get("state") == "done"
            and env.condition("Ready").get("status") == "True"
            and all(p.get("upToDate") for p in st.get("pods", []))
        )

    rolls = len([h for h in env.cluster.history if h[0] == "stopped"])
    await env.patch(spec={"tls": {}})
    await env.until(
        lambda: len([h for h in env.cluster.history if h[0] == "stopped"]) >= rolls + 2 and rolled_and_ready(),
        what="the roll to TLS",
        timeout=120,
    )
    ca = _files(tmp_path, **{"ca.crt": _secret(env, "orders-tls")["ca.crt"]})["ca.crt"]
    for pod in ("orders-0", "orders-1"):
        address = env.cluster.containers[pod].address
        assert Client(address, tls_ca=ca, server_name=SERVER_NAME, timeout=5).admin().status()["state"] == "running"
    rolls = len([h for h in env.cluster.history if h[0] == "stopped"])
    await env.patch(spec={"tls": None})
    await env.until(
        lambda: len([h for h in env.cluster.history if h[0] == "stopped"]) >= rolls + 2 and rolled_and_ready(),
        what="the roll back to plain text",
        timeout=120,
    )
    for pod in ("orders-0", "orders-1"):
        assert Client(env.cluster.containers[pod].address, timeout=5).admin().status()["state"] == "running"
    assert "tls" not in env.store()["status"]


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_a_replicated_store_replicates_over_tls(env, tmp_path):
    """Members follow their master over TLS, verifying the client Service's name (they dial
    each other by address); a SYNC send is acknowledged only once a follower holds it."""
    from tests.operator.test_replication import followers_connected

    replication = {"replicas": 3, "mode": "SYNC", "inSyncReplicas": 2, "failoverAfterSeconds": 2}
    await env.create(replicas=1, store=SMALL, replication=replication, tls={"clientAuthentication": "Required"})
    await env.until(
        lambda: env.condition("Ready").get("status") == "True" and followers_connected(env), timeout=90, what="Ready with followers"
    )
    data = _secret(env, "orders-tls")
    f = _files(tmp_path, **{"ca.crt": data["ca.crt"], "tls.crt": data["tls.crt"], "tls.key": data["tls.key"]})
    addresses = ",".join(c.address for c in env.cluster.containers.values())
    with Client(addresses, tls_ca=f["ca.crt"], tls_cert=f["tls.crt"], tls_key=f["tls.key"], server_name=SERVER_NAME, timeout=10) as c:
        c.create_topic("t", 1)
        assert all(r.status == "PUT_OK" for r in c.send_batch("t", [OutMessage(b"a"), OutMessage(b"b")]))


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_a_secret_of_the_operators_name_that_it_did_not_make_is_never_used(env):
    await env.put_secret("orders-tls", {"tls.crt": "someone else's", "tls.key": "x", "ca.crt": "y"})
    await env.create(replicas=1, store=SMALL, tls={})
    cond = await env.until(lambda: (c := env.condition("ReferenceMissing")).get("reason") == "SecretNotOurs" and c, what="SecretNotOurs")
    assert "orders-tls" in cond["message"] and "spec.tls" in cond["message"]
    assert _secret(env, "orders-tls")["tls.crt"] == b"someone else's"  # untouched
