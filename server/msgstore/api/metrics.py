"""Prometheus metrics: rates and latencies from the request path, gauges read from the store."""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
PER_QUEUE_SERIES_LIMIT = 2_000  # queues beyond which per-queue series give way to per-topic ones


class Metrics:
    def __init__(self, store_ref, node: str):
        self.registry = CollectorRegistry()
        self.node = node
        r = self.registry
        self.put_messages = Counter("msgstore_put_messages", "Messages stored", ["status"], registry=r)
        self.put_bytes = Counter("msgstore_put_bytes", "Commit-log bytes written by puts", registry=r)
        self.put_latency = Histogram("msgstore_put_latency_seconds", "Send call latency", buckets=LATENCY_BUCKETS, registry=r)
        self.pull_messages = Counter("msgstore_pull_messages", "Messages returned by pulls", registry=r)
        self.pull_latency = Histogram(
            "msgstore_pull_latency_seconds", "Pull call latency (without long-poll waits)", buckets=LATENCY_BUCKETS, registry=r
        )
        self.flush_latency = Histogram(
            "msgstore_flush_latency_seconds", "Commit-log flush (msync) latency", buckets=LATENCY_BUCKETS, registry=r
        )
        self.rpc_errors = Counter("msgstore_rpc_errors", "Calls that failed, by gRPC code", ["method", "code"], registry=r)
        self.dispatched_on_loop = Counter(
            "msgstore_dispatched_on_loop",
            "Sends dispatched on the event loop after their answer (a trickle's; the rest by the dispatcher thread)",
            registry=r,
        )
        r.register(_StoreCollector(store_ref))
        self._server = None

    def watch_broker(self, broker_ref) -> None:
        """Gauges of the delay, timer and pop services (issue 22)."""
        self.registry.register(_BrokerCollector(broker_ref))

    def watch_replication(self, server_ref) -> None:
        """Role, epoch, in-sync set and lag of a replica group member (read at scrape time)."""
        self.registry.register(_ReplicaCollector(server_ref))

    def watch_long_polls(self, waiters) -> None:
        """How many pulls and receives are parked waiting for messages (read at scrape time)."""
        self.registry.register(_LongPollCollector(waiters))

    def serve(self, host: str, port: int):
        self._server = start_http_server(port, addr=host, registry=self.registry)
        return self._server


def _gauge(name: str, doc: str, value: float, labels: dict[str, str] | None = None) -> GaugeMetricFamily:
    """One gauge of one series (``labels``: its label names and values)."""
    g = GaugeMetricFamily(name, doc, labels=list(labels or {}))
    g.add_metric(list((labels or {}).values()), float(value))
    return g


class _StoreCollector:
    """Gauges taken from the store at scrape time (no bookkeeping on the hot path)."""

    def __init__(self, store_ref):
        self.store_ref = store_ref

    def describe(self):
        return []

    def collect(self):
        store = self.store_ref()
        if store is None:
            return
        st = store.status()
        rec = st["recovery"]

        gauge = _gauge
        yield gauge("msgstore_up", "1 when the store serves requests", 1 if st["state"] == "running" else 0)
        yield gauge(
            "msgstore_disk_usage_ratio", "Used share of the commit-log partition", -1 if st["disk_usage"] is None else st["disk_usage"]
        )
        yield gauge("msgstore_disk_full", "1 while writes are refused for disk usage", 1 if st["disk_full"] else 0)
        yield gauge("msgstore_recovery_duration_seconds", "Duration of the last recovery", rec["duration_ms"] / 1000)
        yield gauge("msgstore_recovery_abnormal", "1 when the last start recovered from a crash", 1 if rec["mode"] == "abnormal" else 0)
        yield gauge("msgstore_config_generation", "Generation of the applied configuration", st["config_generation"])
        cfg = store.config
        ratios = GaugeMetricFamily(
            "msgstore_disk_ratio_setting",
            "The configured disk usage ratios (clean: cleanup runs; force: unexpired segments go; warning: writes are refused)",
            labels=["level"],
        )
        for level, key in (
            ("clean", "diskMaxUsedSpaceRatio"),
            ("force", "diskSpaceCleanForciblyRatio"),
            ("warning", "diskSpaceWarningLevelRatio"),
        ):
            ratios.add_metric([level], float(getattr(cfg, key)) / 100)
        yield ratios
        if st["state"] != "running":
            return
        commits = store.group_commits()
        if commits is not None:
            c = CounterMetricFamily("msgstore_group_commits", "SYNC_FLUSH flushes that answered waiting sends")
            c.add_metric([], commits[0])
            yield c
            c = CounterMetricFamily("msgstore_group_commit_requests", "Waiting sends answered by those flushes")
            c.add_metric([], commits[1])
            yield c
        yield gauge("msgstore_commitlog_min_offset", "First commit-log byte still stored", st["min_phy_offset"])
        yield gauge("msgstore_commitlog_max_offset", "End of the commit log", st["max_phy_offset"])
        yield gauge("msgstore_commitlog_flushed_offset", "End of what is on disk", st["flushed_phy_offset"])
        yield gauge("msgstore_dispatch_behind_bytes", "Commit-log bytes not yet in consume queues", st["dispatch_behind_bytes"])
        # RocketMQ 5's names for the same figures (its dashboards and alerts read these)
        yield gauge("rocketmq_storage_dispatch_behind_bytes", "Commit-log bytes not yet dispatched", st["dispatch_behind_bytes"])
        yield gauge(
            "rocketmq_storage_flush_behind_bytes",
            "Commit-log bytes not yet flushed",
            max(0, st["max_phy_offset"] - st["flushed_phy_offset"]),
        )
        yield gauge("msgstore_commitlog_segments", "Commit-log segment files", st["commitlog_segments"])
        queues = store.consume_queues()
        yield gauge("msgstore_consume_queues", "Consume queues on this node", len(queues))
        if len(queues) <= PER_QUEUE_SERIES_LIMIT:
            mins = GaugeMetricFamily("msgstore_queue_min_offset", "Min offset per queue", labels=["topic", "queue"])
            maxs = GaugeMetricFamily("msgstore_queue_max_offset", "Max offset per queue", labels=["topic", "queue"])
            for cq in queues:
                labels = [cq.topic, str(cq.queue_id)]
                mins.add_metric(labels, cq.min_offset)
                maxs.add_metric(labels, cq.max_offset)
            yield mins
            yield maxs
        else:  # 100,000 queues would be 200,000 series per scrape: per topic instead
            held: dict[str, int] = {}
            for cq in queues:
                held[cq.topic] = held.get(cq.topic, 0) + max(0, cq.max_offset - cq.min_offset)
            per_topic = GaugeMetricFamily("msgstore_topic_messages_held", "Messages held per topic (over its queues)", labels=["topic"])
            for topic, n in held.items():
                per_topic.add_metric([topic], n)
            yield per_topic
        yield from _topic_and_group_figures(store, queues)


