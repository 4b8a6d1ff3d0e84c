"""Real ``msgstore serve`` processes on 127.0.0.1 for tests."""

from __future__ import annotations

import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL_STORE = [
    "mappedFileSizeCommitLog=262144",
    "mappedFileSizeConsumeQueue=20000",
    "maxHashSlotNum=4096",
    "maxIndexNum=16384",
    "flushIntervalCommitLog=20",
    "flushIntervalConsumeQueue=50",
    "cleanResourceInitialDelay=3600000",
]


# Ports handed out below the kernel's ephemeral range (32768-60999 here): a port the kernel
# picked for us from that range could be taken, before the server binds it, as the source port
# of any outgoing connection (a CI run lost a campaign to that). Shuffled once per run and taken
# in turn, each checked free when handed out.
# Under pytest-xdist each worker takes its own quarter of the range, so two workers never hand
# out the same port in the moment before its server binds it.
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % 4
_POOL = itertools.cycle(random.Random(os.getpid()).sample(range(12000 + 1000 * _WORKER, 13000 + 1000 * _WORKER), 1000))


def free_port() -> int:
    for _ in range(1000):
        port = next(_POOL)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # (all taken: what the kernel gives)
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate, timeout: float = 20.0, interval: float = 0.02, what: str | Callable[[], str] = "condition"):
    """Poll ``predicate`` until it returns something truthy or the deadline passes (``what``
    may be a callable: the state at the deadline is then said)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what() if callable(what) else what}")
        time.sleep(interval)


class ServerProcess:
    def __init__(
        self,
        data_dir: str,
        *,
        port: int | None = None,
        settings: list[str] | None = None,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        name: str | None = None,
        tls_ca: str | None = None,
        tls_client: tuple[str, str] | None = None,
        name_flag: bool = True,
        host: str = "127.0.0.1",
        prefix: list[str] | None = None,
        python: str | None = None,
        root: str | None = None,
    ):
        """``host``/``prefix``: the address to bind and what runs the command there (a
        network namespace's ``ip netns exec NS``; tests/support/netns.py). ``python``/``root``:
        another checkout's interpreter and tree (the benchmarks' baseline server)."""
        self.python = python or sys.executable
        self.root = root or ROOT
        self.data_dir = data_dir
        self.host = host
        self.prefix = list(prefix or [])
        self.port = port or free_port()
        self.metrics_port = free_port()
        self.settings = SMALL_STORE + list(settings or [])
        self.extra = list(args or [])
        self.env = env or {}
        self.name = name or f"node-{self.port}"
        self.name_flag = name_flag  # False: the server picks its default name
        self.tls_ca = tls_ca
        self.tls_client = tls_client
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(os.path.dirname(os.path.abspath(data_dir)), f"{self.name}.log")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [
            self.python,
            "-m",
            "msgstore.cli",
            "serve",
            "--data-dir",
            self.data_dir,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--metrics-port",
            str(self.metrics_port),
            *(["--node-name", self.name] if self.name_flag else []),
            "--grace",
            "2",
            "--log-format",
            "json",
        ]
        for s in self.settings:
            cmd += ["--set", s]
        return cmd + self.extra

    def start(self, wait: bool = True) -> ServerProcess:
        env = dict(os.environ, PYTHONPATH=os.path.join(self.root, "server"), **self.env)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.prefix + self.command(), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.root)
        log.close()
        if wait:
            self.wait_serving()
        return self

    def health(self, timeout: float = 1.0) -> int | None:
        """The health status of the whole server, or None when it does not answer."""
        try:
            with self.channel() as ch:
                resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
                return resp.status
        except grpc.RpcError:
            return None

    def channel(self) -> grpc.Channel:
        if self.tls_ca:
            with open(self.tls_ca, "rb") as f:
                ca = f.read()
            key = chain = None
            if self.tls_client:
                chain = open(self.tls_client[0], "rb").read()
                key = open(self.tls_client[1], "rb").read()
            return grpc.secure_channel(self.address, grpc.ssl_channel_credentials(ca, key, chain))
        return grpc.insecure_channel(self.address)

    def wait_serving(self, timeout: float = 30.0) -> None:
        def serving():
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            return self.health() == health_pb2.HealthCheckResponse.SERVING

        wait_until(serving, timeout, what=f"{self.name} to serve")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, timeout: float = 30.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def log(self) -> str:
        """The log's last 20,000 characters (for a failure's message)."""
        return self.whole_log()[-20000:]

    def whole_log(self) -> str:
        """All of the log, over every restart (for a search that must not miss an early line)."""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None
