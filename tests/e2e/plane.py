"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager
and kube-scheduler, from binaries found through ``MSGSTORE_K8S_ASSETS``.

This plays the part controller-runtime's envtest plays for Go operators, with the two
controllers envtest leaves out (the StatefulSet, EndpointSlice and garbage-collector controllers
live in the controller-manager; pods need the scheduler). ``MSGSTORE_K8S_ASSETS`` names a
directory holding ``etcd``, ``kube-apiserver``, ``kube-controller-manager`` and
``kube-scheduler`` (or the same names with ``.xz``); the Makefile points it at
``../shared/k8s/bin`` when that exists. Certificates are made with ``openssl``; every port is a
free one, so two runs never collide.

Admission beyond the defaults: ``OwnerReferencesPermissionEnforcement`` (as OpenShift runs
it), so owner references with ``blockOwnerDeletion`` need the ``finalizers`` permission.
"""

from __future__ import annotations

import base64
import lzma
import os
import shutil
import signal
import subprocess
import warnings
from dataclasses import dataclass, field

import requests

from tests.support.servers import free_port, wait_until

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
ASSETS_ENV = "MSGSTORE_K8S_ASSETS"
SERVICE_CIDR = "10.96.0.0/16"


def assets_dir() -> str | None:
    """Where the binaries are, or None (the e2e suite is then skipped, saying why)."""
    here = os.environ.get(ASSETS_ENV)
    if here and all(os.path.exists(os.path.join(here, b)) or os.path.exists(os.path.join(here, b + ".xz")) for b in BINARIES):
        return here
    return None


def _unpack(assets: str, into: str) -> dict[str, str]:
    os.makedirs(into, exist_ok=True)
    out = {}
    for name in BINARIES:
        target = os.path.join(into, name)
        plain = os.path.join(assets, name)
        if os.path.exists(plain):
            out[name] = plain
            continue
        if not os.path.exists(target):
            with lzma.open(plain + ".xz") as src, open(target + ".tmp", "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            os.chmod(target + ".tmp", 0o755)
            os.replace(target + ".tmp", target)
        out[name] = target
    return out


def _openssl(*args: str, cwd: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@dataclass
class ControlPlane:
    base: str
    api_port: int = field(default_factory=free_port)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def pki(self) -> str:
        return os.path.join(self.base, "pki")

    @property
    def kubeconfig(self) -> str:
        return os.path.join(self.base, "kubeconfig")

    @property
    def ca(self) -> str:
        return os.path.join(self.pki, "ca.crt")

    def client_cert(self, user: str = "admin") -> tuple[str, str]:
        return os.path.join(self.pki, f"{user}.crt"), os.path.join(self.pki, f"{user}.key")

    def session(self, user: str = "admin") -> requests.Session:
        s = requests.Session()
        s.trust_env = False  # REQUESTS_CA_BUNDLE would replace our CA
        s.cert = self.client_cert(user)
        s.verify = self.ca
        return s

    # ------------------------------------------------------------------ certificates

    def _certs(self) -> None:
        p = self.pki
        os.makedirs(p, exist_ok=True)
        _openssl(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "3650",
            "-subj",
            "/CN=msgstore-e2e-ca",
            cwd=p,
        )
        with open(os.path.join(p, "server.ext"), "w") as f:
            f.write(
                "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
                "subjectAltName=DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,"
                "DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1\n"
            )
        with open(os.path.join(p, "client.ext"), "w") as f:
            f.write("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n")
        users = {
            "apiserver": ("/CN=kube-apiserver", "server.ext"),
            "admin": ("/O=system:masters/CN=kubernetes-admin", "client.ext"),
            "controller-manager": ("/CN=system:kube-controller-manager", "client.ext"),
            "scheduler": ("/CN=system:kube-scheduler", "client.ext"),
            "kubelet-client": ("/O=system:masters/CN=kube-apiserver-kubelet-client", "client.ext"),
            "node-1": ("/O=system:nodes/CN=system:node:node-1", "client.ext"),
        }
        for name, (subject, ext) in users.items():
            _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=p)
            _openssl(
                "x509",
                "-req",
                "-in",
                f"{name}.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                f"{name}.crt",
                "-days",
                "3650",
                "-extfile",
                ext,
                cwd=p,
            )
        _openssl("genrsa", "-out", "sa.key", "2048", cwd=p)
        _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=p)
        for user in ("admin", "controller-manager", "scheduler"):
            path = self.kubeconfig if user == "admin" else os.path.join(p, f"{user}.kubeconfig")
            self._write_kubeconfig(path, user)

    def _write_kubeconfig(self, path: str, user: str) -> None:
        def b64(name: str) -> str:
            with open(os.path.join(self.pki, name), "rb") as f:
                return base64.b64encode(f.read()).decode()

        with open(path, "w") as f:
            f.write(f"""apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {{server: "{self.url}", certificate-authority-data: {b64("ca.crt")}}}
