"""The chart's monitoring (issue 34): the Grafana dashboard, the PrometheusRule alerts and the
PodMonitor, checked with Prometheus's own tools against what real stores export.

- promtool checks the rule file and runs its unit tests (tests/deploy/monitoring/alerts_test.yaml):
  each alert fires on the series that should raise it, after its ``for``, and not on healthy ones;
- a real Prometheus (Debian's) scrapes a real three-member SYNC replica group under load, with
  a consumer group behind and a delivery in flight: every dashboard query answers with series,
  every metric a panel or an alert names is one the stores export, every alert rule evaluates,
  none is pending on the healthy group, and killing the master makes the no-master alert pending;
- the chart renders the three objects from the same files, the PodMonitor selecting the pods the
  operator renders, on the port they name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from msgstore.client import OutMessage, StoreError
from msgstore_operator import render
from msgstore_operator import spec as specmod
from tests.deploy.test_manifests import CHART, docs, helm, validate
from tests.ha.conftest import Group
from tests.support.servers import ROOT, free_port, wait_until

RULES = os.path.join(CHART, "monitoring", "msgstore.rules.yaml")
DASHBOARD = os.path.join(CHART, "monitoring", "msgstore-dashboard.json")
ALERT_TESTS = os.path.join(ROOT, "tests", "deploy", "monitoring", "alerts_test.yaml")
METRIC = re.compile(r"\b(?:msgstore|rocketmq)_[a-z0-9_]+")
MONITORING = [
    "--set",
    "metrics.podMonitor.enabled=true",
    "--set",
    "metrics.prometheusRule.enabled=true",
    "--set",
    "metrics.grafanaDashboard.enabled=true",
]

needs_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("promtool") is None,
    reason="no prometheus/promtool: install Debian's prometheus (scripts/install_test_tools.sh)",
)


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, query) of every panel, with Grafana's variables as a test can run them."""
    with open(DASHBOARD) as f:
        board = json.load(f)
    out = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$__rate_interval", "15s").replace("$namespace", ".*")
            out.append((panel["title"], expr))
    return out


def operator_registry():
    """The operator's metrics as a pass over a store leaves them (its figures are labelled series)."""
    from msgstore_operator import metrics

    metrics.observe("ns", "probe", {"conditions": [{"type": "Ready", "status": "True"}], "lastRoll": {"state": "done"}})
    return metrics.REGISTRY


def rule_exprs() -> list[tuple[str, str]]:
    with open(RULES) as f:
        rules = yaml.safe_load(f)
    return [(r["alert"], r["expr"]) for g in rules["groups"] for r in g["rules"]]


@needs_prometheus
def test_alert_rules_pass_promtool_and_its_unit_tests():
    check = subprocess.run(["promtool", "check", "rules", RULES], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(rule_exprs())} rules found" in check.stdout
    unit = subprocess.run(["promtool", "test", "rules", ALERT_TESTS], capture_output=True, text=True)
    assert unit.returncode == 0, unit.stdout + unit.stderr
    with open(ALERT_TESTS) as f:
        tested = {t["alertname"] for case in yaml.safe_load(f)["tests"] for t in case["alert_rule_test"]}
    assert tested == {name for name, _ in rule_exprs()}, "every alert has a unit test"


