"""Writes charts/msgstore/monitoring/msgstore-dashboard.json, the chart's Grafana dashboard
(``python scripts/render_dashboard.py``). Kept as code so that panels stay uniform (one
datasource variable, one namespace filter, units); the JSON it writes is what the chart ships
and what tests/deploy/test_monitoring.py checks against the metrics real stores export."""

from __future__ import annotations

import json
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "charts", "msgstore", "monitoring", "msgstore-dashboard.json")
NS = 'namespace=~"$namespace"'
DS = {"type": "prometheus", "uid": "${datasource}"}
MASTERS = f"on (instance) group_left () msgstore_replica_is_master{{{NS}}}"  # followers report a group's lag too: count masters only

# (row, [(title, unit, kind, [(expr, legend)], description)])
ROWS = [
    (
        "Overview",
        [
            ("Nodes serving", "none", "stat", [(f"sum(msgstore_up{{{NS}}})", "serving")], "Nodes whose store serves requests."),
            (
                "Messages in per topic",
                "ops",
                "timeseries",
                [(f"sum by (topic) (rate(rocketmq_messages_in_total{{{NS}}}[$__rate_interval]) * {MASTERS})", "{{topic}}")],
                "Messages stored per second (masters only).",
            ),
            (
                "Bytes written",
                "Bps",
                "timeseries",
                [(f"sum by (instance) (rate(msgstore_put_bytes_total{{{NS}}}[$__rate_interval]))", "{{instance}}")],
                "Commit-log bytes written by sends.",
            ),
            (
                "Send latency",
                "s",
                "timeseries",
                [
                    (f"histogram_quantile(0.5, sum by (le) (rate(msgstore_put_latency_seconds_bucket{{{NS}}}[$__rate_interval])))", "p50"),
                    (f"histogram_quantile(0.99, sum by (le) (rate(msgstore_put_latency_seconds_bucket{{{NS}}}[$__rate_interval])))", "p99"),
                ],
                "From a send's arrival to its answer (flush and replication waits included).",
            ),
            (
                "Pull latency p99",
                "s",
                "timeseries",
                [(f"histogram_quantile(0.99, sum by (le) (rate(msgstore_pull_latency_seconds_bucket{{{NS}}}[$__rate_interval])))", "p99")],
                "Pull calls, long-poll waits excluded.",
            ),
            (
                "Failed calls",
                "ops",
                "timeseries",
                [(f"sum by (method, code) (rate(msgstore_rpc_errors_total{{{NS}}}[$__rate_interval]))", "{{method}} {{code}}")],
                "Calls answered with an error, by gRPC code.",
            ),
        ],
    ),
    (
        "Consumer groups",
        [
            (
                "Lag per group",
                "none",
                "timeseries",
                [
                    (
                        f"sum by (consumer_group, topic) (rocketmq_consumer_ready_messages{{{NS}}} * {MASTERS})",
                        "{{consumer_group}} / {{topic}}",
                    )
                ],
                "Messages not yet committed by the group.",
            ),
            (
                "Consumed per group",
                "ops",
                "timeseries",
                [
                    (
                        f"sum by (consumer_group, topic) (rate(rocketmq_messages_out_total{{{NS}}}[$__rate_interval]) * {MASTERS})",
                        "{{consumer_group}} / {{topic}}",
                    )
                ],
                "Committed offsets' advance per second.",
            ),
            (
                "In flight",
                "none",
                "timeseries",
                [(f"sum by (consumer_group) (rocketmq_consumer_inflight_messages{{{NS}}})", "{{consumer_group}}")],
                "Received (SimpleConsumer/pop) and not yet acknowledged.",
            ),
            (
                "Redeliveries and dead letters",
                "ops",
                "timeseries",
                [
                    (f"sum(rate(msgstore_pop_redelivered_total{{{NS}}}[$__rate_interval]))", "redelivered"),
                    (f"sum(rate(rocketmq_send_to_dlq_messages_total{{{NS}}}[$__rate_interval]))", "dead-lettered"),
                ],
                "Deliveries brought back after their invisibility, and messages set aside in %DLQ% topics.",
            ),
            (
                "Delayed messages pending",
                "none",
                "timeseries",
                [(f"sum by (kind) (msgstore_delayed_pending{{{NS}}})", "{{kind}}")],
                "Delay-level and timed messages not yet due.",
            ),
            (
                "Long polls waiting",
                "none",
                "timeseries",
                [(f"sum by (instance) (msgstore_long_polls_waiting{{{NS}}})", "{{instance}}")],
                "Pulls and receives parked until a message arrives.",
            ),
        ],
    ),
    (
        "Storage",
        [
            (
                "Disk usage",
                "percentunit",
                "timeseries",
                [
                    (f"msgstore_disk_usage_ratio{{{NS}}}", "{{instance}}"),
                    (f"max by (level) (msgstore_disk_ratio_setting{{{NS}}})", "{{level}} ratio"),
                ],
                "The commit-log partition's used share, beside the configured ratios (clean, force, warning: writes refused).",
            ),
            (
                "Dispatch behind",
                "bytes",
                "timeseries",
                [(f"rocketmq_storage_dispatch_behind_bytes{{{NS}}}", "{{instance}}")],
                "Commit-log bytes not yet in consume queues.",
            ),
            (
                "Flush behind",
                "bytes",
                "timeseries",
                [(f"rocketmq_storage_flush_behind_bytes{{{NS}}}", "{{instance}}")],
                "Commit-log bytes not yet on disk.",
            ),
            (
                "Flush latency p99",
                "s",
                "timeseries",
                [
                    (
                        "histogram_quantile(0.99, sum by (le, instance) "
                        f"(rate(msgstore_flush_latency_seconds_bucket{{{NS}}}[$__rate_interval])))",
                        "{{instance}}",
                    )
                ],
                "Commit-log flushes.",
            ),
            (
                "Commit-log segments",
                "none",
                "timeseries",
                [(f"msgstore_commitlog_segments{{{NS}}}", "{{instance}}")],
                "Segment files kept (retention deletes the oldest).",
            ),
        ],
    ),
    (
        "Replication",
        [
            (
                "Masters",
                "none",
                "stat",
                [(f"sum by (group) (msgstore_replica_is_master{{{NS}}})", "{{group}}")],
                "Members that are master, per group: 1 is healthy, 0 means no master.",
            ),
            (
                "Epoch",
                "none",
                "stat",
                [(f"max by (group) (msgstore_replica_epoch{{{NS}}})", "{{group}}")],
                "Each group's epoch (a failover or switchover raises it).",
            ),
            (
                "In-sync followers",
                "none",
                "timeseries",
                [(f"msgstore_replica_in_sync_followers{{{NS}}}", "{{group}}")],
                "Followers in each master's in-sync set.",
            ),
            (
                "Follower lag (bytes)",
                "bytes",
                "timeseries",
                [(f"msgstore_replica_follower_lag_bytes{{{NS}}}", "{{group}} / {{member}}")],
                "How far each follower is behind, as its master sees it.",
            ),
            (
                "Follower lag (seconds)",
                "s",
                "timeseries",
                [(f"msgstore_replica_lag_seconds{{{NS}}}", "{{instance}}")],
                "How far behind each follower is, as it sees itself.",
            ),
        ],
    ),
]


