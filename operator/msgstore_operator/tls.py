"""``spec.tls`` on the cluster: the Secrets holding a store's CA and its pods' certificate,
issued and renewed here, and what the operator's own client needs to reach TLS pods.

One server certificate serves every pod (they share the StatefulSet's Secret volume). Its
names are the client Service's, every pod's under the headless Service, the pod names and the
pod addresses; members and the operator verify the client Service's name (they dial pods by
address, and a renewal for a new pod address takes the kubelet a moment to deliver). It is
renewed when ``renewBeforeDays`` remain, when a name or a pod address is missing from it, when
the CA changed, and when the user asks (annotation ``msgstore.io/renew-certificates``); the
pods load a renewed one without a restart (``api/tls.py``). The CA itself is not renewed.
"""

from __future__ import annotations

import atexit
import base64
import datetime
import ipaddress
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

from . import certificates
from .kube import Kube, NotFound
from .pods import ReferenceMissing
from .spec import RENEW_CERTIFICATES, Spec

KEYS = ("tls.crt", "tls.key", "ca.crt")


@dataclass(frozen=True)
class Reach:
    """How the operator's client reaches the pods: plain text, or TLS with these files."""

    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    server_name: str | None = None

    def client_options(self) -> dict[str, Any]:
        if not self.tls_ca:
            return {}
        return {"tls_ca": self.tls_ca, "tls_cert": self.tls_cert, "tls_key": self.tls_key, "server_name": self.server_name}


PLAIN = Reach()


def _decoded(secret: dict[str, Any]) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def _encoded(data: dict[str, bytes]) -> dict[str, str]:
    return {k: base64.b64encode(v).decode() for k, v in data.items()}


def _secret(spec: Spec, name: str, data: dict[str, bytes], kind: str, owner: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": kind,
        "metadata": {"name": name, "namespace": spec.namespace, "labels": dict(spec.labels), "ownerReferences": owner},
        "data": _encoded(data),
    }


