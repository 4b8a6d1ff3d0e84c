"""The chart, deploy/ and the operator's output against Kubernetes' own schemas and a real helm.

Built-in kinds validate with ``kubernetes-validate --strict`` for the oldest (1.30) and newest
supported Kubernetes; MessageStore objects validate against our CRD's OpenAPI schema and are
then parsed by the operator, which enforces what the schema cannot (ratio ordering)."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from msgstore_operator import kube, render
from msgstore_operator import spec as specmod

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHART = os.path.join(ROOT, "charts", "msgstore")
CRD_FILE = os.path.join(CHART, "crds", "messagestores.msgstore.io.yaml")
HELM = os.path.join(os.path.dirname(sys.executable), "helm")
K8S_VERSIONS = ("1.30.0", "1.37.0")
SAMPLE_VALUES = [
    "--set",
    "store.enabled=true",
    "--set",
    "store.replicas=3",
    "--set",
    "store.adminTokenSecret.name=orders-admin",
    "--set",
    "store.persistence.storageClass=fast",
    "--set",
    "store.extraConfig.defaultTopicQueueNums=16",
]
REPLICATED_VALUES = [*SAMPLE_VALUES, "--set", "store.replication.replicas=3", "--set", "store.replication.mode=ASYNC"]
TLS_VALUES = [*SAMPLE_VALUES, "--set", "store.tls.enabled=true", "--set", "store.tls.clientAuthentication=Required"]
VARIANTS = {
    "default": [],
    "sample-store": SAMPLE_VALUES,
    "replicated-store": REPLICATED_VALUES,
    "tls-store": TLS_VALUES,
    "namespace-scope": ["--set", "operator.scope=namespace"],
}


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    assert os.path.exists(HELM), "helm is installed into the virtualenv by `make install`"
    return subprocess.run([HELM, *args], capture_output=True, text=True, check=check)


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def crd_schema() -> dict[str, Any]:
    """The CRD's structural schema as plain JSON Schema (x-kubernetes-* extensions dropped)."""

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    with open(CRD_FILE) as f:
        crd = yaml.safe_load(f)
    (version,) = crd["spec"]["versions"]
    return strip(version["schema"]["openAPIV3Schema"])


def validate(doc: dict[str, Any]) -> None:
    if doc["kind"] == "MessageStore":
        jsonschema.validate(doc, crd_schema())
        specmod.parse(doc)
        return
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_helm_lint_passes(variant):
    out = helm("lint", "--strict", CHART, *VARIANTS[variant], check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 chart(s) failed" in out.stdout


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_helm_template_validates_against_kubernetes_schemas(variant):
    rendered = docs(helm("template", "r1", CHART, "--namespace", "team-a", "--include-crds", *VARIANTS[variant]).stdout)
    kinds = sorted(d["kind"] for d in rendered)
    for doc in rendered:
        validate(doc)
    expected = {"CustomResourceDefinition", "ServiceAccount", "Deployment"}
    expected |= {"Role", "RoleBinding"} if variant == "namespace-scope" else {"ClusterRole", "ClusterRoleBinding"}
    if variant in ("sample-store", "replicated-store", "tls-store"):
        expected |= {"MessageStore", "Pod"}
    assert set(kinds) == expected, kinds


def test_a_replicated_sample_store_renders_groups_and_their_roles():
    (store,) = [d for d in docs(helm("template", "r1", CHART, *REPLICATED_VALUES).stdout) if d["kind"] == "MessageStore"]
    assert store["spec"]["replication"] == {"replicas": 3, "mode": "ASYNC"}
    spec = specmod.parse({**store, "metadata": {**store["metadata"], "uid": "u"}})
    n = spec.name
    assert spec.pods == 9 and list(spec.groups()) == [f"{n}-g0", f"{n}-g1", f"{n}-g2"]
    objs = {o["kind"] + "/" + o["metadata"]["name"]: o for o in render.all_objects(spec)}
    roles = json.loads(objs[f"ConfigMap/{n}-roles"]["data"]["roles.json"])
    assert roles["groups"][f"{n}-g1"] == {
        "members": [f"{n}-3", f"{n}-4", f"{n}-5"],
        "master": f"{n}-3",
        "address": "",
        "epoch": 1,
        "mode": "ASYNC",
        "lease": f"default/{n}-g1",
    }
    sts = objs[f"StatefulSet/{n}"]
    assert sts["spec"]["replicas"] == 9 and "--roles-file" in sts["spec"]["template"]["spec"]["containers"][0]["args"]
    pod = sts["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == f"{n}-store" and pod["automountServiceAccountToken"] is True
    # the pods may read and renew their groups' Leases, and nothing else
    assert objs[f"Role/{n}-store"]["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [f"{n}-g0", f"{n}-g1", f"{n}-g2"],
            "verbs": ["get", "update"],
        }
    ]
    assert objs[f"RoleBinding/{n}-store"]["subjects"] == [{"kind": "ServiceAccount", "name": f"{n}-store", "namespace": "default"}]
    for obj in objs.values():
        validate(obj)
    lease = render.lease(spec, f"{n}-g0", f"{n}-0", 1, "2026-11-25T00:00:00.000000Z")
    validate(lease)


def test_operator_deployment_runs_one_non_root_replica_with_liveness():
    (dep,) = [d for d in docs(helm("template", "r1", CHART).stdout) if d["kind"] == "Deployment"]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] == render.UID
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert "WATCH_NAMESPACE" not in env  # every namespace by default (a store applied anywhere is seen)
    assert env["MSGSTORE_IMAGE"] == c["image"] == "ghcr.io/msgstore/msgstore:0.1.0"
    (dep,) = [d for d in docs(helm("template", "r1", CHART, *VARIANTS["namespace-scope"]).stdout) if d["kind"] == "Deployment"]
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["WATCH_NAMESPACE"] == "default"


