"""A pod's container run as a local process, the way a kubelet runs it.

Shared by the kmock harness (``tests/operator/harness.py``) and the stand-in kubelet of the
end-to-end suite (``tests/e2e/kubelet.py``): both start the *rendered* container command of a
pod, so what runs is what a cluster would run. What a container runtime would give the process
is played here:

* the command is resolved in this virtualenv (``msgstore``, ``msgstore-operator``) and
  ``$(VAR)`` references are expanded from the container's environment, as Kubernetes does;
* volumes: a mount path the command line names (``--data-dir /var/lib/msgstore``) is rewritten
  to the volume's host directory; a mount the program finds by a fixed path of its own (the
  service-account token under ``/var/run/secrets``) is bind-mounted there in a private mount
  namespace (root only). Mounts that would hide this checkout, its virtualenv or the harness'
  own directories (an ``emptyDir`` on ``/tmp`` when they live under ``/tmp``) are left out;
* the network: every pod has its own IP; binding ``0.0.0.0`` becomes binding that IP (pods
  share the host's network namespace here, so two pods could not both bind a port on every
  address), in arguments and in environment values alike;
* readiness comes from the container's readiness probe (gRPC health, HTTP GET or TCP), as the
  kubelet's prober would; without a probe a running container is ready.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_BIN = os.path.dirname(sys.executable)
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
FIELD_REFS = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "status.podIP",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
)


def expand(text: str, env: dict[str, str]) -> str:
    """``$(VAR)`` → its value when defined (Kubernetes leaves unknown references as they are)."""
    return _VAR.sub(lambda m: env.get(m.group(1), m.group(0)), text)


def field_values(pod: dict, ip: str, host_ip: str = "127.0.0.1") -> dict[str, str]:
    """The downward-API fields a container's env may refer to."""
    meta, spec = pod.get("metadata", {}), pod.get("spec", {})
    return {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", "default"),
        "metadata.uid": meta.get("uid", ""),
        "status.podIP": ip,
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.hostIP": host_ip,
    }


def container_env(
    container: dict, fields: dict[str, str], config_maps: Callable[[str], dict] | None = None, secrets: Callable[[str], dict] | None = None
) -> dict[str, str]:
    """The container's environment, in order (later entries may refer to earlier ones)."""
    env: dict[str, str] = {}
    for item in container.get("env") or []:
        if "value" in item:
            env[item["name"]] = expand(str(item["value"]), env)
            continue
        source = item.get("valueFrom") or {}
        if "fieldRef" in source:
            env[item["name"]] = fields.get(source["fieldRef"]["fieldPath"], "")
        elif "configMapKeyRef" in source and config_maps is not None:
            ref = source["configMapKeyRef"]
            env[item["name"]] = (config_maps(ref["name"]) or {}).get(ref["key"], "")
        elif "secretKeyRef" in source and secrets is not None:
            ref = source["secretKeyRef"]
            env[item["name"]] = (secrets(ref["name"]) or {}).get(ref["key"], "")
    return env


def resolve_executable(name: str) -> str:
    if os.path.isabs(name):
        return name
    local = os.path.join(VENV_BIN, name)
    return local if os.path.exists(local) else (shutil.which(name) or name)


