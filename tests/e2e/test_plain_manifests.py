"""The README's way without Helm: ``kubectl apply -f deploy/crds/ -f deploy/operator.yaml``,
then a store from ``deploy/samples/`` and the ``msgstore`` CLI against it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from .conftest import ROOT, K8s, namespace
from .test_chart import SMALL

pytestmark = pytest.mark.e2e
OPERATOR_NS = "msgstore-system"


def test_kubectl_apply_of_deploy_runs_the_operator_and_a_store(k8s: K8s):
    crds, operator = os.path.join(ROOT, "deploy", "crds"), os.path.join(ROOT, "deploy", "operator.yaml")
    k8s.kubectl("apply", "-f", crds, "-f", operator)
    try:
        k8s.wait(
            lambda: (
                (k8s.get(f"/apis/apps/v1/namespaces/{OPERATOR_NS}/deployments/msgstore-operator") or {})
                .get("status", {})
                .get("readyReplicas")
                == 1
            ),
            60,
            "the operator Deployment ready",
        )
        ns = namespace(k8s, "plain")
        with open(os.path.join(ROOT, "deploy", "samples", "minimal.yaml")) as f:
            doc = yaml.safe_load(f)
        doc["spec"]["store"] = dict(SMALL)
        k8s.apply(doc, namespace=ns)
        name = doc["metadata"]["name"]
        k8s.wait(lambda: k8s.ready(ns, name), 120, "the sample store Ready")
        server = ["--server", k8s.address(ns, f"{name}-0")]
        cli = [sys.executable, "-m", "msgstore.cli"]
        sent = subprocess.run(
            [*cli, "send", "demo", "hello from kubectl apply", "--key", "k1", *server], capture_output=True, text=True, timeout=60
        )
        assert sent.returncode == 0 and "PUT_OK" in sent.stdout, sent.stdout + sent.stderr
        pulled = subprocess.run([*cli, "--json", "pull", "demo", *server], capture_output=True, text=True, timeout=60)
        assert pulled.returncode == 0 and "hello from kubectl apply" in pulled.stdout, pulled.stdout + pulled.stderr
        k8s.kubectl("delete", "mstore", name, "-n", ns, "--wait=true")
    finally:
        k8s.kubectl("delete", "-f", operator, "--wait=true", "--timeout=120s", check=False)
    assert k8s.get(f"/api/v1/namespaces/{OPERATOR_NS}") is None