class Certificates:
    """One pass's look at a store's certificates: ``prepare`` before the pods are asked."""

    def __init__(self, kube: Kube, owner: list[dict[str, Any]], now: datetime.datetime | None = None):
        self.kube = kube
        self.owner = owner
        self.now = now or datetime.datetime.now(datetime.UTC)
        self.events: list[tuple[str, str, str]] = []
        self.status: dict[str, Any] | None = None
        self.ca_cert: bytes | None = None  # what clients verify the pods with (given to users' Secrets too)

    def prepare(self, spec: Spec, pod_ips: list[str], annotations: dict[str, Any], status: dict[str, Any]) -> Reach:
        """Issue or renew what is due; :class:`ReferenceMissing` when the user's Secret is not
        there, or a Secret of the operator's name is someone else's."""
        if spec.tls is None:
            return PLAIN
        pod_ips = sorted({ipaddress.ip_address(ip).compressed for ip in pod_ips})  # (as the certificate spells them)
        if spec.tls.issued:
            data = self._issued(spec, pod_ips, annotations, status.get("tls") or {})
        else:
            data = self._users(spec)
        self._publish_ca(spec, data["ca.crt"])
        self.ca_cert = data["ca.crt"]
        issued = certificates.read(data["tls.crt"])
        self.status = {**(self.status or {}), "secretName": spec.tls_secret, "notAfter": _stamp(issued.not_after)}
        self.status["caCertSecretName"] = spec.ca_cert_secret
        if spec.tls.issued:
            self.status["caSecretName"] = spec.ca_secret
        return _files(spec, data)

    def _ours(self, spec: Spec, name: str, live: dict[str, Any] | None) -> dict[str, Any] | None:
        """``live`` when it is this store's (or None); a Secret of that name that the operator did
        not make for this store is never used nor overwritten."""
        if live is None:
            return None
        uid = self.owner[0].get("uid") if self.owner else None
        if not any(o.get("uid") == uid for o in (live.get("metadata") or {}).get("ownerReferences") or []):
            raise ReferenceMissing(
                "SecretNotOurs",
                f"Secret {name} exists and was not made by the operator for MessageStore {spec.name} (spec.tls): "
                "delete or rename it, or name your own certificate's Secret in spec.tls.secretName",
            )
        return live

    def _write(self, spec: Spec, obj: dict[str, Any], live: dict[str, Any] | None) -> None:
        if live is None:
            self.kube.create(obj)
        else:
            self.kube.replace({**obj, "metadata": {**obj["metadata"], "resourceVersion": live["metadata"]["resourceVersion"]}})

    def _publish_ca(self, spec: Spec, ca_cert: bytes) -> None:
        """The CA certificate alone, for clients (Strimzi's <cluster>-cluster-ca-cert): the
        Secret with the pods' certificate also holds their private key."""
        name = spec.ca_cert_secret
        live = self._ours(spec, name, self.kube.get_or_none("Secret", spec.namespace, name))
        if live is not None and _decoded(live).get("ca.crt") == ca_cert:
            return
        self._write(spec, _secret(spec, name, {"ca.crt": ca_cert}, "Opaque", self.owner), live)

    def _users(self, spec: Spec) -> dict[str, bytes]:
        name = spec.tls_secret
        try:
            data = _decoded(self.kube.get("Secret", spec.namespace, name))
        except NotFound:
            raise ReferenceMissing(
                "SecretNotFound", f"Secret {name} (spec.tls.secretName) does not exist in namespace {spec.namespace}"
            ) from None
        missing = [k for k in KEYS if not data.get(k)]
        if missing:
            raise ReferenceMissing("SecretKeyNotFound", f"Secret {name} (spec.tls.secretName) has no {', '.join(missing)}")
        try:
            certificates.read(data["tls.crt"])
        except ValueError as e:
            raise ReferenceMissing("SecretInvalid", f"Secret {name} (spec.tls.secretName): tls.crt is not a certificate: {e}") from None
        return data

    def _ca(self, spec: Spec) -> certificates.Pair:
        live = self._ours(spec, spec.ca_secret, self.kube.get_or_none("Secret", spec.namespace, spec.ca_secret))
        data = _decoded(live) if live else {}
        if data.get("ca.crt") and data.get("ca.key"):
            return certificates.Pair(data["ca.crt"], data["ca.key"])
        ca = certificates.issue_ca(f"msgstore {spec.namespace}/{spec.name} CA", self.now)
        self._write(spec, _secret(spec, spec.ca_secret, {"ca.crt": ca.cert, "ca.key": ca.key}, "Opaque", self.owner), live)
        self.events.append(("Normal", "CertificateAuthorityIssued", f"issued the store's CA into Secret {spec.ca_secret}"))
        return ca

    def _issued(self, spec: Spec, pod_ips: list[str], annotations: dict[str, Any], tls_status: dict[str, Any]) -> dict[str, bytes]:
        assert spec.tls is not None
        ca = self._ca(spec)
        live = self._ours(spec, spec.tls_secret, self.kube.get_or_none("Secret", spec.namespace, spec.tls_secret))
        data = _decoded(live) if live else {}
        request = str(annotations.get(RENEW_CERTIFICATES) or "")
        why = self._renewal_due(spec, ca, data, pod_ips, request, tls_status)
        self.status = {"renewRequest": request} if request else {}
        if not why:
            return data
        pair = certificates.issue_server(ca, spec.tls_server_name, spec.tls_dns_names(), sorted(pod_ips), spec.tls.validity_days, self.now)
        data = {"tls.crt": pair.cert, "tls.key": pair.key, "ca.crt": ca.cert}
        self._write(spec, _secret(spec, spec.tls_secret, data, "kubernetes.io/tls", self.owner), live)
        until = _stamp(certificates.read(pair.cert).not_after)
        reason = "CertificateIssued" if live is None else "CertificateRenewed"
        self.events.append(("Normal", reason, f"Secret {spec.tls_secret}: a certificate valid until {until} ({why})"))
        return data

    def _renewal_due(
        self, spec: Spec, ca: certificates.Pair, data: dict[str, bytes], pod_ips: list[str], request: str, tls_status: dict[str, Any]
    ) -> str:
        """Why the server certificate must be (re)issued now, or ''."""
        assert spec.tls is not None
        if not all(data.get(k) for k in KEYS):
            return "none yet"
        try:
            issued = certificates.read(data["tls.crt"])
            pair_ok = certificates.key_matches(certificates.Pair(data["tls.crt"], data["tls.key"]))
        except ValueError:
            return "the Secret held no usable certificate"
        if not pair_ok:
            return "the Secret's key did not match its certificate"
        if data["ca.crt"] != ca.cert or not certificates.signed_by(data["tls.crt"], ca.cert):
            return f"the CA in Secret {spec.ca_secret} changed"
        left = issued.not_after - self.now
        if left <= datetime.timedelta(days=spec.tls.renew_before_days):
            return f"{max(0, left.days)} days left, renewBeforeDays {spec.tls.renew_before_days}"
        missing = [n for n in spec.tls_dns_names() if n not in issued.dns] + [ip for ip in pod_ips if ip not in issued.ips]
        if missing:
            return f"new names or pod addresses: {', '.join(missing[:5])}"
        if request and request != tls_status.get("renewRequest"):
            return f"asked for by {RENEW_CERTIFICATES}={request}"
        return ""


