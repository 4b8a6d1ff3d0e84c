"""A plain TCP forwarder on 127.0.0.1, standing for what users put in front of a store (a
Service, ``kubectl port-forward``, a load balancer): it knows nothing of gRPC. Its backend is
one address (``point_at`` moves new connections elsewhere), or a function giving the current
ones (a Service's endpoints): new connections go round them, past one that refuses."""

from __future__ import annotations

import itertools
import socket
import threading
from collections.abc import Callable

CONNECT_TIMEOUT_S = 2.0  # a backend that does not answer by then is passed over (as kube-proxy's next endpoint)


class TcpForwarder:
    def __init__(self, backend: str | Callable[[], list[str]]):
        self.backend = backend
        self._turn = itertools.count()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = 0
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="tcp-forwarder").start()

    def point_at(self, backend: str) -> None:
        self.backend = backend

    def _connect(self) -> socket.socket | None:
        backends = [self.backend] if isinstance(self.backend, str) else list(self.backend())
        start = next(self._turn)
        for i in range(len(backends)):
            host, _, port = backends[(start + i) % len(backends)].rpartition(":")
            try:
                return socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)
            except OSError:
                continue
        return None

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            # (each connection dials its backend on its own thread: one backend that does not
            # answer must not hold the connections behind it)
            threading.Thread(target=self._join, args=(client,), daemon=True).start()

    def _join(self, client: socket.socket) -> None:
        upstream = self._connect()
        if upstream is None:
            client.close()  # (no backend answers: refused, as a Service without endpoints)
            return
        upstream.settimeout(None)
        with self._lock:
            self.connections += 1
            self._open += [client, upstream]
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        with self._lock:
            for s in self._open:
                try:
                    s.close()
                except OSError:
                    pass
