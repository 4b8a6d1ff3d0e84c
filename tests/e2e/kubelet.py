"""What a cluster has beside its control plane, played for the end-to-end suite.

* ``Kubelet`` for ``node-1``: keeps the Node Ready (status and Lease), runs every pod scheduled
  to it as local processes (``tests/support/pods.py``: the pod's real container command, its
  volumes, env and downward API), gives each pod an IP of its own (``10.244.x.y``, added to the
  loopback interface, since the API server refuses loopback addresses in EndpointSlices),
  writes the pod's status through the ``status`` subresource (phase, podIP, conditions,
  containerStatuses with restart counts and exit codes, Ready from the readiness probe),
  restarts containers that die (``restartPolicy``), refreshes ConfigMap and Secret volumes as a
  kubelet does (atomically, every couple of seconds here instead of a minute), projects the
  ServiceAccount token through the TokenRequest API, and on deletion sends SIGTERM, waits up to
  the grace period and then finalizes the deletion. Images it "has" are given at start; any
  other image fails to pull (``ErrImagePull``), as on a node without registry access.
* a volume provisioner for the default StorageClass ``standard``: a hostPath PV per pending
  claim (the directory outlives pods, so data survives restarts), expansion when a claim asks
  for more, deletion of released volumes.
* cluster DNS and the Service proxy: ``--peers-dns <svc>.<ns>.svc...:port`` becomes
  ``--peers-file`` kept from the Service's EndpointSlices (the real EndpointSlice controller's
  output), and ``<svc>.<ns>.svc:port`` in a container's env or arguments becomes one ready
  endpoint's address when the container starts; in-cluster API clients get
  ``KUBERNETES_SERVICE_HOST/PORT`` pointing at the API server.
"""

from __future__ import annotations

import base64
import concurrent.futures
import ipaddress
import logging
import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.support.pods import ContainerProcess

from .plane import ControlPlane

log = logging.getLogger(__name__)

NODE = "node-1"
STORAGE_CLASS = "standard"
PROVISIONER = "e2e.msgstore.io/hostpath"
POD_NETWORK = ipaddress.ip_network("10.244.0.0/16")
TICK = 0.1
REFRESH_S = 2.0  # ConfigMap/Secret volumes re-read (a real kubelet: about a minute)
PROBE_S = 0.5
SERVICE_NAME = re.compile(r"\b([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.svc(\.cluster\.local)?:(\d+)\b")


class ApiError(RuntimeError):
    def __init__(self, status: int, text: str):
        super().__init__(f"{status}: {text[:500]}")
        self.status = status


class Api:
    """The few JSON calls the stand-ins make, with the admin client certificate."""

    def __init__(self, plane: ControlPlane):
        self.url = plane.url
        self.http = plane.session()

    def _do(self, method: str, path: str, body: Any = None, params: dict | None = None, content_type: str = "application/json") -> Any:
        r = self.http.request(method, self.url + path, json=body, params=params, timeout=30, headers={"Content-Type": content_type})
        if r.status_code == 404:
            return None
        if r.status_code >= 400:
            raise ApiError(r.status_code, r.text)
        return r.json() if r.content else {}

    def get(self, path: str, **params: str) -> Any:
        return self._do("GET", path, params=params or None)

    def items(self, path: str, **params: str) -> list[dict]:
        return (self.get(path, **params) or {}).get("items", [])

    def post(self, path: str, body: Any) -> Any:
        return self._do("POST", path, body)

    def put(self, path: str, body: Any) -> Any:
        return self._do("PUT", path, body)

    def patch(self, path: str, body: Any, strategic: bool = False) -> Any:
        return self._do(
            "PATCH", path, body, content_type="application/strategic-merge-patch+json" if strategic else "application/merge-patch+json"
        )

    def delete(self, path: str, body: Any = None) -> Any:
        return self._do("DELETE", path, body)

    def close(self) -> None:
        self.http.close()


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class PodRuntime:
    """What the kubelet keeps for one pod (by uid)."""

    namespace: str
    name: str
    uid: str
    ip: str
    dir: str
    container: ContainerProcess | None = None
    waiting: tuple[str, str] | None = None  # (reason, message) while the container cannot start
    ready: bool = False
    last_probe: float = 0.0
    probing: concurrent.futures.Future | None = None
    last_refresh: float = 0.0
    reported: dict | None = None
    started_at: str = ""
    first_started: str = ""
    terminated: dict | None = None  # exit of a container that will not be restarted
    last_exit: dict | None = None
    next_restart: float = 0.0
    backoff: float = 0.5  # the next crash's wait, doubled by each crash soon after a start (the kubelet's, shortened)
    running_since: float = 0.0
    terminating: bool = False
    volume_sources: dict[str, dict] = field(default_factory=dict)  # mount path -> volume


