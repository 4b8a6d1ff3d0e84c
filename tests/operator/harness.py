"""The parts of a cluster the operator relies on that kmock does not emulate.

* a StatefulSet controller: keeps pods ``<name>-<ordinal>`` for ``replicas`` from the template
  (and recreates deleted ones — the operator rolls pods by deleting them);
* a kubelet: runs each pod's *rendered* container command as a real ``msgstore serve`` process
  on 127.0.0.(10+ordinal), with its volumes materialized (PVC → a directory kept per pod name,
  ConfigMap and Secret → files), writes the pod's IP and Ready condition from gRPC health, and
  restarts a container that dies (as restartPolicy: Always);
* cluster DNS for the headless Service: ``--peers-dns`` becomes ``--peers-file`` listing the
  pods, rewritten as pods come and go;
* the API server for in-cluster clients: a kubeconfig naming kmock (``KUBECONFIG``), which a
  replicated store's pods use to renew their group's Lease.

All of it talks to kmock over HTTP, as a real controller would, so Kopf sees every change.
"""

from __future__ import annotations

import asyncio
import base64
import os
from dataclasses import dataclass
from typing import Any

import aiohttp

from tests.support.pods import ContainerProcess

TICK = 0.05


@dataclass
class Container:
    pod: str
    ip: str
    port: int
    process: ContainerProcess

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    @property
    def proc(self):
        return self.process.proc

    @property
    def restarts(self) -> int:
        return self.process.restarts


