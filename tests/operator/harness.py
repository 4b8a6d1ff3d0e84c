"""The parts of a cluster the operator relies on that kmock does not emulate.

* a StatefulSet controller: keeps pods ``<name>-<ordinal>`` for ``replicas`` from the template
  (and recreates deleted ones — the operator rolls pods by deleting them);
* a kubelet: runs each pod's *rendered* container command as a real ``msgstore serve`` process
  on 127.0.0.(10+ordinal), with its volumes materialized (PVC → a directory kept per pod name,
  ConfigMap and Secret → files), writes the pod's IP and Ready condition from gRPC health, and
  restarts a container that dies (as restartPolicy: Always);
* cluster DNS for the headless Service: ``--peers-dns`` becomes ``--peers-file`` listing the
  pods, rewritten as pods come and go.

All of it talks to kmock over HTTP, as a real controller would, so Kopf sees every change.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TICK = 0.05


@dataclass
class Container:
    pod: str
    ip: str
    port: int
    args: list[str]
    proc: subprocess.Popen
    restarts: int = 0
    starts: list[int] = field(default_factory=list)  # pids over time

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"


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
        async with self._http.request(method, self.api + path, json=body,
                                      headers={"Content-Type": "application/merge-patch+json"} if method == "PATCH" else None) as r:
            if r.status == 404:
                return None
            r.raise_for_status()
            return await r.json()

    def _ns(self, plural: str, group: str = "") -> str:
        return (f"/apis/{group}/namespaces/{self.namespace}/{plural}" if group
                else f"/api/v1/namespaces/{self.namespace}/{plural}")

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> "Cluster":
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
            if c.proc.poll() is None:
                c.proc.kill()
                c.proc.wait(10)
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
            await self._req("POST", self._ns("pods"), {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod_name, "namespace": self.namespace,
                             "labels": {**meta.get("labels", {}), "statefulset.kubernetes.io/pod-name": pod_name},
                             "annotations": dict(meta.get("annotations", {})),
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name,
                                                  "uid": "sts", "controller": True}]},
                "spec": {**template["spec"], "hostname": pod_name, "subdomain": sts["spec"]["serviceName"]},
                "status": {"phase": "Pending"}})
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
            await self._req("PATCH", self._ns("pods") + "/" + name, {"status": {
                "phase": "Running", "podIP": c.ip, "podIPs": [{"ip": c.ip}],
                "conditions": [{"type": "Ready", "status": "False"}]}})
            return
        if c.proc.poll() is not None:  # the container died: restart it (restartPolicy: Always)
            self.history.append(("crashed", name))
            c.restarts += 1
            c.proc = self._spawn(name, c.args)
            c.starts.append(c.proc.pid)
            self.history.append(("started", name))
        ready = await self._serving(c)
        was = next((x.get("status") for x in (pod.get("status") or {}).get("conditions") or [] if x.get("type") == "Ready"), None)
        if (was == "True") != ready:
            await self._req("PATCH", self._ns("pods") + "/" + name, {"status": {
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                "containerStatuses": [{"name": "msgstore", "ready": ready, "restartCount": c.restarts}]}})

    async def _serving(self, c: Container) -> bool:
        try:
            async with grpc.aio.insecure_channel(c.address) as ch:
                resp = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=0.5)
                return resp.status == health_pb2.HealthCheckResponse.SERVING
        except grpc.aio.AioRpcError:
            return False

    def pod_ip(self, pod_name: str) -> str:
        return f"127.0.0.{10 + int(pod_name.rsplit('-', 1)[1])}"

    async def _start(self, pod: dict) -> Container:
        name = pod["metadata"]["name"]
        spec = pod["spec"]
        container = spec["containers"][0]
        ip = self.pod_ip(name)
        env = {"POD_NAME": name, "POD_NAMESPACE": self.namespace, "POD_IP": ip}
        mounts = await self._volumes(name, spec, container)
        sts = pod["metadata"]["ownerReferences"][0]["name"]
        args = []
        it = iter(container["args"])
        for a in it:
            for k, v in env.items():
                a = a.replace(f"$({k})", v)
            for mount in sorted(mounts, key=len, reverse=True):  # one rewrite, the most specific mount
                if a == mount or a.startswith(mount + "/"):
                    a = mounts[mount] + a[len(mount):]
                    break
            if a == "--peers-dns":  # cluster DNS for the headless Service
                next(it)
                args += ["--peers-file", os.path.join(self.base, "dns", f"{sts}.peers")]
                continue
            if a == "0.0.0.0":
                a = ip
            args.append(a)
        args += ["--grace", "2"]
        port = next(p["containerPort"] for p in container["ports"] if p["name"] == "grpc")
        proc = self._spawn(name, args)
        c = Container(name, ip, port, args, proc, starts=[proc.pid])
        self.containers[name] = c
        self.history.append(("started", name))
        return c

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        assert args[0] == "serve"
        log = open(os.path.join(self.base, "pods", name, "container.log"), "ab")
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server"))
        try:
            return subprocess.Popen([sys.executable, "-m", "msgstore.cli", *args], stdout=log, stderr=subprocess.STDOUT,
                                    env=env, cwd=ROOT)
        finally:
            log.close()

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
        if c.proc.poll() is None:
            c.proc.send_signal(signal.SIGTERM)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, c.proc.wait, 30)
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
        self.containers[pod].proc.send_signal(signal.SIGKILL)
