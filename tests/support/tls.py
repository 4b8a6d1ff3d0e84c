"""A throw-away CA with server and client certificates (openssl), for TLS tests."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass


@dataclass
class Certs:
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    other_ca: str


def _run(*args: str, cwd: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(directory: str) -> Certs:
    os.makedirs(directory, exist_ok=True)
    d = directory
    for ca in ("ca", "other-ca"):
        _run(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            f"/CN=msgstore test {ca}",
            "-keyout",
            f"{ca}.key",
            "-out",
            f"{ca}.pem",
            cwd=d,
        )
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
    for who in ("server", "client"):
        _run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}", "-keyout", f"{who}.key", "-out", f"{who}.csr", cwd=d)
        _run(
            "x509",
            "-req",
            "-in",
            f"{who}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            f"{who}.pem",
            cwd=d,
        )
    j = lambda n: os.path.join(d, n)  # noqa: E731
    return Certs(j("ca.pem"), j("server.pem"), j("server.key"), j("client.pem"), j("client.key"), j("other-ca.pem"))
