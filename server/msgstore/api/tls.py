"""The server's TLS certificate, followed as its files change: a renewed certificate (a
Kubernetes Secret the kubelet rewrites, cert-manager's renewal, a cron job's) is used for every
handshake after it lands, without a restart; connections already open keep theirs.

gRPC asks for the certificate at each handshake (dynamic server credentials); the files are
looked at no more than once a second, and a new pair is taken only once the key matches the
certificate (the two files of a renewal may land one after the other: until both have, the
previous pair is kept)."""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time

import grpc

log = logging.getLogger(__name__)
RECHECK_S = 1.0


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def pair_error(cert: str, key: str) -> str | None:
    """Why ``cert`` and ``key`` are not a usable pair (as TLS would load them), or None."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as e:
        return str(e)
    return None


class ServerCertificates:
    def __init__(self, cert: str, key: str, client_ca: str | None = None):
        self.cert, self.key, self.client_ca = cert, key, client_ca
        self._lock = threading.Lock()
        self._checked = 0.0
        self._stamp = self._stat()

    def _stat(self) -> tuple:
        out = []
        for path in (self.cert, self.key, self.client_ca):
            try:
                st = os.stat(path) if path else None
            except OSError:
                st = None
            out.append(None if st is None else (st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(out)

    def _config(self) -> grpc.ServerCertificateConfiguration:
        ca = _read(self.client_ca) if self.client_ca else None
        return grpc.ssl_server_certificate_configuration([(_read(self.key), _read(self.cert))], root_certificates=ca)

    def credentials(self) -> grpc.ServerCredentials:
        error = pair_error(self.cert, self.key)
        if error:
            raise ValueError(f"--tls-cert {self.cert} and --tls-key {self.key} are not a usable pair: {error}")
        return grpc.dynamic_ssl_server_credentials(self._config(), self._fetch, require_client_authentication=self.client_ca is not None)

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """Called by gRPC at each handshake: a new configuration, or None to keep the current."""
        if time.monotonic() - self._checked < RECHECK_S:
            return None
        with self._lock:
            self._checked = time.monotonic()
            stamp = self._stat()
            if stamp == self._stamp:
                return None
            error = pair_error(self.cert, self.key)
            if error:  # mid-renewal (one file written, not yet the other): keep the previous pair
                log.warning("TLS certificate %s changed but is not usable yet (%s): keeping the previous one", self.cert, error)
                return None
            try:
                config = self._config()
            except OSError as e:
                log.warning("TLS files unreadable (%s): keeping the previous certificate", e)
                return None
            self._stamp = stamp
            log.info("TLS certificate %s changed: new connections use the new one", self.cert)
            return config