def test_the_chart_renders_the_dashboard_alerts_and_pod_monitor_from_its_files():
    all_docs = docs(helm("template", "r1", CHART, "--namespace", "team-a", *MONITORING).stdout)
    rendered = {d["kind"]: d for d in all_docs if not d["metadata"]["name"].endswith("-operator")}
    assert {"PodMonitor", "PrometheusRule", "ConfigMap"} <= set(rendered)
    assert not ({"PodMonitor", "PrometheusRule", "ConfigMap"} & {d["kind"] for d in docs(helm("template", "r1", CHART).stdout)})

    cm = rendered["ConfigMap"]
    validate(cm)
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"  # the Grafana sidecar's default label
    with open(DASHBOARD) as f:
        assert json.loads(cm["data"]["msgstore.json"]) == json.load(f)

    rule = rendered["PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    with open(RULES) as f:
        assert rule["spec"] == {"groups": yaml.safe_load(f)["groups"]}

    # the PodMonitor selects the pods the operator renders, by labels they carry, on a port they name
    pm = rendered["PodMonitor"]
    store = specmod.parse(
        {"apiVersion": "msgstore.io/v1alpha1", "kind": "MessageStore", "metadata": {"name": "orders", "namespace": "team-a"}, "spec": {}}
    )
    template = render.pod_template(store)
    pod_labels = template["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    ports = {p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in ports
    assert pm["spec"]["namespaceSelector"] == {"any": True}
    # and the operator's own figures, on the port its Deployment names
    (op_pm,) = [d for d in all_docs if d["kind"] == "PodMonitor" and d["metadata"]["name"].endswith("-operator")]
    (operator,) = [d for d in all_docs if d["kind"] == "Deployment" and "operator" in d["metadata"]["name"]]
    op_template = operator["spec"]["template"]
    assert op_pm["spec"]["selector"]["matchLabels"].items() <= op_template["metadata"]["labels"].items()
    (op_container,) = op_template["spec"]["containers"]
    assert op_pm["spec"]["podMetricsEndpoints"][0]["port"] in {p["name"] for p in op_container["ports"]}
    # its series name the stores' namespaces: Prometheus keeps them rather than the operator pod's
    assert op_pm["spec"]["podMetricsEndpoints"][0]["honorLabels"] is True
    # store targets carry their component, so that MsgstoreDown sees a store pod that never answered
    assert "app.kubernetes.io/component" in pm["spec"]["podTargetLabels"]
    with open(RULES) as f:
        assert 'up{app_kubernetes_io_component="store"} == 0' in f.read()
    assert {"name": "MSGSTORE_OPERATOR_METRICS", "value": "0.0.0.0:8081"} in op_container["env"]
    scoped = docs(helm("template", "r1", CHART, "--namespace", "team-a", "--set", "operator.scope=namespace", *MONITORING).stdout)
    (pm,) = [d for d in scoped if d["kind"] == "PodMonitor" and d["metadata"]["name"].endswith("-stores")]
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}

    # a dashboard a person can use: every panel has a query and a unit, ids are unique
    board = json.loads(cm["data"]["msgstore.json"])
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    assert all(p["targets"] and p["fieldConfig"]["defaults"]["unit"] for p in panels)


class Prometheus:
    """Debian's Prometheus scraping the given metrics ports every second and evaluating the
    chart's rules every second."""

    def __init__(self, workdir: str, targets: list[int]):
        self.port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [RULES],
            "scrape_configs": [{"job_name": "msgstore", "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in targets]}]}],
        }
        os.makedirs(workdir, exist_ok=True)
        path = os.path.join(workdir, "prometheus.yml")
        with open(path, "w") as f:
            yaml.safe_dump(config, f)
        self.log = open(os.path.join(workdir, "prometheus.log"), "wb")
        self.proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={path}",
                f"--storage.tsdb.path={os.path.join(workdir, 'data')}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._ready, timeout=30, what="prometheus to be ready")

    def _ready(self) -> bool:
        assert self.proc.poll() is None, "prometheus exited: see prometheus.log"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str):
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def alerts(self) -> dict[str, str]:
        """alert name → state (pending or firing) of the alerts active now."""
        return {a["labels"]["alertname"]: a["state"] for a in self.api("alerts")["alerts"]}

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@needs_prometheus
def test_the_dashboard_and_alerts_read_what_a_replicated_store_exports(tmp_path):
    group = Group(tmp_path, 3, ["brokerRole=SYNC_MASTER", "inSyncReplicas=2", "slaveTimeout=3000"], ["slaveReadEnable=true"]).start()
    master = group.members[0]
    prom = None
    try:
        with group.client() as c:
            c.create_topic("orders", 4)
            queues = c.route("orders").queues
            for q in queues:
                # (visible: the lag read below must count every message)
                assert c.send_batch("orders", [OutMessage(b"x" * 512, keys=["k"]) for _ in range(50)], queue=q, visible=True).all_ok
            # a consumer group behind (it committed part of one queue) and a delivery in flight
            c.commit("billing", "orders", queues[0], 20)
            assert c.receive("audit", "orders", 1, invisible=300)
            with pytest.raises(StoreError):  # a failed call, so that the failed-calls panel has a series
                c.pull("no spaces allowed", queues[0], 0)
            prom = Prometheus(str(tmp_path / "prometheus"), [m.metrics_port for m in group.members])
            wait_until(lambda: len([r for r in prom.query("up == 1")]) == 3, timeout=30, what="three targets up")
            # load while Prometheus watches, so that rates have samples on both sides
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:
                assert c.send_batch("orders", [OutMessage(b"y" * 512) for _ in range(100)]).all_ok
            wait_until(lambda: prom.query("count_over_time(msgstore_up[30s]) >= 4"), timeout=30, what="four scrapes of every node")

        exported = set(prom.api("label/__name__/values"))
        for title, expr in dashboard_queries():
            for name in METRIC.findall(expr):
                assert re.sub(r"_(bucket|sum|count)$", "", name) in exported or name in exported, (
                    f"panel {title!r} reads {name}, which no store exports"
                )
            assert prom.query(expr), f"panel {title!r} shows nothing: {expr}"
        operator_metrics = {m.name for m in operator_registry().collect()}
        for alert, expr in rule_exprs():
            for name in METRIC.findall(expr):
                if name.startswith("msgstore_operator_"):  # the operator's own (msgstore_operator/metrics.py)
                    assert name in operator_metrics, f"alert {alert} reads {name}, which the operator does not export"
                else:
                    assert name in exported, f"alert {alert} reads {name}, which no store exports"

        # the lag panel shows the lag the store itself reports, counted once though followers report it too
        (lag_query,) = [q for t, q in dashboard_queries() if t == "Lag per group"]
        with group.client() as c:
            infos = [info for _node, info in c.describe_groups("billing") if info.name == "billing"]
        expected = sum(q.lag for q in infos[0].queues)
        assert expected >= 30  # queue 0's 50 less the 20 committed, and every message of the other queues

        def lag_shown() -> float:
            return {r["metric"]["consumer_group"]: float(r["value"][1]) for r in prom.query(lag_query)}.get("billing", -1.0)

        wait_until(lambda: lag_shown() == expected, timeout=20, what=lambda: f"the lag panel to show {expected} (it shows {lag_shown()})")

        def evaluated() -> bool:
            rules = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
            return len(rules) == len(rule_exprs()) and all(
                r.get("lastEvaluation", "").startswith("2") and r["health"] == "ok" for r in rules
            )

        wait_until(evaluated, timeout=30, what="every alert rule evaluated without error")
        # billing's backlog grew by thousands during the load: the lag alert waits out its `for`;
        # nothing else is raised on a healthy group
        wait_until(
            lambda: prom.alerts() == {"MsgstoreConsumerLagGrowing": "pending"},
            timeout=20,
            what=lambda: f"only the lag alert pending: {prom.alerts()}",
        )
        lagging = {a["labels"]["consumer_group"] for a in prom.api("alerts")["alerts"]}
        assert "billing" in lagging, lagging

        master.kill()
        wait_until(
            lambda: prom.alerts().get("MsgstoreReplicaGroupWithoutMaster") == "pending",
            timeout=60,
            what="the no-master alert to be pending once the master is gone",
        )
        wait_until(lambda: "MsgstoreFollowerDisconnected" in prom.alerts(), timeout=60, what="the followers' disconnection to be seen")
    finally:
        if prom is not None:
            prom.stop()
        group.kill_all()