def _stamp(when: datetime.datetime) -> str:
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_PRIVATE: list[str] = []


def _private_dir() -> str:
    """This process's own temporary directory (0700, removed at exit): two operators on one
    host (two test runs, a second install's operator run by hand) must not overwrite each
    other's CA files for a store of the same namespace and name."""
    if not _PRIVATE:
        _PRIVATE.append(tempfile.mkdtemp(prefix="msgstore-operator-"))
        atexit.register(shutil.rmtree, _PRIVATE[0], True)
    return _PRIVATE[0]


def _files(spec: Spec, data: dict[str, bytes], mutual: bool | None = None, server_name: str | None = None, secret: str = "") -> Reach:
    """The CA (and, for mutual TLS, the pods' own pair: the operator presents it as a client)
    as files the gRPC client reads, under the operator's temporary directory."""
    mutual = bool(spec.tls and spec.tls.client_authentication) if mutual is None else mutual
    base = os.path.join(os.environ.get("MSGSTORE_OPERATOR_TMP") or _private_dir(), "msgstore-operator", spec.namespace, spec.name)
    if secret:
        base = os.path.join(base, secret)
    os.makedirs(base, mode=0o700, exist_ok=True)
    paths = {}
    for key in ("ca.crt", *(("tls.crt", "tls.key") if mutual else ())):
        path = paths[key] = os.path.join(base, key)
        try:
            with open(path, "rb") as f:
                same = f.read() == data[key]
        except FileNotFoundError:
            same = False
        if not same:
            tmp = f"{path}.{os.getpid()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data[key])
            os.replace(tmp, path)
    return Reach(paths["ca.crt"], paths.get("tls.crt"), paths.get("tls.key"), server_name or spec.tls_server_name)


def pod_tls(pod: dict[str, Any]) -> tuple[str, str, bool] | None:
    """How a pod serves, from its own spec: (its certificate's Secret, the name to verify,
    mutual TLS), or None for plain text. While ``spec.tls`` is switched on or off, the pods of
    the roll serve as their template said, not as the spec says now."""
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or [{}]
    args = list(containers[0].get("args") or [])
    if "--tls-cert" not in args:
        return None
    volume = next((v for v in spec.get("volumes") or [] if v.get("name") == "tls"), {})
    secret = (volume.get("secret") or {}).get("secretName", "")
    name = args[args.index("--tls-server-name") + 1] if "--tls-server-name" in args[:-1] else ""
    return secret, name, "--tls-client-ca" in args


class Reaches:
    """Each pod's way in for one pass: the spec's (prepared), or, for a pod a roll has not
    replaced yet, the one its own template names (read from that Secret once)."""

    def __init__(self, kube: Kube, spec: Spec, prepared: Reach):
        self.kube, self.spec, self.prepared = kube, spec, prepared
        self._read: dict[tuple[str, str, bool], Reach | None] = {}

    def of(self, pod: dict[str, Any]) -> dict[str, Any]:
        served = pod_tls(pod)
        if served is None:
            return {}
        secret, name, mutual = served
        spec_tls = self.spec.tls
        if spec_tls is not None and secret == self.spec.tls_secret and mutual == spec_tls.client_authentication and self.prepared.tls_ca:
            return self.prepared.client_options()
        if served not in self._read:
            self._read[served] = self._load(secret, name, mutual)
        reach = self._read[served]
        return reach.client_options() if reach is not None else self.prepared.client_options()

    def _load(self, secret: str, name: str, mutual: bool) -> Reach | None:
        try:
            data = _decoded(self.kube.get("Secret", self.spec.namespace, secret))
        except NotFound:
            return None
        if not data.get("ca.crt") or (mutual and not (data.get("tls.crt") and data.get("tls.key"))):
            return None
        return _files(self.spec, data, mutual, name or None, secret=f"previous-{secret}")
