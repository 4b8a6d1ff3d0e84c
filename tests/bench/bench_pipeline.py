"""Reading stored messages with Spark (local[1], so the rate is per core of the executor).

Targets (issue 5): segment files ≥ 200k rows/s per core; over gRPC ≥ 50k rows/s per core.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from msgstore.client import Client, OutMessage
from msgstore.store import Message, MessageStore
from tests.support.servers import ServerProcess

from .common import Measure

ROWS = 400_000


def build(root: str) -> None:
    store = MessageStore(root, {}).start()
    body = os.urandom(1024)
    n = 0
    while n < ROWS:
        msgs = [Message("bench", body, queue_id=(n // 1000) % 8, properties={"TAGS": "t", "KEYS": f"k{n + i}"}) for i in range(1000)]
        assert store.put_messages("bench", (n // 1000) % 8, msgs).ok
        n += 1000
    store.shutdown()


def timed_read(spark, **options) -> float:
    reader = spark.read.format("msgstore")
    for k, v in options.items():
        reader = reader.option(k, v)
    t = time.perf_counter()
    reader.load().write.format("noop").mode("overwrite").save()
    return ROWS / (time.perf_counter() - t)


def run(workdir: str) -> list[Measure]:
    from msgstore.pipeline.session import spark_session

    root = tempfile.mkdtemp(dir=workdir)
    data = os.path.join(root, "data")
    build(data)
    spark = spark_session("local[1]", app="msgstore-bench", extra={"spark.ui.showConsoleProgress": "false", "spark.driver.memory": "2g"})
    try:
        timed_read(spark, path=data)  # warm-up: JVM, Python workers
        files = [timed_read(spark, path=data) for _ in range(3)]
        server = ServerProcess(data, name="bench-pipeline")
        server.settings = []
        server.start()
        try:
            Client(server.address).queue_offsets("bench")
            grpc = [timed_read(spark, endpoints=server.address, topics="bench", maxMessagesPerPartition="100000") for _ in range(3)]
        finally:
            server.terminate()
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    return [
        Measure("Spark read of segment files (local[1], 1 KiB bodies)", "rows/s", files, "target ≥ 200k per core"),
        Measure("Spark read over gRPC (local[1])", "rows/s", grpc, "target ≥ 50k per core"),
    ]


__all__ = ["run", "OutMessage"]
