"""The committed stubs must be what `make proto` generates from proto/ today."""

import filecmp
import os

from msgstore.api import protogen


def test_generated_stubs_are_current(tmp_path):
    names = protogen.generate(str(tmp_path))
    committed = os.path.join(protogen.ROOT, "server", "msgstore", "v1")
    stale = [n for n in names if not filecmp.cmp(os.path.join(tmp_path, "msgstore", "v1", n), os.path.join(committed, n), shallow=False)]
    assert not stale, f"stubs are stale, run `make proto`: {stale}"
    assert {"msgstore_pb2.py", "msgstore_pb2_grpc.py", "admin_pb2.py", "admin_pb2_grpc.py"} <= set(names)
