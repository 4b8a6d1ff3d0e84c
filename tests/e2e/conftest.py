"""End-to-end fixtures: a real control plane, the stand-in kubelet, and kubectl/helm as a
platform engineer would run them.

The suite needs the control-plane binaries (``MSGSTORE_K8S_ASSETS``, see ``plane.py``) and root
(pod IPs are loopback aliases, and the operator's ServiceAccount token is bind-mounted where
in-cluster clients look for it). Without them it is skipped, saying which is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.support.servers import wait_until

from .kubelet import Api, Kubelet
from .plane import ASSETS_ENV, ControlPlane, assets_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHART = os.path.join(ROOT, "charts", "msgstore")
BIN = os.path.dirname(sys.executable)
IMAGE = "ghcr.io/msgstore/msgstore:0.1.0"  # the chart's default image: the node "has" it
GROUP_PATH = "/apis/msgstore.io/v1alpha1"


def _skip_reason() -> str | None:
    if assets_dir() is None:
        return (
            f"no Kubernetes control-plane binaries: set {ASSETS_ENV} to a directory holding etcd, kube-apiserver, "
            "kube-controller-manager and kube-scheduler (or their .xz)"
        )
    if os.geteuid() != 0:
        return "the stand-in kubelet needs root (pod IPs on the loopback interface, bind-mounted ServiceAccount tokens)"
    for tool in ("openssl", "ip", "unshare"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            return f"{tool} is not installed"
    return None


class K8s:
    """The cluster as a test drives it: kubectl, helm, and the API for assertions."""

    def __init__(self, plane: ControlPlane, kubelet: Kubelet):
        self.plane = plane
        self.kubelet = kubelet
        self.api: Api = kubelet.api
        self.env = dict(
            os.environ,
            KUBECONFIG=plane.kubeconfig,
            HELM_CACHE_HOME=os.path.join(plane.base, "helm", "cache"),
            HELM_CONFIG_HOME=os.path.join(plane.base, "helm", "config"),
            HELM_DATA_HOME=os.path.join(plane.base, "helm", "data"),
        )

    # ------------------------------------------------------------------ commands

    def run(self, tool: str, *args: str, check: bool = True, input: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        proc = subprocess.run([os.path.join(BIN, tool), *args], capture_output=True, text=True, env=self.env, input=input, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{tool} {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
                f"\nkubelet errors: {self.kubelet.errors[-5:]}"
            )
        return proc

    def kubectl(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return self.run("kubectl", *args, **kw)

    def helm(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return self.run("helm", *args, **kw)

    def apply(self, doc: dict | str, namespace: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        text = doc if isinstance(doc, str) else yaml.safe_dump(doc)
        args = ["apply", "-f", "-"] + (["-n", namespace] if namespace else [])
        return self.kubectl(*args, input=text, check=check)

    # ------------------------------------------------------------------ reading

    def get(self, path: str) -> Any:
        return self.api.get(path)

    def store(self, ns: str, name: str) -> dict:
        return self.get(f"{GROUP_PATH}/namespaces/{ns}/messagestores/{name}") or {}

    def condition(self, ns: str, name: str, ctype: str) -> dict:
        for c in (self.store(ns, name).get("status") or {}).get("conditions", []):
            if c["type"] == ctype:
                return c
        return {}

    def ready(self, ns: str, name: str) -> bool:
        return self.condition(ns, name, "Ready").get("status") == "True"

    def pods(self, ns: str, selector: str) -> list[dict]:
        return self.api.items(f"/api/v1/namespaces/{ns}/pods", labelSelector=selector)

    def pod(self, ns: str, name: str) -> dict | None:
        return self.get(f"/api/v1/namespaces/{ns}/pods/{name}")

    def events(self, ns: str, reason: str | None = None, involved: str | None = None) -> list[dict]:
        out = []
        for e in self.api.items(f"/api/v1/namespaces/{ns}/events"):
            if reason is not None and e.get("reason") != reason:
                continue
            if involved is not None and e.get("involvedObject", {}).get("name") != involved:
                continue
            out.append(e)
        return out

    def address(self, ns: str, pod: str, port: int = 10911) -> str:
        p = self.pod(ns, pod)
        assert p and p.get("status", {}).get("podIP"), f"{ns}/{pod} has no IP"
        return f"{p['status']['podIP']}:{port}"

    def wait(self, predicate: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
        try:
            return wait_until(predicate, timeout, 0.1, what)
        except TimeoutError as e:
            raise AssertionError(f"{e}; kubelet errors: {self.kubelet.errors[-5:]}") from None

    def dump(self, ns: str) -> str:
        """What to look at when a test fails: stores, pods, events."""
        out = []
        for kind in ("messagestores", "statefulsets", "pods", "pvc", "events"):
            out.append(self.kubectl("get", kind, "-n", ns, "-o", "wide", check=False).stdout)
        return "\n".join(out)


@pytest.fixture(scope="package")  # torn down after the last e2e test: the rest of the suite runs without a control plane
def plane(tmp_path_factory):
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    cp = ControlPlane(str(tmp_path_factory.mktemp("k8s")))
    try:
        cp.up(assets_dir())
    except Exception:
        for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
            print(f"--- {name}\n{cp.log(name)}")
        cp.down()
        raise
    yield cp
    cp.down()


@pytest.fixture(scope="package")  # torn down after the last e2e test: the rest of the suite runs without a control plane
def k8s(plane, tmp_path_factory):
    kubelet = Kubelet(plane, str(tmp_path_factory.mktemp("node")), {IMAGE}).start()
    cluster = K8s(plane, kubelet)
    cluster.wait(lambda: (cluster.get("/api/v1/nodes/node-1") or {}).get("status", {}).get("conditions"), what="node-1")
    yield cluster
    kubelet.stop()


def namespace(k8s: K8s, name: str) -> str:
    k8s.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    k8s.wait(lambda: k8s.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"), what=f"namespace {name} ready")
    return name


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=1, default=str)


__all__ = ["K8s", "namespace", "CHART", "IMAGE", "GROUP_PATH", "dumps", "time"]