def test_helm_test_hook_sends_and_reads_a_message_from_the_sample_store():
    rendered = docs(helm("template", "r1", CHART, *SAMPLE_VALUES).stdout)
    (store,) = [d for d in rendered if d["kind"] == "MessageStore"]
    (pod,) = [d for d in rendered if d["kind"] == "Pod"]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (c,) = pod["spec"]["containers"]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["MSGSTORE_SERVER"] == f"{store['metadata']['name']}.default.svc:{store['spec']['port']}"
    script = c["args"][0]
    assert "msgstore send helm-test" in script and "msgstore query helm-test --key" in script
    # the address the test dials is the store's client Service the operator renders
    assert render.client_service(specmod.parse(store))["metadata"]["name"] == store["metadata"]["name"]
    assert specmod.parse(store).admin_secret == {"name": "orders-admin"}


def test_client_access_defaults_to_the_access_point_and_the_service_type_is_a_value():
    """Issue 31: the chart's store is reached through its client Service (routes name the address
    a client used); Direct keeps the pods' own addresses; the Service's type and annotations are values."""
    (store,) = [d for d in docs(helm("template", "r1", CHART, *SAMPLE_VALUES).stdout) if d["kind"] == "MessageStore"]
    assert store["spec"]["access"] == {"mode": "AccessPoint", "serviceType": "ClusterIP", "serviceAnnotations": {}}
    spec = specmod.parse({**store, "metadata": {**store["metadata"], "uid": "u"}})
    assert "--access-point" in render.container_args(spec)
    assert render.client_service(spec)["spec"]["type"] == "ClusterIP"
    lb = [*SAMPLE_VALUES, "--set", "store.access.mode=Direct", "--set", "store.access.serviceType=LoadBalancer"]
    lb += ["--set-string", "store.access.serviceAnnotations.service\\.beta\\.kubernetes\\.io/aws-load-balancer-internal=true"]
    (store,) = [d for d in docs(helm("template", "r1", CHART, *lb).stdout) if d["kind"] == "MessageStore"]
    spec = specmod.parse({**store, "metadata": {**store["metadata"], "uid": "u"}})
    assert "--access-point" not in render.container_args(spec)
    svc = render.client_service(spec)
    assert svc["spec"]["type"] == "LoadBalancer"
    assert svc["metadata"]["annotations"] == {
        "service.beta.kubernetes.io/aws-load-balancer-internal": "true",
        # (which of them the operator removes once they leave the values)
        "msgstore.io/service-annotations": "service.beta.kubernetes.io/aws-load-balancer-internal",
    }
    validate(svc)
    with pytest.raises(specmod.SpecError, match="spec.access.mode"):
        specmod.parse({**store, "spec": {**store["spec"], "access": {"mode": "Sideways"}}})


