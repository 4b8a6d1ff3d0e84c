"""What checking callers costs (issue 32): batched and single sends against a store that checks
nothing, one that checks every call against its users (the client signing as a user allowed to
publish), and one that also speaks TLS, alternately in one run so all three see the same machine.

Three nodes started the same way but for those flags; the same client work on each (batched:
500 x 1 KiB per request, three streams; single: one message per send). Goal: users and TLS
≥ 0.8x of nothing, batched.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from msgstore.client import Client
from tests.support.servers import ServerProcess
from tests.support.tls import make_certs

from .bench_access import batched, singles
from .common import REPEAT, Measure

ADMIN = "bench-admin-token"
USER = ("bench-producer", "bench-producer-secret")


def _node(workdir: str, name: str, args: list[str], settings: list[str]) -> ServerProcess:
    root = tempfile.mkdtemp(dir=workdir)
    node = ServerProcess(os.path.join(root, "data"), name=name, args=args)
    node.settings = settings  # the store's defaults otherwise, not the test harness's small files
    return node


def run(workdir: str) -> list[Measure]:
    certs = make_certs(os.path.join(workdir, "certs"))
    with open(os.path.join(workdir, "admin"), "w") as f:
        f.write(ADMIN)
    admin = ["--admin-token-file", os.path.join(workdir, "admin")]
    tls = ["--tls-cert", certs.server_cert, "--tls-key", certs.server_key]
    nodes = {
        "open": _node(workdir, "open", [], []),
        "users": _node(workdir, "users", admin, ["authorizationEnabled=true"]),
        "users+tls": _node(workdir, "users-tls", admin + tls, ["authorizationEnabled=true"]),
    }
    nodes["users+tls"].tls_ca = certs.ca
    for n in nodes.values():
        n.start(wait=False)
    for n in nodes.values():
        n.wait_serving()
    rates: dict[str, list[float]] = {f"{kind}-{name}": [] for kind in ("batched", "single") for name in nodes}
    clients: dict[str, Client] = {}
    try:
        for name, n in nodes.items():
            tls_ca = certs.ca if name == "users+tls" else None
            with Client(n.address, admin_token=ADMIN, tls_ca=tls_ca, timeout=60) as c:
                c.create_topic("auth", 8)
                if name != "open":
                    c.put_user(*USER, entries=[{"resource": "topic:auth", "actions": ["pub"]}])
            creds = {} if name == "open" else {"access_key": USER[0], "secret_key": USER[1]}
            clients[name] = Client(n.address, tls_ca=tls_ca, timeout=60, **creds)
        order = list(nodes)
        for r in range(REPEAT):
            for name in order if r % 2 == 0 else order[::-1]:
                rates[f"batched-{name}"].append(batched(clients[name], "auth", name.replace("+", "-")))
                rates[f"single-{name}"].append(singles(clients[name], "auth", name.replace("+", "-")))
    finally:
        for c in clients.values():
            c.close()
        for n in nodes.values():
            n.terminate()
            shutil.rmtree(os.path.dirname(n.data_dir), ignore_errors=True)
    out = []
    for kind, what in (("batched", "batched send (500 x 1 KiB, 3 streams)"), ("single", "single sends (1 KiB, one at a time)")):
        base = rates[f"{kind}-open"]
        out.append(Measure(f"{what}, no checks", "msg/s", base))
        for name in ("users", "users+tls"):
            out.append(Measure(f"{what}, {name}", "msg/s", rates[f"{kind}-{name}"]))
            ratio = [x / b for x, b in zip(rates[f"{kind}-{name}"], base)]
            out.append(Measure(f"{name} / no checks, {kind}", "ratio", ratio, "goal ≥ 0.8" if kind == "batched" else ""))
    return out
