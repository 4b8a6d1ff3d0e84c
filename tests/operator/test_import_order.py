"""gRPC reads GRPC_ENABLE_FORK_SUPPORT when it is first imported; msgstore's package sets it
(msgstore/__init__.py says why). Two operator modules imported grpc before anything of
msgstore's, so in the operator's process gRPC came up with fork support on."""

import subprocess
import sys

import pytest

# reports the variable as gRPC's first import sees it, in a fresh interpreter
PROBE = """
import os, sys

class AtGrpc:
    def find_spec(self, name, path=None, target=None):
        if name == "grpc":
            print("at grpc:", os.environ.get("GRPC_ENABLE_FORK_SUPPORT"))
            sys.meta_path.remove(self)
        return None

sys.meta_path.insert(0, AtGrpc())
import {module}
"""


@pytest.mark.parametrize("module", ["msgstore_operator.pods", "msgstore_operator.topics", "msgstore_operator.handlers"])
def test_grpc_is_first_imported_with_fork_support_off(module):
    env = {"PATH": "/usr/bin:/bin"}  # (no GRPC_ENABLE_FORK_SUPPORT of the caller's)
    out = subprocess.run([sys.executable, "-c", PROBE.format(module=module)], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "at grpc: false" in out.stdout, out.stdout