def _topic_and_group_figures(store, queues) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
    """RocketMQ 5's per-topic and per-group figures, from the queues' offsets at scrape time
    (nothing counted on the put path), in one pass over a copy of the committed offsets.
    Messages in per topic is the sum of its queues' max offsets: offsets only grow, so it
    behaves as a counter (a deleted topic resets it, as a restart resets any counter). Per
    group, out is the sum of its committed offsets (a reset of the group's offsets reads as a
    counter reset) and ready is its lag (max offset minus committed; a queue never committed
    counts from its start): RocketMQ splits our lag into ready and in flight using its last pull
    offset, which a pull-based store does not keep per group."""
    by_topic: dict[str, list[tuple[int, int, int]]] = {}
    for cq in queues:
        by_topic.setdefault(cq.topic, []).append((cq.queue_id, cq.min_offset, cq.max_offset))
    msgs_in = CounterMetricFamily("rocketmq_messages_in_total", "Messages stored per topic", labels=["topic"])
    for topic, qs in sorted(by_topic.items()):
        msgs_in.add_metric([topic], sum(hi for _q, _lo, hi in qs))
    yield msgs_in
    offsets = store.offsets
    pairs = len(offsets.table)
    truncated = GaugeMetricFamily(
        "msgstore_group_series_truncated",
        f"1 when the per topic-and-group series are left out (more than {PER_QUEUE_SERIES_LIMIT} pairs): lag alerts see nothing then",
    )
    truncated.add_metric([], 1 if pairs > PER_QUEUE_SERIES_LIMIT else 0)
    yield truncated
    if pairs > PER_QUEUE_SERIES_LIMIT:  # as for queues: beyond this, per-pair series would swamp a scrape
        return
    with offsets.lock:  # (a copy, not the computation, under the lock commits take)
        table = {k: dict(v) for k, v in offsets.table.items()}
    out = CounterMetricFamily(
        "rocketmq_messages_out_total", "Messages consumed per topic and group (committed offsets)", labels=["topic", "consumer_group"]
    )
    ready = GaugeMetricFamily(
        "rocketmq_consumer_ready_messages", "Messages not yet consumed by the group (its lag)", labels=["topic", "consumer_group"]
    )
    for key in sorted(table):
        topic, _, group = key.partition("@")
        committed = table[key]
        qs = by_topic.get(topic, [])
        out.add_metric([topic, group], sum(max(0, committed.get(q, -1)) for q, _lo, _hi in qs))
        ready.add_metric([topic, group], sum(max(0, hi - max(committed.get(q, -1), lo)) for q, lo, hi in qs))
    yield out
    yield ready


