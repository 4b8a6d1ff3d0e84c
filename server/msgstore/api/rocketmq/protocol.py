"""The generated ``apache.rocketmq.v2`` modules, from the official Python client's package.

We depend on ``rocketmq-python-client`` (pinned) for them rather than generating our own: a
second copy of the same ``.proto`` files in one process (a test importing the client and our
server) would collide in protobuf's descriptor pool. But importing ``rocketmq`` runs its
``__init__``, which imports the whole client (OpenTelemetry included), creates
``~/logs/rocketmq_python`` and replaces the process's logging handlers: a server must not.
So the three generated files are loaded on their own, under the names the client's package
gives them; a later ``import rocketmq`` (a test process) finds them already loaded and shares
their descriptors.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import Any

_PACKAGE = "rocketmq.grpc_protocol"
_MODULES = ("definition_pb2", "service_pb2", "service_pb2_grpc")


def _load() -> dict[str, Any]:
    if all(f"{_PACKAGE}.{m}" in sys.modules for m in _MODULES):
        return {m: sys.modules[f"{_PACKAGE}.{m}"] for m in _MODULES}
    spec = importlib.util.find_spec("rocketmq")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the apache.rocketmq.v2 protocol needs the rocketmq-python-client package (pip install msgstore)")
    root = list(spec.submodule_search_locations)[0]
    # Stand-ins for the two packages while their files load, so the generated files' own
    # ``from rocketmq.grpc_protocol import definition_pb2`` resolves without the real __init__s.
    stand_ins = {}
    for name, path in (("rocketmq", root), (_PACKAGE, f"{root}/grpc_protocol")):
        if name not in sys.modules:
            pkg = types.ModuleType(name)
            pkg.__path__ = [path]
            sys.modules[name] = stand_ins[name] = pkg
    try:
        loaded = {}
        for m in _MODULES:
            full = f"{_PACKAGE}.{m}"
            if full not in sys.modules:
                mod_spec = importlib.util.spec_from_file_location(full, f"{root}/grpc_protocol/{m}.py")
                assert mod_spec is not None and mod_spec.loader is not None
                module = importlib.util.module_from_spec(mod_spec)
                sys.modules[full] = module
                mod_spec.loader.exec_module(module)
            loaded[m] = sys.modules[full]
        return loaded
    finally:
        for name, pkg in stand_ins.items():  # the real packages load normally if ever imported
            if sys.modules.get(name) is pkg:
                del sys.modules[name]


_loaded = _load()
definition: Any = _loaded["definition_pb2"]
service: Any = _loaded["service_pb2"]
service_grpc: Any = _loaded["service_pb2_grpc"]
SERVICE = service.DESCRIPTOR.services_by_name["MessagingService"]
Code: Any = definition.Code
