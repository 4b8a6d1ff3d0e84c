"""Kopf running the real handlers against kmock's KubernetesEmulator, with a harness cluster."""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest_asyncio

os.environ.setdefault("MSGSTORE_OPERATOR_INTERVAL", "1")  # before the handlers are imported

import kmock
import kopf

from msgstore_operator import handlers  # noqa: F401  (registers the handlers)
from msgstore_operator import kube as kubemod
from tests.operator.harness import Cluster
from tests.support.servers import free_port

NS = "stores"
CR = "msgstore.io/v1alpha1/messagestores"
USERS = "msgstore.io/v1alpha1/messagestoreusers"
TOPICS = "msgstore.io/v1alpha1/messagestoretopics"
GROUPS = "msgstore.io/v1alpha1/messagestoregroups"
RESOURCES = {
    CR: dict(kind="MessageStore", namespaced=True, subresources=["status"]),
    USERS: dict(kind="MessageStoreUser", namespaced=True, subresources=["status"]),
    TOPICS: dict(kind="MessageStoreTopic", namespaced=True, subresources=["status"]),
    GROUPS: dict(kind="MessageStoreGroup", namespaced=True, subresources=["status"]),
    "apiextensions.k8s.io/v1/customresourcedefinitions": dict(kind="CustomResourceDefinition", namespaced=False),
    "v1/namespaces": dict(kind="Namespace", namespaced=False),
    "v1/events": dict(kind="Event", namespaced=True),
    "v1/pods": dict(kind="Pod", namespaced=True, subresources=["status"]),
    "v1/services": dict(kind="Service", namespaced=True),
    "v1/configmaps": dict(kind="ConfigMap", namespaced=True),
    "v1/secrets": dict(kind="Secret", namespaced=True),
    "v1/persistentvolumeclaims": dict(kind="PersistentVolumeClaim", namespaced=True, subresources=["status"]),
    "apps/v1/statefulsets": dict(kind="StatefulSet", namespaced=True, subresources=["status"]),
    "policy/v1/poddisruptionbudgets": dict(kind="PodDisruptionBudget", namespaced=True),
    "coordination.k8s.io/v1/leases": dict(kind="Lease", namespaced=True),
    "v1/serviceaccounts": dict(kind="ServiceAccount", namespaced=True),
    "rbac.authorization.k8s.io/v1/roles": dict(kind="Role", namespaced=True),
    "rbac.authorization.k8s.io/v1/rolebindings": dict(kind="RoleBinding", namespaced=True),
}

_login: dict[str, str] = {}


class ApiServer(kmock.KubernetesEmulator):
    """kmock's emulator plus what the API server does on create that the operator relies on:
    a name from ``generateName`` (Kopf posts Events that way), a uid, a resourceVersion (Kopf
    guards its patches with it) and a creation time."""

    _serial = itertools.count(1)

    async def _handle(self, request):
        if request.method == kmock.method.PUT and request.resource is not None and request.name:
            return await self._replace(request)
        if request.action == kmock.action.CREATE and isinstance(request.data, dict):
            meta = request.data.setdefault("metadata", {})
            n = next(self._serial)
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = f"{meta['generateName']}{n:05d}"
            meta.setdefault("uid", f"uid-{n}")
            meta.setdefault("resourceVersion", "1")
            meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        return await super()._handle(request)

    async def _replace(self, request):
        """PUT (kmock serves PATCH only): a compare-and-swap on metadata.resourceVersion, as the
        API server does (the operator records elections in a Lease that way)."""
        key = (request.resource, request.namespace, request.name)
        async with self._lock:
            if key not in self._objects or self._objects[key].deleted:
                return aiohttp.web.json_response({"kind": "Status", "code": 404, "reason": "NotFound"}, status=404)
            stored = self._objects[key]
            have = str(stored.get("metadata", {}).get("resourceVersion", ""))
            want = str((request.data.get("metadata") or {}).get("resourceVersion", ""))
            if want and want != have:
                body = {"kind": "Status", "code": 409, "reason": "Conflict", "message": f"resourceVersion {want} is not {have}"}
                return aiohttp.web.json_response(body, status=409)
            data = dict(request.data)
            data["metadata"] = {**(data.get("metadata") or {}), "resourceVersion": str(int(have or 0) + 1)}
            stored.patch(data)
            raw = stored.raw
            await self._buses[request.resource].put({"type": "MODIFIED", "object": raw})
        return aiohttp.web.json_response(raw)


