"""Regenerate the Python stubs from ``proto/`` (``make proto``).

The stubs are committed under ``server/msgstore/v1``; a test regenerates them into a
temporary directory and fails when the committed ones are stale.
"""

from __future__ import annotations

import glob
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PROTO_DIR = os.path.join(ROOT, "proto")


def generate(out_dir: str) -> list[str]:
    from grpc_tools import protoc

    protos = sorted(glob.glob(os.path.join(PROTO_DIR, "msgstore", "v1", "*.proto")))
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    args = [
        "protoc",
        f"-I{PROTO_DIR}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--pyi_out={out_dir}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed")
    pkg = os.path.join(out_dir, "msgstore", "v1")
    init = os.path.join(pkg, "__init__.py")
    if not os.path.exists(init):
        with open(init, "w") as f:
            f.write('"""Generated gRPC stubs for msgstore.v1 (make proto); do not edit."""\n')
    return sorted(os.path.relpath(p, pkg) for p in glob.glob(os.path.join(pkg, "*")) if not p.endswith("__pycache__"))


if __name__ == "__main__":
    print("\n".join(generate(os.path.join(ROOT, "server"))))
    sys.exit(0)