class _BrokerCollector:
    """Delayed messages pending and delivered, deliveries in flight per group, redeliveries and
    dead letters: read at scrape time."""

    def __init__(self, broker_ref):
        self.broker_ref = broker_ref

    def describe(self):
        return []

    def collect(self):
        broker = self.broker_ref()
        if broker is None or not broker.active:
            return
        st = broker.stats()
        pending = GaugeMetricFamily("msgstore_delayed_pending", "Delayed messages not yet due", labels=["kind"])
        pending.add_metric(["level"], st["delay_pending"])
        pending.add_metric(["timer"], st["timer_pending"])
        yield pending
        delivered = CounterMetricFamily("msgstore_delayed_delivered", "Delayed messages put on their topics", labels=["kind"])
        delivered.add_metric(["level"], st["delay_delivered"])
        delivered.add_metric(["timer"], st["timer_delivered"])
        yield delivered
        counts = sorted(broker.pop.inflight_counts().items())
        inflight = GaugeMetricFamily("msgstore_pop_inflight", "Received messages not yet acknowledged", labels=["group"])
        rmq_inflight = GaugeMetricFamily(
            "rocketmq_consumer_inflight_messages", "Received messages not yet acknowledged (RocketMQ 5's name)", labels=["consumer_group"]
        )
        for group, n in counts:
            inflight.add_metric([group], n)
            rmq_inflight.add_metric([group], n)
        yield inflight
        yield rmq_inflight
        c = CounterMetricFamily("msgstore_pop_redelivered", "Messages brought back for another delivery")
        c.add_metric([], st["pop_revived"])
        yield c
        c = CounterMetricFamily("msgstore_pop_dead_lettered", "Messages set aside in a %DLQ% topic")
        c.add_metric([], st["pop_dead_lettered"])
        yield c
        c = CounterMetricFamily("rocketmq_send_to_dlq_messages", "Messages set aside in a %DLQ% topic (RocketMQ 5's name)")
        c.add_metric([], st["pop_dead_lettered"])
        yield c


class _ReplicaCollector:
    """A replica group member's view: its role and epoch; a master's in-sync followers and each
    follower's lag; a follower's own lag. Taken from the same RoleStatus ``msgstore admin
    role`` shows (read while the loop may change it: a figure torn by a concurrent change is
    retaken once, then skipped for this scrape)."""

    def __init__(self, server_ref):
        self.server_ref = server_ref

    def describe(self):
        return []

    def collect(self):
        server = self.server_ref()
        if server is None or server.store is None or server.store.state != "running":
            return
        if server.replica is None:  # a node of its own is its own group's master (the alerts and dashboard rely on it)
            yield _gauge("msgstore_replica_is_master", "1 on the group's master, 0 on a follower", 1, {"group": server.node_name})
            return
        from .ha_service import role_status

        error: Exception | None = None
        for _ in range(2):
            try:
                st = role_status(server)
                break
            except Exception as e:  # state the loop changed while this thread read it (a role change): retaken once
                error = e
                continue
        else:
            # skipped for this scrape, rather than failing the whole scrape during a failover; said,
            # since the lag alerts and panels lean on msgstore_replica_is_master
            log.warning("replica figures left out of this scrape: %s: %s", type(error).__name__, error)
            return
        gauge = functools.partial(_gauge, labels={"group": st.group})
        master = st.role == "MASTER"
        yield gauge("msgstore_replica_is_master", "1 on the group's master, 0 on a follower", 1 if master else 0)
        yield gauge("msgstore_replica_epoch", "The member's epoch", st.epoch)
        yield gauge(
            "msgstore_replica_sync", "1 when the group replicates synchronously (SYNC)", 1 if (st.group_mode or st.mode) == "SYNC" else 0
        )
        if master:
            yield gauge(
                "msgstore_replica_fenced", "1 while the master refuses to acknowledge (fenced or too few in sync)", 1 if st.fenced else 0
            )
            yield gauge(
                "msgstore_replica_in_sync_followers",
                "Followers in the in-sync set (the master not counted)",
                max(0, len(st.sync_state_set) - 1),
            )
            yield gauge("msgstore_replica_followers_connected", "Followers streaming from this master", len(st.followers))
            lag = GaugeMetricFamily(
                "msgstore_replica_follower_lag_bytes", "Bytes each follower is behind the master", labels=["group", "member"]
            )
            for f in st.followers:
                lag.add_metric([st.group, f.member], float(f.lag_bytes))
            yield lag
        else:
            yield gauge("msgstore_replica_connected", "1 while this follower streams from its master", 1 if st.connected else 0)
            yield gauge("msgstore_replica_lag_bytes", "Bytes this follower is behind its master", st.lag_bytes)
            yield gauge("msgstore_replica_lag_seconds", "How far behind its master this follower is, in seconds", st.lag_seconds)


class _LongPollCollector:
    def __init__(self, waiters):
        self.waiters = waiters

    def describe(self):
        return []

    def collect(self):
        g = GaugeMetricFamily("msgstore_long_polls_waiting", "Pulls and receives parked until a message arrives or their time is up")
        g.add_metric([], float(self.waiters.waiting))
        yield g
