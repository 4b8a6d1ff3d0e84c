"""The operator's own figures (msgstore_operator/metrics.py), which the chart's MsgstoreRollStalled
and MsgstoreStoreNotReady alerts read."""

from __future__ import annotations

from prometheus_client import generate_latest

from msgstore_operator import metrics


def value(name: str, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, labels)


def test_ready_roll_age_and_problem_conditions_follow_the_status_and_go_with_the_store():
    status = {
        "conditions": [{"type": "Ready", "status": "False"}, {"type": "ImageUnavailable", "status": "True"}],
        "lastRoll": {"state": "running", "started": "2026-11-27T10:00:00Z"},
    }
    metrics.observe("apps", "orders", status)
    assert value("msgstore_operator_store_ready", namespace="apps", store="orders") == 0
    assert (
        value("msgstore_operator_roll_started_timestamp_seconds", namespace="apps", store="orders") == 1795773600.0
    )  # 2026-11-27T10:00:00Z
    assert value("msgstore_operator_condition_problem", namespace="apps", store="orders", type="ImageUnavailable") == 1
    assert value("msgstore_operator_condition_problem", namespace="apps", store="orders", type="PodsPending") == 0

    status = {"conditions": [{"type": "Ready", "status": "True"}], "lastRoll": {"state": "done", "started": "2026-11-27T10:00:00Z"}}
    metrics.observe("apps", "orders", status)
    assert value("msgstore_operator_store_ready", namespace="apps", store="orders") == 1
    assert value("msgstore_operator_roll_started_timestamp_seconds", namespace="apps", store="orders") == 0

    metrics.forget("apps", "orders")
    assert 'namespace="apps",store="orders"' not in generate_latest(metrics.REGISTRY).decode()
    metrics.forget("apps", "orders")  # twice is no error