class Kubelet:
    def __init__(self, plane: ControlPlane, base: str, images: set[str]):
        self.plane = plane
        self.api = Api(plane)
        self.base = base
        self.images = set(images)
        self.pods: dict[str, PodRuntime] = {}  # by uid
        self.errors: list[str] = []
        self.history: list[tuple[str, str]] = []  # (started|stopped|crashed|restarted, ns/pod) in order
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # a block of pod addresses of its own (10.244.<k>.x): another worker's or run's kubelet
        # hands out addresses on the same host at the same time
        self._next_ip = 256 * (os.getpid() % 250 + 1) + 10
        self._ips: set[str] = set()
        self._probes = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="kubelet-probe")
        self._stoppers = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="kubelet-stop")
        self._last_heartbeat = 0.0
        self._lock = threading.Lock()
        self._dns_names: dict[tuple[str, str], int] = {}  # (namespace, service) -> port, for --peers-dns

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Kubelet:
        self._register_node()
        self._storage_class()
        self._thread = threading.Thread(target=self._run, name="kubelet", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        for rt in list(self.pods.values()):
            if rt.container is not None:
                rt.container.kill()
            self._release_ip(rt.ip)
        self._probes.shutdown(wait=False, cancel_futures=True)
        self._stoppers.shutdown(wait=False, cancel_futures=True)
        self.api.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            for step in (self._heartbeat, self._provision, self._sync_pods, self._dns):
                try:
                    step()
                except Exception as e:  # keep the node alive; tests assert on outcomes
                    self.errors.append(f"{step.__name__}: {e!r}")
                    log.exception("kubelet %s failed", step.__name__)
            self._stop.wait(max(0.0, TICK - (time.monotonic() - t0)))

    # ------------------------------------------------------------------ the node

    def _register_node(self) -> None:
        try:
            self.api.post(
                "/api/v1/nodes",
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": NODE,
                        "labels": {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
                    },
                },
            )
        except ApiError as e:
            if e.status != 409:
                raise
        self._heartbeat(force=True)

    def _heartbeat(self, force: bool = False) -> None:
        if not force and time.monotonic() - self._last_heartbeat < 10:
            return
        self._last_heartbeat = time.monotonic()
        t = now()

        def cond(ctype: str, status: str, reason: str) -> dict:
            return {
                "type": ctype,
                "status": status,
                "reason": reason,
                "message": "stand-in kubelet",
                "lastHeartbeatTime": t,
                "lastTransitionTime": t,
            }

        resources = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
        self.api.patch(
            f"/api/v1/nodes/{NODE}/status",
            {
                "status": {
                    "capacity": resources,
                    "allocatable": resources,
                    "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": NODE}],
                    "conditions": [
                        cond("Ready", "True", "KubeletReady"),
                        cond("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                        cond("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                        cond("PIDPressure", "False", "KubeletHasSufficientPID"),
                    ],
                    "nodeInfo": {
                        "kubeletVersion": "v1.36.2-standin",
                        "containerRuntimeVersion": "process://local",
                        "architecture": "amd64",
                        "operatingSystem": "linux",
                        "osImage": "msgstore e2e",
                        "kernelVersion": os.uname().release,
                        "kubeProxyVersion": "",
                        "machineID": "",
                        "systemUUID": "",
                        "bootID": "",
                    },
                }
            },
            strategic=True,
        )
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": NODE, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": NODE,
                "leaseDurationSeconds": 40,
                "renewTime": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime()),
            },
        }
        path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        if self.api.get(f"{path}/{NODE}") is None:
            self.api.post(path, lease)
        else:
            self.api.patch(f"{path}/{NODE}", {"spec": lease["spec"]})

    # ------------------------------------------------------------------ storage

    def _storage_class(self) -> None:
        try:
            self.api.post(
                "/apis/storage.k8s.io/v1/storageclasses",
                {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "StorageClass",
                    "metadata": {"name": STORAGE_CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
                    "provisioner": PROVISIONER,
                    "reclaimPolicy": "Delete",
                    "allowVolumeExpansion": True,
                    "volumeBindingMode": "Immediate",
                },
            )
        except ApiError as e:
            if e.status != 409:
                raise

    def _provision(self) -> None:
        for pvc in self.api.items("/api/v1/persistentvolumeclaims"):
            meta, spec, status = pvc["metadata"], pvc["spec"], pvc.get("status") or {}
            if spec.get("storageClassName") != STORAGE_CLASS or meta.get("deletionTimestamp"):
                continue
            want = spec["resources"]["requests"]["storage"]
            if not spec.get("volumeName"):
                self._create_volume(pvc, want)
            elif status.get("phase") == "Bound" and _bytes(want) > _bytes((status.get("capacity") or {}).get("storage", "0")):
                self._expand(pvc, want)
        for pv in self.api.items("/api/v1/persistentvolumes"):
            ann = pv["metadata"].get("annotations") or {}
            if (
                ann.get("pv.kubernetes.io/provisioned-by") == PROVISIONER
                and (pv.get("status") or {}).get("phase") == "Released"
                and pv["spec"].get("persistentVolumeReclaimPolicy") == "Delete"
            ):
                shutil.rmtree(pv["spec"]["hostPath"]["path"], ignore_errors=True)
                self.api.delete(f"/api/v1/persistentvolumes/{pv['metadata']['name']}")

    def _create_volume(self, pvc: dict, size: str) -> None:
        meta = pvc["metadata"]
        name = f"pvc-{meta['uid']}"
        if self.api.get(f"/api/v1/persistentvolumes/{name}") is not None:
            return
        path = os.path.join(self.base, "volumes", meta["namespace"], f"{meta['name']}-{meta['uid'][:8]}")
        os.makedirs(path, exist_ok=True)
        self.api.post(
            "/api/v1/persistentvolumes",
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
                "spec": {
                    "capacity": {"storage": size},
                    "accessModes": pvc["spec"].get("accessModes", ["ReadWriteOnce"]),
                    "persistentVolumeReclaimPolicy": "Delete",
                    "storageClassName": STORAGE_CLASS,
                    "hostPath": {"path": path, "type": "Directory"},
                    "claimRef": {
                        "apiVersion": "v1",
                        "kind": "PersistentVolumeClaim",
                        "namespace": meta["namespace"],
                        "name": meta["name"],
                        "uid": meta["uid"],
                    },
                },
            },
        )

    def _expand(self, pvc: dict, size: str) -> None:
        """The external resizer's and the kubelet's part of a volume expansion."""
        meta = pvc["metadata"]
        self.api.patch(f"/api/v1/persistentvolumes/{pvc['spec']['volumeName']}", {"spec": {"capacity": {"storage": size}}})
        self.api.patch(
            f"/api/v1/namespaces/{meta['namespace']}/persistentvolumeclaims/{meta['name']}/status",
            {"status": {"capacity": {"storage": size}, "conditions": None, "allocatedResources": {"storage": size}}},
        )

    def volume_dir(self, namespace: str, claim: str) -> str | None:
        """Where a claim's data lives on this machine (tests back-date segment files there)."""
        pvc = self.api.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}")
        if not pvc or not pvc["spec"].get("volumeName"):
            return None
        pv = self.api.get(f"/api/v1/persistentvolumes/{pvc['spec']['volumeName']}")
        return pv["spec"]["hostPath"]["path"] if pv else None

    # ------------------------------------------------------------------ pods

    def _sync_pods(self) -> None:
        pods = self.api.items("/api/v1/pods", fieldSelector=f"spec.nodeName={NODE}")
        seen = set()
        for pod in pods:
            uid = pod["metadata"]["uid"]
            seen.add(uid)
            rt = self.pods.get(uid)
            if pod["metadata"].get("deletionTimestamp"):
                if rt is None:
                    self._finalize(pod)
                elif not rt.terminating:
                    rt.terminating = True
                    self._stoppers.submit(self._terminate, rt, pod)
                continue
            if rt is None:
                rt = self._admit(pod)
            if not rt.terminating:
                self._run_pod(rt, pod)
        for uid in [u for u in self.pods if u not in seen and not self.pods[u].terminating]:  # gone without a graceful deletion
            rt = self.pods.pop(uid)
            if rt.container is not None:
                rt.container.kill()
                self.history.append(("stopped", f"{rt.namespace}/{rt.name}"))
            self._release_ip(rt.ip)

    def _admit(self, pod: dict) -> PodRuntime:
        meta = pod["metadata"]
        rt = PodRuntime(
            meta["namespace"],
            meta["name"],
            meta["uid"],
            self._allocate_ip(),
            os.path.join(self.base, "pods", meta["namespace"], f"{meta['name']}-{meta['uid'][:8]}"),
        )
        self.pods[rt.uid] = rt
        return rt

    def _run_pod(self, rt: PodRuntime, pod: dict) -> None:
        spec = pod["spec"]
        container = spec["containers"][0]
        c = rt.container
        if c is None and rt.terminated is None:
            if container.get("image") not in self.images:
                rt.waiting = ("ErrImagePull", f'failed to pull image "{container.get("image")}": not found on {NODE}')
            else:
                try:
                    volumes = self._volumes(rt, pod, container)
                    rt.container = ContainerProcess(
                        pod,
                        container,
                        rt.ip,
                        volumes,
                        os.path.join(rt.dir, f"{container['name']}.log"),
                        env=self._service_env(),
                        rewrite=self._rewrite_args,
                    )
                    rt.container.env = {k: self._services(v, rt.namespace) for k, v in rt.container.env.items()}
                    rt.container.start()
                    rt.running_since = time.monotonic()
                    rt.started_at = rt.first_started = now()
                    rt.waiting = None
                    self.history.append(("started", f"{rt.namespace}/{rt.name}"))
                except MissingVolume as e:
                    rt.waiting = ("ContainerCreating", str(e))
        elif c is not None and not c.running and rt.terminated is None:
            code = c.exit_code
            rt.last_exit = {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "finishedAt": now(),
                "startedAt": rt.started_at,
            }
            if code != 0 and c.container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
                rt.last_exit["message"] = "\n".join(c.log(2048).splitlines()[-80:])  # the kubelet's: 2 KiB, 80 lines
            policy = spec.get("restartPolicy", "Always")
            if policy == "Always" or (policy == "OnFailure" and code != 0):
                if rt.next_restart == 0.0:
                    self.history.append(("crashed", f"{rt.namespace}/{rt.name}"))
                    if time.monotonic() - rt.running_since > 10:  # it had run well: the back-off starts over
                        rt.backoff = 0.5
                    rt.next_restart = time.monotonic() + rt.backoff  # (a container that keeps crashing waits longer each time)
                    rt.backoff = min(rt.backoff * 2, 8.0)
                elif time.monotonic() >= rt.next_restart:
                    rt.next_restart = 0.0
                    rt.ready = False
                    c.restart()
                    rt.running_since = time.monotonic()
                    rt.started_at = now()
                    self.history.append(("restarted", f"{rt.namespace}/{rt.name}"))
            else:
                rt.terminated = rt.last_exit
                self.history.append(("stopped", f"{rt.namespace}/{rt.name}"))
        if rt.container is not None and rt.container.running:
            self._probe(rt)
            if time.monotonic() - rt.last_refresh > REFRESH_S:
                rt.last_refresh = time.monotonic()
                self._refresh_volumes(rt, pod)
        self._report(rt, pod, container)

    def _probe(self, rt: PodRuntime) -> None:
        if rt.probing is not None and rt.probing.done():
            try:
                rt.ready = bool(rt.probing.result()) and rt.container.running
            except Exception:
                rt.ready = False
            rt.probing = None
        if rt.probing is None and time.monotonic() - rt.last_probe >= PROBE_S:
            rt.last_probe = time.monotonic()
            rt.probing = self._probes.submit(rt.container.ready)

    def _report(self, rt: PodRuntime, pod: dict, container: dict) -> None:
        c = rt.container
        running = c is not None and c.running
        if rt.terminated is not None:
            phase = "Succeeded" if rt.terminated["exitCode"] == 0 else "Failed"
            state = {"terminated": rt.terminated}
        elif running:
            phase, state = "Running", {"running": {"startedAt": rt.started_at}}
        elif c is not None:
            phase, state = "Running", {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off restarting"}}
        else:
            reason, message = rt.waiting or ("ContainerCreating", "")
            phase, state = "Pending", {"waiting": {"reason": reason, "message": message}}
        ready = running and rt.ready
        cstatus = {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": "",
            "ready": ready,
            "started": running,
            "restartCount": c.restarts if c else 0,
            "state": state,
        }
        if rt.last_exit and rt.terminated is None:
            cstatus["lastState"] = {"terminated": rt.last_exit}
        status = {
            "phase": phase,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "ContainersReady", "status": "True" if ready else "False"},
                {"type": "Ready", "status": "True" if ready else "False"},
            ],
            "containerStatuses": [cstatus],
        }
        if c is not None:
            status.update(podIP=rt.ip, podIPs=[{"ip": rt.ip}], startTime=rt.first_started)
        if status == rt.reported:
            return
        t = now()
        body = {"status": {**status, "conditions": [{**x, "lastTransitionTime": t} for x in status["conditions"]]}}
        self.api.patch(f"/api/v1/namespaces/{rt.namespace}/pods/{rt.name}/status", body, strategic=True)
        rt.reported = status

    def _terminate(self, rt: PodRuntime, pod: dict) -> None:
        try:
            if rt.container is not None and rt.container.running:
                grace = pod["metadata"].get("deletionGracePeriodSeconds")
                grace = pod["spec"].get("terminationGracePeriodSeconds", 30) if grace is None else grace
                rt.container.stop(float(grace))
                self.history.append(("stopped", f"{rt.namespace}/{rt.name}"))
            self._finalize(pod)
            self._release_ip(rt.ip)
            self.pods.pop(rt.uid, None)
        except Exception as e:
            self.errors.append(f"terminate {rt.name}: {e!r}")

    def _finalize(self, pod: dict) -> None:
        meta = pod["metadata"]
        try:
            self.api.delete(
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}},
            )
        except ApiError as e:
            if e.status != 409:  # another uid by now: already gone
                raise

    # ------------------------------------------------------------------ volumes

    def _volumes(self, rt: PodRuntime, pod: dict, container: dict) -> dict[str, str]:
        sources = {v["name"]: v for v in pod["spec"].get("volumes", [])}
        out = {}
        for m in container.get("volumeMounts", []):
            vol = sources.get(m["name"])
            if vol is None:
                raise MissingVolume(f"volume {m['name']} is not defined")
            rt.volume_sources[m["mountPath"]] = vol
            out[m["mountPath"]] = self._materialize(rt, pod, vol)
        return out

    def _materialize(self, rt: PodRuntime, pod: dict, vol: dict) -> str:
        ns = rt.namespace
        if "persistentVolumeClaim" in vol:
            claim = vol["persistentVolumeClaim"]["claimName"]
            path = self.volume_dir(ns, claim)
            if path is None:
                raise MissingVolume(f"persistentvolumeclaim {claim} is not bound")
            return path
        target = os.path.join(rt.dir, "volumes", vol["name"])
        os.makedirs(target, exist_ok=True)
        if "emptyDir" in vol:
            return target
        if "configMap" in vol:
            _write_files(
                target, self._config_map(ns, vol["configMap"]["name"], vol["configMap"].get("optional")), vol["configMap"].get("items")
            )
        elif "secret" in vol:
            _write_files(target, self._secret(ns, vol["secret"]["secretName"], vol["secret"].get("optional")), vol["secret"].get("items"))
        elif "projected" in vol:
            files: dict[str, bytes] = {}
            for src in vol["projected"].get("sources", []):
                if "serviceAccountToken" in src:
                    files[src["serviceAccountToken"]["path"]] = self._token(pod, src["serviceAccountToken"]).encode()
                elif "configMap" in src:
                    data = self._config_map(ns, src["configMap"]["name"], src["configMap"].get("optional"))
                    files.update(_select(data, src["configMap"].get("items")))
                elif "secret" in src:
                    files.update(
                        _select(self._secret(ns, src["secret"]["name"], src["secret"].get("optional")), src["secret"].get("items"))
                    )
                elif "downwardAPI" in src:
                    for item in src["downwardAPI"].get("items", []):
                        path = item.get("fieldRef", {}).get("fieldPath", "")
                        value = {"metadata.namespace": ns, "metadata.name": rt.name}.get(path, "")
                        files[item["path"]] = value.encode()
            _write_files(target, files, None)
        return target

    def _refresh_volumes(self, rt: PodRuntime, pod: dict) -> None:
        """ConfigMap and Secret volumes follow their sources, as a kubelet's sync loop does."""
        for vol in rt.volume_sources.values():
            if "configMap" in vol or "secret" in vol:
                try:
                    self._materialize(rt, pod, vol)
                except MissingVolume:
                    pass

    def _config_map(self, ns: str, name: str, optional: bool | None) -> dict[str, bytes]:
        cm = self.api.get(f"/api/v1/namespaces/{ns}/configmaps/{name}")
        if cm is None:
            if optional:
                return {}
            raise MissingVolume(f'configmap "{name}" not found')
        return {k: v.encode() for k, v in (cm.get("data") or {}).items()}

    def _secret(self, ns: str, name: str, optional: bool | None) -> dict[str, bytes]:
        secret = self.api.get(f"/api/v1/namespaces/{ns}/secrets/{name}")
        if secret is None:
            if optional:
                return {}
            raise MissingVolume(f'secret "{name}" not found')
        return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}

    def _token(self, pod: dict, source: dict) -> str:
        meta = pod["metadata"]
        sa = pod["spec"].get("serviceAccountName", "default")
        spec: dict[str, Any] = {
            "expirationSeconds": int(source.get("expirationSeconds", 3607)),
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
        }
        if source.get("audience"):
            spec["audiences"] = [source["audience"]]
        resp = self.api.post(
            f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{sa}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )
        if resp is None:
            raise MissingVolume(f'serviceaccount "{sa}" not found')
        return resp["status"]["token"]

    # ------------------------------------------------------------------ addressing

    def _allocate_ip(self) -> str:
        while True:
            with self._lock:
                ip = str(POD_NETWORK.network_address + self._next_ip)
                self._next_ip += 1
            added = subprocess.run(["ip", "addr", "add", f"{ip}/32", "dev", "lo"], capture_output=True, text=True)
            if added.returncode == 0:
                self._ips.add(ip)
                return ip
            if "File exists" not in added.stderr:
                raise RuntimeError(f"ip addr add {ip}: {added.stderr.strip()}")
            # (someone else's: a run that was killed, or another kubelet on this host): the next one

    def _release_ip(self, ip: str) -> None:
        if ip in self._ips:
            self._ips.discard(ip)
            subprocess.run(["ip", "addr", "del", f"{ip}/32", "dev", "lo"], capture_output=True)

    def _service_env(self) -> dict[str, str]:
        port = str(self.plane.api_port)
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port, "KUBERNETES_SERVICE_PORT_HTTPS": port}

    def _peers_file(self, ns: str, service: str) -> str:
        return os.path.join(self.base, "dns", ns, f"{service}.peers")

    def _rewrite_args(self, argv: list[str]) -> list[str]:
        out: list[str] = []
        it = iter(argv)
        for a in it:
            if a == "--peers-dns":
                target = next(it)
                m = SERVICE_NAME.fullmatch(target)
                if m is None:
                    out += [a, target]
                    continue
                service, ns, port = m.group(1), m.group(3), m.group(6)
                out += ["--peers-file", self._peers_file(ns, service)]
                self._watch_dns(ns, service, int(port))
                continue
            out.append(self._services(a, None))
        return out

    def _watch_dns(self, ns: str, service: str, port: int) -> None:
        with self._lock:
            self._dns_names[(ns, service)] = port
        self._write_peers(ns, service, port)

    def _dns(self) -> None:
        for (ns, service), port in list(self._dns_names.items()):
            self._write_peers(ns, service, port)

    def _endpoints(self, ns: str, service: str, ready_only: bool) -> list[tuple[str, dict]]:
        out = []
        for sl in self.api.items(
            f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices", labelSelector=f"kubernetes.io/service-name={service}"
        ):
            ports = {p.get("name", ""): p.get("port") for p in sl.get("ports") or []}
            for ep in sl.get("endpoints") or []:
                if ready_only and not (ep.get("conditions") or {}).get("ready"):
                    continue
                for addr in ep.get("addresses", []):
                    out.append((addr, ports))
        return sorted(out, key=lambda e: e[0])

    def _write_peers(self, ns: str, service: str, port: int) -> None:
        path = self._peers_file(ns, service)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        text = "".join(f"{addr}:{port}\n" for addr, _ in self._endpoints(ns, service, ready_only=False))
        try:
            with open(path) as f:
                if f.read() == text:
                    return
        except FileNotFoundError:
            pass
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)

    def _services(self, text: str, default_ns: str | None) -> str:
        """``<svc>.<ns>.svc:port`` → a ready endpoint's ``ip:targetPort`` (DNS and kube-proxy)."""

        def one(m: re.Match) -> str:
            service, ns, port = m.group(1), m.group(3), int(m.group(6))
            svc = self.api.get(f"/api/v1/namespaces/{ns}/services/{service}")
            if svc is None:
                return m.group(0)
            sport = next((p for p in svc["spec"].get("ports", []) if p["port"] == port), None)
            for addr, ports in self._endpoints(ns, service, ready_only=True):
                target = ports.get((sport or {}).get("name", ""), port) if sport else port
                return f"{addr}:{target}"
            return m.group(0)

        return SERVICE_NAME.sub(one, text)

    # ------------------------------------------------------------------ for tests

    def runtime(self, namespace: str, name: str) -> PodRuntime | None:
        for rt in list(self.pods.values()):
            if rt.namespace == namespace and rt.name == name and not rt.terminating:
                return rt
        return None

    def kill(self, namespace: str, name: str) -> int:
        """SIGKILL a pod's container process (the kubelet restarts it); returns the killed pid."""
        rt = self.runtime(namespace, name)
        assert rt is not None and rt.container is not None and rt.container.running, f"{namespace}/{name} is not running"
        pid = rt.container.proc.pid
        rt.container.kill()
        return pid

    def signal(self, namespace: str, name: str, sig: int) -> int:
        """Send ``sig`` to a pod's container process (SIGSTOP: hung, alive, not Ready; SIGCONT)."""
        rt = self.runtime(namespace, name)
        assert rt is not None and rt.container is not None and rt.container.running, f"{namespace}/{name} is not running"
        pid = rt.container.proc.pid
        os.kill(pid, sig)
        return pid


class MissingVolume(Exception):
    """A volume's source is not there yet (the pod stays ContainerCreating, as with FailedMount)."""


def _select(data: dict[str, bytes], items: list[dict] | None) -> dict[str, bytes]:
    if not items:
        return dict(data)
    return {i.get("path", i["key"]): data[i["key"]] for i in items if i["key"] in data}


def _write_files(target: str, data: dict[str, bytes], items: list[dict] | None) -> None:
    """Each file replaced atomically when its content changed (readers never see half a file)."""
    for name, value in _select(data, items).items():
        path = os.path.join(target, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            with open(path, "rb") as f:
                if f.read() == value:
                    continue
        except FileNotFoundError:
            pass
        with open(path + ".tmp", "wb") as f:
            f.write(value)
        os.replace(path + ".tmp", path)


_UNITS = {
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "Pi": 1 << 50,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
}


def _bytes(quantity: str) -> float:
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(quantity))
    if not m:
        return 0.0
    return float(m.group(1)) * _UNITS.get(m.group(2), 1)
