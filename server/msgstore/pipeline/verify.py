"""``msgstore pipeline verify``: for a store directory, every consume-queue unit must point at a
valid record of its topic and queue, and every key of every record must be in the index."""

from __future__ import annotations

import os


def verify(spark, root: str, limit: int = 1000) -> list[str]:
    from pyspark.sql import functions as F

    from .source import segment_files

    segments = segment_files(root)
    if not segments:
        return ["commitlog: no segments"] if os.path.isdir(os.path.join(root, "consumequeue")) else []
    cl_min = segments[0].start
    # (the store's own topics too: a delayed message's consume-queue unit points at its record in the timer's topic)
    src = lambda kind: spark.read.format("msgstore").option("path", root).option("kind", kind).option("systemTopics", "true").load()  # noqa: E731
    records = src("messages").select(
        "commitlog_offset",
        F.col("topic").alias("r_topic"),
        F.col("queue_id").alias("r_queue"),
        F.col("queue_offset").alias("r_offset"),
        F.col("store_size").alias("r_size"),
    )
    units = src("consumequeue").where(F.col("commitlog_offset") >= cl_min)
    bad_units = (
        units.join(records, "commitlog_offset", "left")
        .where(
            F.col("r_topic").isNull()
            | (F.col("r_topic") != F.col("topic"))
            | (F.col("r_queue") != F.col("queue_id"))
            | (F.col("r_offset") != F.col("queue_offset"))
            | (F.col("r_size") != F.col("size"))
        )
        .orderBy("topic", "queue_id", "queue_offset")
        .limit(limit)
        .collect()
    )
    problems = []
    for u in bad_units:
        where = f"consumequeue {u['topic']}/{u['queue_id']} offset {u['queue_offset']}"
        if u["r_topic"] is None:
            problems.append(f"{where}: no record at commit-log offset {u['commitlog_offset']}")
        else:
            problems.append(
                f"{where}: points at {u['r_topic']}/{u['r_queue']} offset {u['r_offset']} "
                f"(record size {u['r_size']}, unit size {u['size']})"
            )
    keys = src("keyhashes").where(F.col("commitlog_offset") >= cl_min)
    index = src("index").select(F.col("key_hash"), F.col("commitlog_offset"))
    missing = keys.join(index, ["key_hash", "commitlog_offset"], "left_anti").orderBy("commitlog_offset").limit(limit).collect()
    problems += [f"index: key {m['key']!r} of {m['topic']} (record at {m['commitlog_offset']}) is not indexed" for m in missing]
    return problems