class Cluster:
    def __init__(self, api_url: str, base: str, namespace: str):
        self.api = api_url.rstrip("/")
        self.base = base
        self.namespace = namespace
        self.containers: dict[str, Container] = {}
        self.history: list[tuple[str, str]] = []  # (event, pod) in order: started / stopped / crashed
        self._task: asyncio.Task | None = None
        self._http: aiohttp.ClientSession | None = None
        self.errors: list[str] = []

    # ------------------------------------------------------------------ API

    async def _req(self, method: str, path: str, body: Any = None) -> Any:
        async with self._http.request(
            method, self.api + path, json=body, headers={"Content-Type": "application/merge-patch+json"} if method == "PATCH" else None
        ) as r:
            if r.status == 404:
                return None
            r.raise_for_status()
            return await r.json()

    def _ns(self, plural: str, group: str = "") -> str:
        return f"/apis/{group}/namespaces/{self.namespace}/{plural}" if group else f"/api/v1/namespaces/{self.namespace}/{plural}"

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Cluster:
        self._http = aiohttp.ClientSession()
        self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *exc) -> None:
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        for c in list(self.containers.values()):
            c.process.kill()
        await self._http.close()

    async def _loop(self) -> None:
        while True:
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # keep the cluster alive; the test asserts on outcomes
                self.errors.append(repr(e))
            await asyncio.sleep(TICK)

    async def _tick(self) -> None:
        sets = (await self._req("GET", self._ns("statefulsets", "apps/v1")) or {}).get("items", [])
        pods = (await self._req("GET", self._ns("pods")) or {}).get("items", [])
        by_name = {p["metadata"]["name"]: p for p in pods}
        for sts in sets:
            await self._control(sts, by_name)
        for name in list(self.containers):
            if name not in by_name:
                await self._stop(name)
        for pod in pods:
            await self._kubelet(pod)
        await self._dns(sets, pods)

    # ------------------------------------------------------------------ StatefulSet controller

    async def _control(self, sts: dict, pods: dict[str, dict]) -> None:
        name = sts["metadata"]["name"]
        replicas = int(sts["spec"].get("replicas", 1))
        template = sts["spec"]["template"]
        for i in range(replicas):
            pod_name = f"{name}-{i}"
            if pod_name in pods or pod_name in self.containers:
                continue  # a deleted pod is recreated once its container has stopped
            meta = template.get("metadata", {})
            await self._req(
                "POST",
                self._ns("pods"),
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": pod_name,
                        "namespace": self.namespace,
                        "labels": {**meta.get("labels", {}), "statefulset.kubernetes.io/pod-name": pod_name},
                        "annotations": dict(meta.get("annotations", {})),
                        "ownerReferences": [
                            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name, "uid": "sts", "controller": True}
                        ],
                    },
                    "spec": {**template["spec"], "hostname": pod_name, "subdomain": sts["spec"]["serviceName"]},
                    "status": {"phase": "Pending"},
                },
            )
        for pod_name, pod in pods.items():
            owners = pod["metadata"].get("ownerReferences") or [{}]
            if owners[0].get("name") == name and int(pod_name.rsplit("-", 1)[1]) >= replicas:
                await self._req("DELETE", self._ns("pods") + "/" + pod_name)

    # ------------------------------------------------------------------ kubelet

    async def _kubelet(self, pod: dict) -> None:
        name = pod["metadata"]["name"]
        c = self.containers.get(name)
        if c is None:
            c = await self._start(pod)
            await self._req(
                "PATCH",
                self._ns("pods") + "/" + name,
                {
                    "status": {
                        "phase": "Running",
                        "podIP": c.ip,
                        "podIPs": [{"ip": c.ip}],
                        "conditions": [{"type": "Ready", "status": "False"}],
                    }
                },
            )
            return
        if not c.process.running:  # the container died: restart it (restartPolicy: Always)
            self.history.append(("crashed", name))
            c.process.restart()
            self.history.append(("started", name))
        ready = await asyncio.to_thread(c.process.ready)
        was = next((x.get("status") for x in (pod.get("status") or {}).get("conditions") or [] if x.get("type") == "Ready"), None)
        if (was == "True") != ready:
            await self._req(
                "PATCH",
                self._ns("pods") + "/" + name,
                {
                    "status": {
                        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                        "containerStatuses": [{"name": "msgstore", "ready": ready, "restartCount": c.restarts}],
                    }
                },
            )

    def pod_ip(self, pod_name: str) -> str:
        return f"127.0.0.{10 + int(pod_name.rsplit('-', 1)[1])}"

    async def _start(self, pod: dict) -> Container:
        name = pod["metadata"]["name"]
        spec = pod["spec"]
        container = spec["containers"][0]
        sts = pod["metadata"]["ownerReferences"][0]["name"]
        peers = os.path.join(self.base, "dns", f"{sts}.peers")

        def rewrite(argv: list[str]) -> list[str]:  # cluster DNS for the headless Service
            out = []
            it = iter(argv)
            for a in it:
                if a == "--peers-dns":
                    next(it)
                    out += ["--peers-file", peers]
                else:
                    out.append(a)
            return out + ["--grace", "2"]

        volumes = await self._volumes(name, spec, container)
        process = ContainerProcess(
            pod,
            container,
            self.pod_ip(name),
            volumes,
            os.path.join(self.base, "pods", name, "container.log"),
            rewrite=rewrite,
            env={"KUBECONFIG": self._kubeconfig()},
        ).start()
        port = next(p["containerPort"] for p in container["ports"] if p["name"] == "grpc")
        c = Container(name, process.ip, port, process)
        self.containers[name] = c
        self.history.append(("started", name))
        return c

    def _kubeconfig(self) -> str:
        path = os.path.join(self.base, "kubeconfig")
        if not os.path.exists(path):
            with open(path, "w") as f:
                f.write(
                    "apiVersion: v1\nkind: Config\ncurrent-context: kmock\n"
                    f"clusters: [{{name: kmock, cluster: {{server: '{self.api}'}}}}]\n"
                    "users: [{name: pod, user: {token: pod}}]\n"
                    "contexts: [{name: kmock, context: {cluster: kmock, user: pod}}]\n"
                )
        return path

    async def _volumes(self, pod: str, spec: dict, container: dict) -> dict[str, str]:
        pod_dir = os.path.join(self.base, "pods", pod)
        os.makedirs(pod_dir, exist_ok=True)
        sources = {v["name"]: v for v in spec.get("volumes", [])}
        mounts = {}
        for m in container.get("volumeMounts", []):
            vol = sources.get(m["name"])
            if m["name"] == "data":  # the volumeClaimTemplate: one directory per pod, kept across restarts
                host = os.path.join(self.base, "pvc", f"data-{pod}")
            else:
                host = os.path.join(pod_dir, m["name"])
            os.makedirs(host, exist_ok=True)
            if vol and "configMap" in vol:
                cm = await self._req("GET", self._ns("configmaps") + "/" + vol["configMap"]["name"])
                for key, value in (cm or {}).get("data", {}).items():
                    with open(os.path.join(host, key), "w") as f:
                        f.write(value)
            if vol and "secret" in vol:
                secret = await self._req("GET", self._ns("secrets") + "/" + vol["secret"]["secretName"])
                for key, value in (secret or {}).get("data", {}).items():
                    with open(os.path.join(host, key), "wb") as f:
                        f.write(base64.b64decode(value))
            mounts[m["mountPath"]] = host
        return mounts

    async def _stop(self, name: str) -> None:
        c = self.containers.pop(name)
        await asyncio.to_thread(c.process.stop, 30)
        self.history.append(("stopped", name))

    async def _dns(self, sets: list[dict], pods: list[dict]) -> None:
        os.makedirs(os.path.join(self.base, "dns"), exist_ok=True)
        for sts in sets:
            name = sts["metadata"]["name"]
            lines = sorted(c.address for p, c in self.containers.items() if p.rsplit("-", 1)[0] == name)
            path = os.path.join(self.base, "dns", f"{name}.peers")
            text = "".join(line + "\n" for line in lines)
            if not os.path.exists(path) or open(path).read() != text:
                with open(path + ".tmp", "w") as f:
                    f.write(text)
                os.replace(path + ".tmp", path)

    # ------------------------------------------------------------------ for tests

    def kill(self, pod: str) -> None:
        """SIGKILL a pod's store process (the kubelet restarts it)."""
        self.containers[pod].process.kill()