class ContainerProcess:
    """One container of one pod, started from its spec; restartable, stoppable, probeable."""

    def __init__(
        self,
        pod: dict,
        container: dict,
        ip: str,
        volumes: dict[str, str],
        log_path: str,
        *,
        env: dict[str, str] | None = None,
        rewrite: Callable[[list[str]], list[str]] | None = None,
        protected: tuple[str, ...] = (),
    ):
        """``volumes``: mount path → host directory. ``env``: extra variables (the in-cluster
        API address). ``rewrite``: a last pass over the arguments (cluster DNS names).
        ``protected``: more host paths a bind mount must not hide."""
        self.pod = pod
        self.container = container
        self.name = container["name"]
        self.ip = ip
        self.volumes = dict(volumes)
        self.log_path = log_path
        # a bind mount must not hide this checkout, the virtualenv, or the volumes' own sources
        self.protected = (ROOT, os.path.dirname(VENV_BIN), os.path.dirname(log_path), *self.volumes.values(), *protected)
        fields = field_values(pod, ip)
        self.env = {**container_env(container, fields), **(env or {})}
        self.env = {k: v.replace("0.0.0.0", ip) for k, v in self.env.items()}
        self.argv, self.binds = self._command(rewrite)
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.pids: list[int] = []

    # ------------------------------------------------------------------ the command

    def _command(self, rewrite) -> tuple[list[str], dict[str, str]]:
        words = [*self.container.get("command", []), *self.container.get("args", [])]
        if not words:
            raise ValueError(f"container {self.name} names no command (the image's entry point is not known here)")
        words = [expand(str(w), self.env) for w in words]
        mounts = sorted(self.volumes, key=len, reverse=True)
        named: set[str] = set()
        argv = []
        for w in words:
            for mount in mounts:
                if w == mount or w.startswith(mount + "/"):
                    w = self.volumes[mount] + w[len(mount) :]
                    named.add(mount)
                    break
            else:
                for mount in mounts:  # "--flag=/path" or a path inside a shell script
                    if mount + "/" in w or w.endswith("=" + mount):
                        w = w.replace(mount, self.volumes[mount])
                        named.add(mount)
            argv.append(w.replace("0.0.0.0", self.ip))
        if rewrite is not None:
            argv = rewrite(argv)
        argv[0] = resolve_executable(argv[0])
        binds = {m: h for m, h in self.volumes.items() if m not in named and not self._hides(m)}
        return argv, binds

    def _hides(self, mount: str) -> bool:
        return any(p == mount or p.startswith(mount.rstrip("/") + "/") for p in self.protected)

    def _wrapped(self) -> list[str]:
        """The command inside a private mount namespace with the fixed-path volumes bound."""
        if not self.binds:
            return self.argv
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            raise PermissionError(f"{self.name} needs {sorted(self.binds)} mounted; that needs root and unshare(1)")
        script = "set -e\n" + "".join(f'mkdir -p "{m}"\nmount --bind "{h}" "{m}"\n' for m, h in sorted(self.binds.items()))
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script + 'exec "$@"', "pod", *self.argv]

    # ------------------------------------------------------------------ running

    def start(self) -> ContainerProcess:
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        env = {"PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1", **self.env}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self._wrapped(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=self._workdir(),
                start_new_session=True,
            )
        self.pids.append(self.proc.pid)
        return self

    def _workdir(self) -> str:
        """The container's ``workingDir`` where a volume holds it, else the pod's own directory."""
        wd = self.container.get("workingDir", "")
        for mount in sorted(self.volumes, key=len, reverse=True):
            if wd == mount or wd.startswith(mount + "/"):
                return self.volumes[mount] + wd[len(mount) :]
        return os.path.dirname(self.log_path)

    def restart(self) -> None:
        self.restarts += 1
        self.start()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, grace_s: float = 30.0) -> int | None:
        """SIGTERM, then SIGKILL after ``grace_s`` (a pod's termination grace period)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                return self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
        return self.proc.wait(10)

    def kill(self) -> None:
        """SIGKILL the container's main process (an OOM kill, a crash)."""
        if self.running:
            self._signal(signal.SIGKILL)
            self.proc.wait(10)

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)  # the whole container: unshare's child too
        except ProcessLookupError:
            pass

    # ------------------------------------------------------------------ probes

    def ready(self) -> bool:
        if not self.running:
            return False
        probe = self.container.get("readinessProbe")
        return True if not probe else probe_once(probe, self.ip, self.container)

    def log(self, tail: int = 4000) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-tail:]
        except FileNotFoundError:
            return ""


def _port(value, container: dict) -> int:
    if isinstance(value, int):
        return value
    return next(p["containerPort"] for p in container.get("ports", []) if p.get("name") == value)


def probe_once(probe: dict, ip: str, container: dict, timeout: float = 1.0) -> bool:
    """One run of a readiness/liveness probe against the container at ``ip``."""
    try:
        if "grpc" in probe:
            with grpc.insecure_channel(f"{ip}:{_port(probe['grpc']['port'], container)}") as ch:
                resp = health_pb2_grpc.HealthStub(ch).Check(
                    health_pb2.HealthCheckRequest(service=probe["grpc"].get("service", "")), timeout=timeout
                )
                return resp.status == health_pb2.HealthCheckResponse.SERVING
        if "httpGet" in probe:
            get = probe["httpGet"]
            url = f"http://{ip}:{_port(get['port'], container)}{get.get('path', '/')}"
            with urllib.request.urlopen(url, timeout=timeout) as r:
                return 200 <= r.status < 400
        if "tcpSocket" in probe:
            with socket.create_connection((ip, _port(probe["tcpSocket"]["port"], container)), timeout):
                return True
    except (grpc.RpcError, OSError, StopIteration):
        return False
    return True
