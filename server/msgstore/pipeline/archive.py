"""``msgstore pipeline archive``: new messages to Parquet, partitioned by topic and date.

Incremental: what was archived is committed to the store as consumer group
``msgstore-archiver``, after the files are written, so a rerun writes only newer messages. A
crash between writing and committing makes the next run write that increment again
(at-least-once), never lose it. The run holds every queue of its topics as a member of that
group while it works (client/lease.py), so a second run at the same time fails at once instead
of archiving the same messages twice, and ``msgstore groups`` shows it; where it starts is read
from the same group data ``msgstore groups`` shows.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

GROUP = "msgstore-archiver"


@dataclass
class ArchiveResult:
    rows: int = 0
    ranges: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)


def plan(client, topics: list[str], group: str = GROUP) -> tuple[dict, dict, int]:
    """(startingOffsets, endingOffsets, rows) for everything not yet archived."""
    committed = {
        (node.name, q.topic, q.queue_id): q.committed
        for node, info in client.describe_groups(group)
        if info.name == group
        for q in info.queues
    }
    start: dict[str, dict[str, int]] = {}
    end: dict[str, dict[str, int]] = {}
    rows = 0
    for topic in topics:
        for q, (lo, hi) in client.queue_offsets(topic).items():
            key = f"{q.node}/{q.queue_id}"
            done = committed.get((q.node, topic, q.queue_id), -1)
            first = max(done, lo) if done >= 0 else lo
            start.setdefault(topic, {})[key] = done if done >= 0 else -2
            end.setdefault(topic, {})[key] = hi
            rows += max(0, hi - first)
    return start, end, rows


CLIENT_OPTIONS = ("token", "access_key", "secret_key", "tls_ca", "tls_cert", "tls_key", "server_name")


def archive(
    spark,
    endpoints: list[str],
    topics: list[str],
    out: str,
    *,
    group: str = GROUP,
    fail_on_data_loss: bool = True,
    client_options: dict | None = None,
) -> ArchiveResult:
    from ..client import Client
    from ..client.lease import QueueLease

    opts = dict(client_options or {})
    client = Client(endpoints, **{k: v for k, v in opts.items() if k in CLIENT_OPTIONS})
    try:
        with QueueLease(client, group, topics, client_id=f"archive@{socket.gethostname()}@{os.getpid()}"):
            return _archive(spark, client, endpoints, topics, out, group, fail_on_data_loss, opts)
    finally:
        client.close()


def _archive(
    spark, client, endpoints: list[str], topics: list[str], out: str, group: str, fail_on_data_loss: bool, opts: dict
) -> ArchiveResult:
    """The run itself, while the lease holds the queues."""
    from pyspark.sql import functions as F

    from ..client.routing import QueueRef

    starting, ending, rows = plan(client, topics, group)
    result = ArchiveResult(rows=rows)
    if rows == 0:
        log.info("nothing new to archive")
        return result
    reader = (
        spark.read.format("msgstore")
        .option("endpoints", ",".join(endpoints))
        .option("topics", ",".join(topics))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("failOnDataLoss", str(fail_on_data_loss).lower())
    )
    for k, v in (
        ("token", opts.get("token")),
        ("accessKey", opts.get("access_key")),
        ("secretKey", opts.get("secret_key")),
        ("tlsCa", opts.get("tls_ca")),
        ("tlsCert", opts.get("tls_cert")),
        ("tlsKey", opts.get("tls_key")),
        ("serverName", opts.get("server_name")),
    ):
        if v:
            reader = reader.option(k, v)
    df = reader.load().withColumn("date", F.to_date("store_timestamp"))
    df.write.mode("append").partitionBy("topic", "date").parquet(out)
    # the files are there: now record the progress
    nodes = {n.name: n.address for n in client.nodes()}
    for topic, per in ending.items():
        for key, hi in per.items():
            node, _, qid = key.rpartition("/")
            if node in nodes:
                client.commit(group, topic, QueueRef(node, nodes[node], int(qid)), hi)
            result.ranges.setdefault(topic, {})[key] = (starting[topic][key], hi)
    return result