@kopf.on.login(registry=kopf.get_default_registry())
def login(**_) -> kopf.ConnectionInfo:
    return kopf.ConnectionInfo(server=_login["url"], insecure=True)


class Env:
    """What a test drives: the API (as kubectl would), the cluster, the operator's objects."""

    def __init__(self, api: kmock.KubernetesEmulator, cluster: Cluster, http: aiohttp.ClientSession, port: int):
        self.api = api
        self.cluster = cluster
        self.http = http
        self.port = port
        self.url = str(api.url).rstrip("/")
        self.generation = 0

    def objects(self, resource: str) -> dict[str, dict[str, Any]]:
        """Live objects of a resource ('group/version/plural' or 'version/plural') in the namespace."""
        parts = resource.split("/")
        group, version, plural = ["", *parts] if len(parts) == 2 else parts
        out = {}
        for (res, ns, name), obj in list(self.api.objects.items()):
            if (res.group, res.version, res.plural) == (group, version, plural) and ns == NS and not obj.deleted:
                out[name] = dict(obj.raw)
        return out

    def obj(self, resource: str, name: str) -> dict[str, Any] | None:
        return self.objects(resource).get(name)

    def store(self, name: str = "orders") -> dict[str, Any]:
        return self.obj(CR, name) or {}

    async def create(self, name: str = "orders", **spec: Any) -> None:
        self.generation = 1
        body = {
            "apiVersion": "msgstore.io/v1alpha1",
            "kind": "MessageStore",
            "metadata": {"name": name, "namespace": NS, "generation": 1},
            "spec": {"port": self.port, **spec},
        }
        async with self.http.post(f"{self.url}/apis/msgstore.io/v1alpha1/namespaces/{NS}/messagestores", json=body) as r:
            r.raise_for_status()

    async def patch(self, name: str = "orders", spec: dict | None = None, annotations: dict | None = None) -> None:
        """As ``kubectl apply``/``annotate``: the generation moves on spec changes (as the API server does)."""
        body: dict[str, Any] = {"metadata": {}}
        if spec is not None:
            self.generation += 1
            body["spec"] = spec
            body["metadata"]["generation"] = self.generation
        if annotations is not None:
            body["metadata"]["annotations"] = annotations
        async with self.http.patch(
            f"{self.url}/apis/msgstore.io/v1alpha1/namespaces/{NS}/messagestores/{name}",
            json=body,
            headers={"Content-Type": "application/merge-patch+json"},
        ) as r:
            r.raise_for_status()

    async def put_secret(self, name: str, data: dict[str, str]) -> None:
        import base64

        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": NS},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        }
        async with self.http.post(f"{self.url}/api/v1/namespaces/{NS}/secrets", json=body) as r:
            r.raise_for_status()

    def condition(self, ctype: str, name: str = "orders") -> dict[str, Any]:
        for c in (self.store(name).get("status") or {}).get("conditions", []):
            if c["type"] == ctype:
                return c
        return {}

    def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.objects("v1/events").values() if reason is None or e.get("reason") == reason]

    async def until(self, predicate: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; cluster errors: {self.cluster.errors[-3:]}")
            await asyncio.sleep(0.05)


def serve_resources(kmock) -> None:
    """The kinds the operator reads and writes, served by kmock with every verb."""
    verbs = ["get", "list", "watch", "create", "update", "patch", "delete"]
    for key, info in RESOURCES.items():
        kmock.resources[key] = kmock.ResourceInfo(verbs=verbs, **info)


@pytest_asyncio.fixture
async def env(kmock, tmp_path):
    serve_resources(kmock)
    kmock.objects["v1/namespaces", None, NS] = {"metadata": {"name": NS}}
    _login["url"] = str(kmock.url).rstrip("/")
    memo = kopf.Memo(kube=kubemod.connect(host=_login["url"], verify_ssl=False))
    stop = threading.Event()
    # Kopf cancels every task created after it started when it stops (pytest-asyncio's own
    # finalizer included), so it gets its own thread and event loop, as in kopf.testing.
    thread = threading.Thread(
        name="kopf",
        daemon=True,
        target=lambda: asyncio.run(
            kopf.operator(registry=kopf.get_default_registry(), memo=memo, standalone=True, namespaces=[NS], stop_flag=stop)
        ),
    )
    thread.start()
    async with aiohttp.ClientSession() as http, Cluster(_login["url"], str(tmp_path), NS) as cluster:
        yield Env(kmock, cluster, http, free_port())
        stop.set()
        await asyncio.to_thread(thread.join, 60)
        assert not thread.is_alive(), "the operator did not stop within 60 s"
