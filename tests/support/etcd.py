"""A real etcd server for tests (the arbiter of replica groups off Kubernetes).

Debian's ``etcd-server`` (``scripts/install_test_tools.sh`` installs it; ``etcd`` on the PATH)
or, without it, the single-member etcd beside the Kubernetes binaries
(``MSGSTORE_K8S_ASSETS``/``../shared/k8s/bin/etcd.xz``). :func:`unavailable` says why neither
is there, for a skip that ``make test`` does not allow (tests/conftest.py).
"""

from __future__ import annotations

import lzma
import os
import shutil
import signal
import subprocess
import time
import urllib.request

from tests.support.servers import ROOT, free_port, wait_until

CACHE = os.path.join(ROOT, ".venv", "etcd-bin")


def binary() -> tuple[str, bool] | None:
    """(path, whether it takes etcd's full flags) of the etcd to run, or None."""
    found = shutil.which("etcd")
    if found:
        return found, True
    assets = os.environ.get("MSGSTORE_K8S_ASSETS") or os.path.join(os.path.dirname(ROOT), "shared", "k8s", "bin")
    packed = os.path.join(assets, "etcd.xz")
    if not os.path.exists(packed):
        return None
    os.makedirs(CACHE, exist_ok=True)
    path = os.path.join(CACHE, "etcd")
    if not os.path.exists(path):
        # a file of this process's own: two test workers unpacking at once into one name could
        # rename into place a copy the other had just truncated and was still writing
        tmp = f"{path}.{os.getpid()}.tmp"
        with lzma.open(packed) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
    return path, False


def unavailable() -> str | None:
    if binary() is None:
        return "no etcd: install Debian's etcd-server (scripts/install_test_tools.sh) or set MSGSTORE_K8S_ASSETS"
    return None


class EtcdServer:
    """One etcd member on ``host`` (``prefix``: what runs a command there, a network namespace)."""

    def __init__(self, data_dir: str, host: str = "127.0.0.1", prefix: list[str] | None = None):
        found = binary()
        if found is None:
            raise RuntimeError(unavailable())
        self.path, self.full = found
        self.data_dir = data_dir
        self.host = host
        self.prefix = list(prefix or [])
        self.port = free_port() if host == "127.0.0.1" else 2379
        self.peer_port = free_port() if host == "127.0.0.1" else 2380
        self.proc: subprocess.Popen | None = None
        self.log_path = data_dir + ".log"

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def url(self, prefix: str = "/msgstore") -> str:
        """What ``msgstore serve --arbiter`` takes."""
        return f"etcd://{self.endpoint}{prefix}"

    def command(self) -> list[str]:
        client, peer = f"http://{self.host}:{self.port}", f"http://{self.host}:{self.peer_port}"
        if self.full:
            return [
                self.path,
                "--name",
                "arbiter",
                "--data-dir",
                self.data_dir,
                "--listen-client-urls",
                client,
                "--advertise-client-urls",
                client,
                "--listen-peer-urls",
                peer,
                "--initial-advertise-peer-urls",
                peer,
                "--initial-cluster",
                f"arbiter={peer}",
                "--log-level",
                "error",
            ]
        return [self.path, "-data-dir", self.data_dir, "-listen-client-url", client, "-listen-peer-url", peer, "-log-level", "error"]

    def start(self) -> EtcdServer:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.prefix + self.command(), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        wait_until(self.healthy, timeout=30, interval=0.1, what=f"etcd at {self.endpoint}")
        return self

    def healthy(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"etcd exited with {self.proc.returncode}: {open(self.log_path, errors='replace').read()[-2000:]}")
        try:  # (a host in a network namespace is reached over its bridge from here)
            with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as r:
                out = r.read().decode()
        except OSError:
            return False
        return '"health":"true"' in out.replace(" ", "")

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)

    def record(self, group: str, prefix: str = "/msgstore") -> dict | None:
        """The group's record as etcd holds it (read with etcd's own HTTP gateway)."""
        import base64
        import json

        key = base64.b64encode(f"{prefix}/groups/{group}".encode()).decode()
        req = urllib.request.Request(f"http://{self.endpoint}/v3/kv/range", data=json.dumps({"key": key}).encode(), method="POST")
        deadline = time.monotonic() + 5
        while True:
            try:
                with urllib.request.urlopen(req, timeout=2) as r:
                    kvs = json.loads(r.read()).get("kvs") or []
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        if not kvs:
            return None
        out = json.loads(base64.b64decode(kvs[0]["value"]))
        out["revision"] = int(kvs[0]["mod_revision"])
        return out
