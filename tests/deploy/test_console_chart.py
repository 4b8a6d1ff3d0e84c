"""The chart's console (issue 34): a Deployment, Service and a read-only Role, validated against
Kubernetes' schemas, reaching the store as the chart's own helm test does (TLS, mutual TLS)."""

from __future__ import annotations

import ast
import inspect

from msgstore.console import kube
from tests.deploy.test_manifests import CHART, SAMPLE_VALUES, docs, helm, validate

CONSOLE = ["--set", "console.enabled=true"]


def rendered(*values: str) -> dict[str, dict]:
    return {
        d["kind"]: d
        for d in docs(helm("template", "r1", CHART, "--namespace", "team-a", *values).stdout)
        if "console" in d["metadata"]["name"]
    }


def args(objs: dict[str, dict]) -> list[str]:
    (container,) = objs["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["msgstore", "console"]
    return container["args"]


def test_the_console_is_off_by_default_and_renders_valid_objects_when_on():
    assert rendered(*SAMPLE_VALUES) == {}
    objs = rendered(*SAMPLE_VALUES, *CONSOLE)
    assert set(objs) == {"ServiceAccount", "Role", "RoleBinding", "Deployment", "Service"}
    for doc in objs.values():
        validate(doc)
    a = args(objs)
    assert "--server=r1-msgstore.team-a.svc:10911" in a and "--kubernetes=team-a/r1-msgstore" in a and "--host=0.0.0.0" in a
    # the admin token is opt-in: the sample store's (orders-admin) is not taken without asking
    assert not any(x.startswith("--admin-token-file") for x in a)
    objs = rendered(*SAMPLE_VALUES, *CONSOLE, "--set", "console.adminTokenSecret.name=orders-admin")
    assert "--admin-token-file=/etc/msgstore/admin/token" in args(objs)
    volumes = {v["name"]: v for v in objs["Deployment"]["spec"]["template"]["spec"]["volumes"]}
    assert volumes["admin-token"]["secret"]["secretName"] == "orders-admin"
    pod = objs["Deployment"]["spec"]["template"]
    assert objs["Service"]["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "console"  # never selected as a store pod
    assert pod["spec"]["serviceAccountName"] == objs["RoleBinding"]["subjects"][0]["name"]


def test_the_console_reaches_a_tls_store_as_the_helm_test_does():
    a = args(rendered(*SAMPLE_VALUES, *CONSOLE, "--set", "store.tls.enabled=true"))
    assert "--tls-ca=/etc/msgstore/tls/ca.crt" in a and "--server-name=r1-msgstore.team-a.svc" in a
    assert not any(x.startswith("--tls-cert") for x in a)
    objs = rendered(*SAMPLE_VALUES, *CONSOLE, "--set", "store.tls.enabled=true", "--set", "store.tls.clientAuthentication=Required")
    assert "--tls-cert=/etc/msgstore/tls/tls.crt" in args(objs)
    volumes = {v["name"]: v for v in objs["Deployment"]["spec"]["template"]["spec"]["volumes"]}
    assert [src["secret"]["name"] for src in volumes["tls"]["projected"]["sources"]] == ["r1-msgstore-tls", "r1-msgstore-ca-cert"]
    for doc in objs.values():
        validate(doc)


def test_the_console_reaches_a_store_of_its_own_with_its_own_tls_secrets():
    """A MessageStore the team applies itself (no sample store): console.store and console.tls."""
    values = [
        *CONSOLE,
        "--set",
        "console.store=orders",
        "--set",
        "console.tls.enabled=true",
        "--set",
        "console.tls.clientSecret=console-cert",
    ]
    objs = rendered(*values)
    a = args(objs)
    assert (
        "--server=orders.team-a.svc:10911" in a and "--server-name=orders.team-a.svc" in a and "--tls-cert=/etc/msgstore/tls/tls.crt" in a
    )
    volumes = {v["name"]: v for v in objs["Deployment"]["spec"]["template"]["spec"]["volumes"]}
    assert [src["secret"]["name"] for src in volumes["tls"]["projected"]["sources"]] == ["console-cert", "orders-ca-cert"]
    assert objs["Role"]["rules"][0]["resourceNames"] == ["orders"]
    for doc in objs.values():
        validate(doc)
    # the name checked in the store's certificate can be set; a client certificate alone turns no TLS on
    a = args(rendered(*values, "--set", "console.tls.serverName=orders.example.org"))
    assert "--server-name=orders.example.org" in a
    a = args(rendered(*CONSOLE, "--set", "console.store=orders", "--set", "console.tls.clientSecret=console-cert"))
    assert not any(x.startswith(("--tls-", "--server-name")) for x in a)


def test_the_console_role_grants_exactly_what_its_kubernetes_page_calls():
    """The Role allows get on the one MessageStore and list on events: what console/kube.py
    calls (read from its source, so a new call without a rule fails here)."""
    calls = {
        n.func.attr
        for n in ast.walk(ast.parse(inspect.getsource(kube)))
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr.startswith(("get_", "list_", "create_", "patch_", "delete_"))
    }
    assert calls == {"get_namespaced_custom_object", "list_namespaced_event"}
    role = rendered(*SAMPLE_VALUES, *CONSOLE)["Role"]
    assert role["rules"] == [
        {"apiGroups": ["msgstore.io"], "resources": ["messagestores"], "resourceNames": ["r1-msgstore"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
    ]