@pytest.mark.parametrize(
    "values, field",
    [
        (["--set", "store.config.diskMaxUsedSpaceRatio=99"], "diskMaxUsedSpaceRatio"),
        (["--set", "store.config.flushDiskType=SOMETIMES"], "flushDiskType"),
        (["--set", "store.config.deleteWhen=25"], "deleteWhen"),
        (["--set", "operator.scope=everywhere"], "scope"),
        (["--set", "image.pullPolicy=Sometimes"], "pullPolicy"),
        (["--set", "store.persistence.size=lots"], "size"),
        (["--set", "store.replicaz=3"], "replicaz"),
        (["--set", "store.replication.mode=SOMETIMES"], "mode"),
        (["--set", "store.replication.replicas=0"], "replicas"),
        (["--set", "store.access.mode=Sideways"], "mode"),
        (["--set", "store.access.serviceType=Ingress"], "serviceType"),
    ],
)
def test_values_schema_rejects_bad_values_naming_the_field(values, field):
    out = helm("template", "r1", CHART, *values, check=False)
    assert out.returncode != 0
    assert field in out.stderr, out.stderr


def test_rbac_grants_exactly_what_the_operator_calls():
    wanted = set(kube.VERBS | kube.KOPF_VERBS | kube.ADMISSION_VERBS)
    for variant, kind in (("default", "ClusterRole"), ("namespace-scope", "Role")):
        (role,) = [d for d in docs(helm("template", "r1", CHART, *VARIANTS[variant]).stdout) if d["kind"] == kind]
        granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
        assert granted == wanted, granted ^ wanted
        assert all("*" not in v for _, _, v in granted)


def test_deploy_directory_is_rendered_from_the_chart():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "render_deploy.py"), "--check"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    with open(os.path.join(ROOT, "deploy", "operator.yaml")) as f:
        for doc in docs(f.read()):
            validate(doc)
    with open(os.path.join(ROOT, "deploy", "crds", "messagestores.msgstore.io.yaml")) as f:
        validate(yaml.safe_load(f))


SAMPLES = sorted(os.listdir(os.path.join(ROOT, "deploy", "samples")))


@pytest.mark.parametrize("sample", SAMPLES)
def test_samples_validate_and_the_operator_output_for_them_validates(sample):
    with open(os.path.join(ROOT, "deploy", "samples", sample)) as f:
        body = yaml.safe_load(f)
    body["metadata"].update(namespace="team-a", uid="0b7a3f5e-1111-2222-3333-444455556666")
    validate(body)
    spec = specmod.parse(body)
    for obj in render.all_objects(spec):
        validate(obj)
    # and a rolling step / scale-down step renders valid objects too
    validate(render.stateful_set(spec, replicas=max(1, spec.replicas - 1), nonce="r-1"))


@pytest.mark.parametrize(
    "change, message",
    [
        ({"replicas": 0}, "replicas"),
        ({"store": {"diskMaxUsedSpaceRatio": 96}}, "diskMaxUsedSpaceRatio"),
        ({"store": {"flushDiskType": "LATER"}}, "flushDiskType"),
        ({"store": {"deleteWhen": "4;24"}}, "deleteWhen"),
        ({"storage": {"size": "ten"}}, "size"),
        ({"imagePullPolicy": "Sometimes"}, "imagePullPolicy"),
        ({"replication": {"replicas": 0}}, "replicas"),
        ({"replication": {"mode": "EVENTUALLY"}}, "mode"),
        ({"access": {"mode": "Sideways"}}, "mode"),
        ({"access": {"serviceType": "Ingress"}}, "serviceType"),
        ({"tls": {"clientAuthentication": "Sometimes"}}, "clientAuthentication"),
        ({"tls": {"validityDays": 1}}, "validityDays"),
    ],
)
def test_crd_schema_rejects_bad_values(change, message):
    with open(os.path.join(ROOT, "deploy", "samples", "production.yaml")) as f:
        body = yaml.safe_load(f)
    for key, value in change.items():
        body["spec"][key] = {**body["spec"].get(key, {}), **value} if isinstance(value, dict) else value
    with pytest.raises(jsonschema.ValidationError) as e:
        jsonschema.validate(body, crd_schema())
    assert message in e.value.json_path or message in e.value.message


