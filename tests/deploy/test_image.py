"""The real image, built without a Docker engine (``make image``: podman with runc) and run the
way the pods run it: as uid 10001, read-only root filesystem, a writable data volume."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import grpc
import pytest
import yaml
from rocketmq.grpc_protocol import Code, MessagingServiceStub, QueryRouteRequest, Resource

from msgstore.client import Client, OutMessage
from tests.support.servers import free_port, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TAG = "localhost/msgstore:test"
RUN = ["--runtime", "runc", "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=1000:1000", "--network", "host"]
UID = 10001


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    out = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out


def _why_not() -> str | None:
    if shutil.which("podman") is None:
        return "podman is not installed (make test installs it from Debian's packages when run as root)"
    if shutil.which("runc") is None:
        return "runc is not installed"
    probe = subprocess.run(["podman", "run", "--rm", *RUN, "--help"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"podman cannot run here: {probe.stderr.strip()[:200]}"
    return None


@pytest.fixture(scope="module")
def image():
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    env = dict(os.environ, IMAGE=TAG, PYTHON=sys.executable, ENGINE="podman")
    out = subprocess.run([os.path.join(ROOT, "scripts", "build_image.sh")], capture_output=True, text=True, env=env, timeout=1200, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    yield TAG
    podman("rmi", "-f", TAG, check=False)


def test_image_serves_as_uid_10001_with_a_read_only_root_and_stops_cleanly(image, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    os.chown(data, UID, UID)
    port, metrics = free_port(), free_port()
    name = f"msgstore-image-{port}"
    podman(
        "run",
        "-d",
        "--name",
        name,
        *RUN,
        "--read-only",
        "--user",
        f"{UID}:{UID}",
        "-v",
        f"{data}:/var/lib/msgstore",
        image,
        "msgstore",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--metrics-port",
        str(metrics),
        "--data-dir",
        "/var/lib/msgstore",
        "--set",
        "mappedFileSizeCommitLog=1048576",
        "--set",
        "maxIndexNum=4096",
        "--set",
        "maxHashSlotNum=1024",
    )
    try:
        with Client(f"127.0.0.1:{port}", timeout=5) as c:

            def serving():
                try:
                    return c.route("", refresh=True).nodes[0].ready
                except Exception:
                    return False

            wait_until(serving, 60, what=f"the store in the container to serve:\n{podman('logs', name, check=False).stdout}")
            sent = c.send_batch("image", [OutMessage(b"from the image", key="k1")])[0]
            assert sent.ok, sent
            q = next(q for q in c.route("image").queues if q.queue_id == sent.queue_id)
            got = c.pull("image", q, sent.queue_offset, max_messages=1, timeout_ms=3000)
            assert got.messages[0].body == b"from the image"
        # RocketMQ 5's protocol too (its generated modules loaded in the read-only image)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            route = MessagingServiceStub(channel).QueryRoute(QueryRouteRequest(topic=Resource(name="image")), timeout=10)
            assert route.status.code == Code.OK and route.message_queues, route
        assert podman("exec", name, "id", "-u").stdout.strip() == str(UID)
        # the web console from the same image, as the chart runs it (its templates and scripts are in the wheel)
        web = free_port()
        podman(
            "run",
            "-d",
            "--name",
            f"{name}-console",
            *RUN,
            "--read-only",
            "--tmpfs",
            "/tmp",
            "--user",
            f"{UID}:{UID}",
            image,
            "msgstore",
            "console",
            "--host",
            "127.0.0.1",
            "--port",
            str(web),
            "--server",
            f"127.0.0.1:{port}",
        )
        try:
            page = wait_until(
                lambda: _get(f"http://127.0.0.1:{web}/"), 60, what=lambda: podman("logs", f"{name}-console", check=False).stdout
            )
            assert "Healthy" in page  # the cluster page, anonymously: this store checks no callers
            assert "uPlot" in _get(f"http://127.0.0.1:{web}/static/uPlot.iife.min.js")
        finally:
            podman("rm", "-f", f"{name}-console", check=False)
        write = podman("exec", name, "touch", "/opt/msgstore/x", check=False)
        assert write.returncode != 0 and "Read-only file system" in write.stderr
        assert all(os.stat(os.path.join(data, n)).st_uid == UID for n in os.listdir(data))
    finally:
        stopped = podman("stop", "-t", "30", name, check=False)
    assert stopped.returncode == 0, stopped.stderr
    assert podman("inspect", "-f", "{{.State.ExitCode}}", name).stdout.strip() == "0"  # SIGTERM is a clean shutdown
    assert "abort" not in os.listdir(data)
    podman("rm", name, check=False)


def _get(url: str) -> str:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode()
    except OSError:
        return ""


def test_operator_entry_point_is_in_the_image(image):
    out = podman("run", "--rm", *RUN, "--read-only", image, "msgstore-operator", "--version")
    assert out.stdout.strip() == "msgstore-operator 0.1.0"
    config = yaml.safe_load(podman("image", "inspect", image).stdout)[0]["Config"]
    assert config["User"] == f"{UID}:{UID}" and config["Cmd"][:2] == ["msgstore", "serve"]


def test_kind_script_builds_loads_and_installs_the_same_image(image):
    """``deploy/kind/up.sh`` builds with the same script as ``make image`` (docker there), loads
    that tag into kind and points the chart at exactly it."""
    with open(os.path.join(ROOT, "deploy", "kind", "up.sh")) as f:
        up = f.read()
    assert re.search(r'ENGINE=docker IMAGE="\$IMAGE" .*scripts/build_image.sh', up), up
    assert 'kind load docker-image "$IMAGE"' in up
    sets = dict(re.findall(r'--set (image\.\w+)="?([^" \\]*)"?', up))
    image_ref = "msgstore:dev"  # what the script builds by default
    values = {
        k: v.replace("${IMAGE%:*}", image_ref.split(":")[0]).replace("${IMAGE##*:}", image_ref.split(":")[1]) for k, v in sets.items()
    }
    rendered = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "helm"),
            "template",
            "r",
            os.path.join(ROOT, "charts", "msgstore"),
            *[a for k, v in values.items() for a in ("--set", f"{k}={v}")],
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    (dep,) = [d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "Deployment"]
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == image_ref
    # and what podman tagged is that same repository and tag (under podman's localhost/ prefix)
    assert image.rsplit("/", 1)[1].split(":")[0] == image_ref.split(":")[0]