def dashboard() -> dict:
    panels: list[dict] = []
    y = 0
    pid = 1
    for row, items in ROWS:
        panels.append(
            {"type": "row", "title": row, "id": pid, "collapsed": False, "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []}
        )
        pid += 1
        y += 1
        for i, (title, unit, kind, targets, description) in enumerate(items):
            w = 8
            panels.append(
                {
                    "type": kind,
                    "title": title,
                    "description": description,
                    "id": pid,
                    "datasource": DS,
                    "gridPos": {"h": 8, "w": w, "x": (i % 3) * w, "y": y + (i // 3) * 8},
                    "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                    "options": {"legend": {"displayMode": "list", "placement": "bottom"}} if kind == "timeseries" else {},
                    "targets": [
                        {"refId": chr(ord("A") + k), "datasource": DS, "expr": expr, "legendFormat": legend}
                        for k, (expr, legend) in enumerate(targets)
                    ],
                }
            )
            pid += 1
        y += 8 * ((len(items) + 2) // 3)
    return {
        "title": "msgstore",
        "uid": "msgstore-overview",
        "tags": ["msgstore"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {
            "list": [
                {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus", "current": {}, "hide": 0},
                {
                    "name": "namespace",
                    "label": "Namespace",
                    "type": "query",
                    "datasource": DS,
                    "query": {"query": "label_values(msgstore_up, namespace)", "refId": "namespaces"},
                    "definition": "label_values(msgstore_up, namespace)",
                    "includeAll": True,
                    "allValue": ".*",
                    "multi": True,
                    "current": {"text": "All", "value": "$__all"},
                    "refresh": 2,
                    "hide": 0,
                },
            ]
        },
        "panels": panels,
    }


if __name__ == "__main__":
    with open(OUT, "w") as f:
        json.dump(dashboard(), f, indent=1)
        f.write("\n")
    print(os.path.relpath(OUT))