def test_ratio_order_is_enforced_by_the_crd_rules_and_the_operator():
    with open(CRD_FILE) as f:
        rules = yaml.safe_load(f)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["store"][
            "x-kubernetes-validations"
        ]
    assert {r["message"] for r in rules} == {
        "diskSpaceWarningLevelRatio must be >= diskSpaceCleanForciblyRatio",
        "diskSpaceCleanForciblyRatio must be >= diskMaxUsedSpaceRatio",
    }
    with open(os.path.join(ROOT, "deploy", "samples", "production.yaml")) as f:
        body = yaml.safe_load(f)
    bad = copy.deepcopy(body)
    bad["spec"]["store"].update(diskMaxUsedSpaceRatio=88, diskSpaceCleanForciblyRatio=85)
    jsonschema.validate(bad, crd_schema())  # the part of the schema jsonschema can see passes ...
    with pytest.raises(specmod.SpecError) as e:  # ... and the operator refuses it, naming the field
        specmod.parse(bad)
    assert "spec.store.disk" in e.value.field


def test_crd_has_status_subresource_short_name_and_printer_columns():
    with open(CRD_FILE) as f:
        crd = yaml.safe_load(f)
    (v,) = crd["spec"]["versions"]
    assert crd["spec"]["scope"] == "Namespaced" and "mstore" in crd["spec"]["names"]["shortNames"]
    assert v["subresources"] == {
        "status": {},
        "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"},
    }
    columns = {c["name"]: c["jsonPath"] for c in v["additionalPrinterColumns"]}
    assert list(columns) == ["Ready", "Pods", "Nodes", "Disk%", "Age"]
    # the columns read fields the operator writes: ready pods beside the nodes asked for (replicated: groups)
    assert columns["Pods"] == ".status.readyReplicas" and columns["Disk%"] == ".status.diskUsagePercent"


def test_one_image_runs_server_and_operator_as_the_non_root_user_the_manifests_expect():
    with open(os.path.join(ROOT, "deploy", "Dockerfile")) as f:
        dockerfile = f.read()
    assert re.search(rf"^USER {render.UID}:{render.UID}$", dockerfile, re.M)
    assert re.search(r"^ARG BASE=python:3.11-slim$", dockerfile, re.M)  # users keep the usual base
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        scripts = f.read()
    for command in ("msgstore", "msgstore-operator"):
        assert re.search(rf'^{command} = "', scripts, re.M)
    assert "'msgstore[operator,console]'" in dockerfile and "COPY build/wheels " in dockerfile  # the console runs from it too
    with open(os.path.join(ROOT, ".dockerignore")) as f:
        assert "!build/wheels" in f.read()  # a docker build context without the virtualenv


def test_crd_and_values_schema_follow_the_settings_table():
    """spec.store, the chart's store.config and the operator's typed keys come from one table
    (msgstore.store.config.KEYS); once they disagreed (a minimum of 64 here, 4096 there)."""
    from msgstore.store import config

    with open(CRD_FILE) as f:
        store = yaml.safe_load(f)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["store"]
    with open(os.path.join(CHART, "values.schema.json")) as f:
        values = json.load(f)["properties"]["store"]["properties"]["config"]["properties"]
    assert set(store["properties"]) - {"extra"} == set(values) == set(config.TYPED_KEYS) == set(specmod.TYPED_STORE_KEYS)
    for key in config.TYPED_KEYS:
        spec = config.KEYS[key]
        for schema in (store["properties"][key], values[key]):
            assert schema.get("minimum") == spec.minimum and schema.get("maximum") == spec.maximum, key
            assert schema.get("enum") == (list(spec.choices) if spec.choices else None), key
    assert store["properties"]["mappedFileSizeCommitLog"]["minimum"] == config.KEYS["mappedFileSizeCommitLog"].minimum == 64
    # a value the table refuses is refused by the schema too, and the other way round
    for key, bad in (("deleteWhen", "4;24"), ("retentionGuardGroups", "bad/group"), ("flushDiskType", "LATER")):
        with pytest.raises(config.ConfigError):
            config.StoreConfig({key: bad})
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, store["properties"][key])


