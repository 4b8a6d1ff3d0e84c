"""The package keeps its shape: which part may import which, and no import circles.

Dependencies flow one way: ``record`` (the record format) ← ``store`` (the engine) ← ``api``
(the gRPC server); ``wire`` (the Send transcoders) and ``client`` sit beside the store, never
importing it or the server. Imports are read from the source (``ast``), so a module that would
only be imported later, or under ``TYPE_CHECKING``, counts too.
"""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "server")
PACKAGE = "msgstore"


def modules() -> dict[str, str]:
    out = {}
    for dirpath, _dirs, files in os.walk(os.path.join(ROOT, PACKAGE)):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                out[name.removesuffix(".__init__")] = path
    return out


def imports(name: str, path: str, known: dict[str, str]) -> set[str]:
    """Modules of the package that ``name`` imports (its package ``__init__`` included when a
    module imports from the package itself)."""
    tree = ast.parse(open(path).read(), path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.add(target if target in known else base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m in known and m != name}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def cycles(graph: dict[str, set[str]], within: str) -> list[list[str]]:
    """Strongly connected components of more than one module among those under ``within``."""
    nodes = [n for n in graph if n == within or n.startswith(within + ".")]
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in nodes:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for n in nodes:
        if n not in index:
            visit(n)
    return out


@pytest.mark.parametrize(
    "package",
    ["msgstore"],
)
def test_no_import_cycle(graph, package):
    """None anywhere, the server included: the protocol adapters use the member's runtime
    (api/member.py) and only server.py wires them (issue 31 undid a circle of eleven files)."""
    assert cycles(graph, package) == []


ADAPTERS = (
    "msgstore.api.servicer",
    "msgstore.api.admin",
    "msgstore.api.ha_service",
    "msgstore.api.pop_service",
    "msgstore.api.transaction_service",
    "msgstore.api.group_service",
    "msgstore.api.scheduled",
    "msgstore.api.rocketmq",
)


def test_the_runtime_knows_no_adapter_and_no_adapter_knows_the_server(graph):
    below = [n for n in graph if n in ("msgstore.api.member", "msgstore.api.relay", "msgstore.api.check_listeners")]
    assert below and {(n, d) for n in below for d in graph[n] if d.startswith(ADAPTERS) or d == "msgstore.api.server"} == set()
    adapters = [n for n in graph if n.startswith(ADAPTERS)]
    assert {(n, d) for n in adapters for d in graph[n] if d == "msgstore.api.server"} == set()


FORBIDDEN = {
    "msgstore.record": ("msgstore.store", "msgstore.api", "msgstore.client", "msgstore.wire", "msgstore.pipeline", "msgstore.v1"),
    "msgstore.store": (
        "msgstore.api",
        "msgstore.client",
        "msgstore.wire",
        "msgstore.pipeline",
        "msgstore.v1",
        "msgstore.cli",
        "msgstore.ha",
        "msgstore.broker",
    ),
    "msgstore.wire": ("msgstore.store", "msgstore.api", "msgstore.client", "msgstore.pipeline"),
    "msgstore.client": ("msgstore.store", "msgstore.api", "msgstore.pipeline", "msgstore.cli"),
    # replication sits between the engine and the server: it drives the store, the API drives it
    "msgstore.ha": ("msgstore.api", "msgstore.client", "msgstore.pipeline", "msgstore.cli", "msgstore.broker"),
    # message semantics over the store (delays, ...): below the API, never a gRPC concern
    "msgstore.broker": ("msgstore.api", "msgstore.client", "msgstore.pipeline", "msgstore.cli", "msgstore.v1", "msgstore.wire"),
}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_dependencies_flow_one_way(graph, package):
    wrong = {
        (name, dep)
        for name, deps in graph.items()
        if name == package or name.startswith(package + ".")
        for dep in deps
        if any(dep == f or dep.startswith(f + ".") for f in FORBIDDEN[package])
    }
    assert wrong == set()


def test_the_store_knows_no_grpc():
    """store/, record/ and broker/ never import grpc or protobuf (they run without a server)."""
    offenders = []
    for name, path in modules().items():
        if not name.startswith(("msgstore.store", "msgstore.record", "msgstore.broker")):
            continue
        tree = ast.parse(open(path).read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [node.module or ""]
            else:
                continue
            offenders += [(name, m) for m in mods if m.split(".")[0] in ("grpc", "google")]
    assert offenders == []