users:
- name: {user}
  user: {{client-certificate-data: {b64(user + ".crt")}, client-key-data: {b64(user + ".key")}}}
contexts:
- name: {user}@e2e
  context: {{cluster: e2e, user: {user}}}
current-context: {user}@e2e
""")
        os.chmod(path, 0o600)

    # ------------------------------------------------------------------ processes

    def _start(self, name: str, argv: list[str]) -> None:
        os.makedirs(os.path.join(self.base, "logs"), exist_ok=True)
        with open(os.path.join(self.base, "logs", f"{name}.log"), "ab") as log:
            self.procs[name] = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )

    def _healthy(self, name: str, url: str, verify: str | bool) -> bool:
        proc = self.procs[name]
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.log(name)}")
        try:
            with requests.Session() as s, warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the controllers' self-signed serving certificates
                s.trust_env = False
                return s.get(url, verify=verify, timeout=2).ok
        except requests.RequestException:
            return False

    def up(self, assets: str) -> ControlPlane:
        bins = _unpack(assets, os.path.join(self.base, "bin"))
        self._certs()
        p = self.pki
        etcd_port, etcd_peer, kcm_port, sched_port = free_port(), free_port(), free_port(), free_port()
        self._start(
            "etcd",
            [
                bins["etcd"],
                "-data-dir",
                os.path.join(self.base, "etcd"),
                "-listen-client-url",
                f"http://127.0.0.1:{etcd_port}",
                "-listen-peer-url",
                f"http://127.0.0.1:{etcd_peer}",
            ],
        )
        wait_until(lambda: self._healthy("etcd", f"http://127.0.0.1:{etcd_port}/health", False), 60, 0.2, "etcd")
        self._start(
            "kube-apiserver",
            [
                bins["kube-apiserver"],
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--tls-cert-file={p}/apiserver.crt",
                f"--tls-private-key-file={p}/apiserver.key",
                f"--client-ca-file={p}/ca.crt",
                f"--kubelet-client-certificate={p}/kubelet-client.crt",
                f"--kubelet-client-key={p}/kubelet-client.key",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={p}/sa.pub",
                f"--service-account-signing-key-file={p}/sa.key",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction,OwnerReferencesPermissionEnforcement",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
            ],
        )
        wait_until(lambda: self._healthy("kube-apiserver", f"{self.url}/readyz", self.ca), 180, 0.25, "kube-apiserver")
        self._start(
            "kube-controller-manager",
            [
                bins["kube-controller-manager"],
                f"--kubeconfig={p}/controller-manager.kubeconfig",
                f"--authentication-kubeconfig={p}/controller-manager.kubeconfig",
                f"--authorization-kubeconfig={p}/controller-manager.kubeconfig",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                "--leader-elect=false",
                f"--service-account-private-key-file={p}/sa.key",
                f"--root-ca-file={p}/ca.crt",
                "--use-service-account-credentials=true",
                f"--cluster-signing-cert-file={p}/ca.crt",
                f"--cluster-signing-key-file={p}/ca.key",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--cluster-name=e2e",
                "--controllers=*",
                "--profiling=false",
                "--v=1",
            ],
        )
        self._start(
            "kube-scheduler",
            [
                bins["kube-scheduler"],
                f"--kubeconfig={p}/scheduler.kubeconfig",
                f"--authentication-kubeconfig={p}/scheduler.kubeconfig",
                f"--authorization-kubeconfig={p}/scheduler.kubeconfig",
                "--bind-address=127.0.0.1",
                f"--secure-port={sched_port}",
                "--leader-elect=false",
                "--profiling=false",
                "--v=1",
            ],
        )
        wait_until(
            lambda: self._healthy("kube-controller-manager", f"https://127.0.0.1:{kcm_port}/healthz", False),
            90,
            0.25,
            "kube-controller-manager",
        )
        wait_until(lambda: self._healthy("kube-scheduler", f"https://127.0.0.1:{sched_port}/healthz", False), 90, 0.25, "kube-scheduler")
        with self.session() as s:
            wait_until(
                lambda: s.get(f"{self.url}/api/v1/namespaces/default/serviceaccounts/default").ok, 60, 0.25, "the default ServiceAccount"
            )
        return self

    def down(self) -> None:
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)

    def log(self, name: str, tail: int = 3000) -> str:
        try:
            with open(os.path.join(self.base, "logs", f"{name}.log"), errors="replace") as f:
                return f.read()[-tail:]
        except FileNotFoundError:
            return ""

    def wait(self, predicate, timeout: float = 60, what: str = "condition"):
        return wait_until(predicate, timeout, 0.1, what)