def notes(tmp_path, *values: str) -> str:
    """The chart's NOTES as `helm install` prints them (helm template leaves NOTES.txt out: it
    is rendered here from a copy of the chart where it is an ordinary template)."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart, dirs_exist_ok=True)
    shutil.copy(chart / "templates" / "NOTES.txt", chart / "templates" / "notes.yaml")
    out = helm("template", "t", str(chart), "--show-only", "templates/notes.yaml", "--debug", *values, check=False)
    return out.stdout.split("# Source: msgstore/templates/notes.yaml", 1)[1]


def test_the_notes_say_the_default_image_must_be_built_and_pushed(tmp_path):
    """The default image exists nowhere (issue 33.15): the NOTES say so, and what to set."""
    default = notes(tmp_path)
    assert "is not published yet" in default and "make image" in default and "image.repository" in default
    own = notes(tmp_path, "--set", "image.registry=registry.example.com", "--set-string", "image.tag=0.1.0")
    assert "not published" not in own and "is installed" in own


def test_checking_callers_needs_the_admin_token_secret_in_the_crd_rules_and_the_operator():
    """Issue 32: users are managed with the admin token, so spec.store.authorizationEnabled
    without spec.adminTokenSecret is refused at admission (CEL) and by the operator, naming it."""
    with open(CRD_FILE) as f:
        spec = yaml.safe_load(f)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert any("adminTokenSecret" in r["rule"] and "authorizationEnabled" in r["message"] for r in spec["x-kubernetes-validations"])
    assert spec["properties"]["store"]["properties"]["authorizationEnabled"]["type"] == "boolean"
    with open(os.path.join(ROOT, "deploy", "samples", "production.yaml")) as f:
        body = yaml.safe_load(f)
    body["spec"]["store"]["authorizationEnabled"] = True
    assert body["spec"].get("adminTokenSecret")  # the production sample has one: accepted
    assert specmod.parse(body).store["authorizationEnabled"] == "true"
    del body["spec"]["adminTokenSecret"]
    with pytest.raises(specmod.SpecError) as e:
        specmod.parse(body)
    assert e.value.field == "spec.store.authorizationEnabled" and "adminTokenSecret" in str(e.value)


def test_a_tls_store_from_the_chart_and_its_helm_test_client(tmp_path):
    """Issue 32: store.tls renders spec.tls; the pods serve TLS with the Secret's files and are
    probed on a plain-text health port; the helm test is a client verifying with the CA Secret
    (and presenting the pods' pair, with mutual TLS); the NOTES show a client with the CA."""
    rendered = docs(helm("template", "r1", CHART, *TLS_VALUES).stdout)
    (store,) = [d for d in rendered if d["kind"] == "MessageStore"]
    assert store["spec"]["tls"] == {"clientAuthentication": "Required"}
    spec = specmod.parse(store)
    name = store["metadata"]["name"]
    sts = render.stateful_set(spec)
    validate(sts)
    container = sts["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[args.index("--tls-server-name") + 1] == f"{name}.default.svc" and "--tls-client-ca" in args
    health = next(p["containerPort"] for p in container["ports"] if p["name"] == "health")
    assert container["readinessProbe"]["grpc"]["port"] == health == int(args[args.index("--health-port") + 1])
    volume = next(v for v in sts["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls")
    assert volume["secret"]["secretName"] == f"{name}-tls"
    (pod,) = [d for d in rendered if d["kind"] == "Pod"]
    script = pod["spec"]["containers"][0]["args"][0]
    assert f"--tls-ca /etc/msgstore/tls/ca.crt --server-name {name}.default.svc --tls-cert" in script
    assert pod["spec"]["volumes"][0]["secret"]["secretName"] == f"{name}-tls"
    text = notes(tmp_path, *TLS_VALUES)
    assert "get secret t-msgstore-ca-cert" in text and "--server-name t-msgstore.default.svc" in text  # (release t)
    named = docs(helm("template", "r1", CHART, *TLS_VALUES, "--set", "store.tls.secretName=from-cert-manager").stdout)
    (pod,) = [d for d in named if d["kind"] == "Pod"]
    assert pod["spec"]["volumes"][0]["secret"]["secretName"] == "from-cert-manager"  # (mutual TLS: a client pair is needed)
    one_way = docs(helm("template", "r1", CHART, *SAMPLE_VALUES, "--set", "store.tls.enabled=true").stdout)
    (pod,) = [d for d in one_way if d["kind"] == "Pod"]
    assert pod["spec"]["volumes"][0]["secret"]["secretName"] == f"{name}-ca-cert"  # the CA certificate alone
    assert "--tls-cert" not in pod["spec"]["containers"][0]["args"][0]
