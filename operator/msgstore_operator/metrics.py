"""The operator's own Prometheus figures: whether each MessageStore is Ready and how long its
rolling restart started. What the stores export cannot tell a failing roll (the pod being
rolled exports nothing while it is down); these can, and the chart's alerts read them."""

from __future__ import annotations

import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, start_http_server

REGISTRY = CollectorRegistry()
READY = Gauge(
    "msgstore_operator_store_ready", "1 while the MessageStore's Ready condition is True", ["namespace", "store"], registry=REGISTRY
)
ROLL = Gauge(
    "msgstore_operator_roll_started_timestamp_seconds",
    "When the MessageStore's running rolling restart started, epoch seconds (0: none is running). A start time, not an age, "
    "so that the alert still measures it if the operator stops updating it",
    ["namespace", "store"],
    registry=REGISTRY,
)
PROBLEMS = Gauge(
    "msgstore_operator_condition_problem",
    "1 while a problem condition (ImageUnavailable, PodsPending, FailoverBlocked, ...) is True",
    ["namespace", "store", "type"],
    registry=REGISTRY,
)
PROBLEM_TYPES = (
    "ImageUnavailable",
    "PodsPending",
    "FailoverBlocked",
    "StorageResizeBlocked",
    "ReferenceMissing",
    "DiskPressure",
    "ScaleDownBlocked",
)


def observe(namespace: str, store: str, status: dict[str, Any]) -> None:
    """Set the store's figures from the status a pass just wrote."""
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    READY.labels(namespace, store).set(1 if (conditions.get("Ready") or {}).get("status") == "True" else 0)
    roll = status.get("lastRoll") or {}
    started = _epoch(roll.get("started", "")) if roll.get("state") == "running" else None
    ROLL.labels(namespace, store).set(started or 0)
    for ctype in PROBLEM_TYPES:
        PROBLEMS.labels(namespace, store, ctype).set(1 if (conditions.get(ctype) or {}).get("status") == "True" else 0)


def forget(namespace: str, store: str) -> None:
    """A deleted store's series go (else they would report it forever)."""
    for gauge in (READY, ROLL):
        try:
            gauge.remove(namespace, store)
        except KeyError:
            pass
    for ctype in PROBLEM_TYPES:
        try:
            PROBLEMS.remove(namespace, store, ctype)
        except KeyError:
            pass


def _epoch(text: str) -> float | None:
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()
    except ValueError:
        return None


def serve(port: int, host: str = "0.0.0.0") -> None:
    start_http_server(port, addr=host, registry=REGISTRY)
