"""archive, stats and verify on a real SparkSession."""

import collections
import csv
import datetime
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from msgstore.client import Client
from msgstore.pipeline.archive import GROUP, archive
from msgstore.pipeline.stats import compute, write
from msgstore.pipeline.verify import verify
from tests.pipeline.conftest import dispatched, fill
from tests.support.servers import ROOT, ServerProcess


def test_archive_twice_writes_no_duplicates(spark, store_node, tmp_path):
    node, client = store_node
    out = str(tmp_path / "archive")
    first = archive(spark, [node.address], ["orders", "payments"], out)
    assert first.rows == 1500
    parquet = spark.read.parquet(out)
    assert parquet.count() == 1500
    today = datetime.datetime.now(datetime.UTC).date()
    assert {r.date for r in parquet.select("date").distinct().collect()} <= {today, today - datetime.timedelta(days=1)}
    for topic in ("orders", "payments"):  # partitioned by topic, then date
        assert all(d.startswith("date=") for d in os.listdir(os.path.join(out, f"topic={topic}")))
    again = archive(spark, [node.address], ["orders", "payments"], out)
    assert again.rows == 0 and spark.read.parquet(out).count() == 1500
    fill(client, "orders", 40, start=5000)
    third = archive(spark, [node.address], ["orders", "payments"], out)
    assert third.rows == 40
    rows = spark.read.parquet(out)
    assert rows.count() == 1540
    assert rows.select("topic", "queue_id", "queue_offset").distinct().count() == 1540
    # progress is a consumer group in the store, on the node that owns each queue
    for q, (_lo, hi) in client.queue_offsets("orders").items():
        assert client.committed(GROUP, "orders", q) == hi


def test_stats_match_direct_counts(spark, store_node, tmp_path):
    node, client = store_node
    df = spark.read.format("msgstore").option("path", node.data_dir).option("topics", "orders,payments").load()
    rows = compute(df)
    direct = collections.defaultdict(list)
    for r in df.select("topic", "store_timestamp", "body").collect():
        direct[(r.topic, r.store_timestamp.strftime("%Y-%m-%d %H:00"))].append(len(r.body))
    assert {(r["topic"], r["hour"]) for r in rows} == set(direct)
    for r in rows:
        sizes = np.array(direct[(r["topic"], r["hour"])])
        assert r["messages"] == len(sizes) and r["bytes"] == int(sizes.sum()) and r["max_size"] == int(sizes.max())
        for key, q in (("p50", 50), ("p90", 90), ("p99", 99)):
            assert r[key] == int(np.percentile(sizes, q, method="inverted_cdf")), key
    csv_path, png_path = write(rows, str(tmp_path / "stats"))
    with open(csv_path) as f:
        assert sum(int(line["messages"]) for line in csv.DictReader(f)) == df.count()
    with open(png_path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def stopped_store(tmp_path):
    node = ServerProcess(str(tmp_path / "verify"), name="verify", settings=["maxHashSlotNum=64", "maxIndexNum=256"])
    node.start()
    client = Client(node.address)
    fill(client, "audit", 600, queues=2)
    client.close()
    assert node.terminate() == 0
    return node.data_dir


def test_verify_a_clean_store(spark, stopped_store):
    assert verify(spark, stopped_store) == []


def test_verify_finds_a_corrupted_unit_and_a_deleted_index_file(spark, stopped_store):
    qdir = os.path.join(stopped_store, "consumequeue", "audit", "1")
    seg = os.path.join(qdir, sorted(os.listdir(qdir))[0])
    with open(seg, "r+b") as f:  # unit 7 now points at the next record
        f.seek(7 * 20)
        phy = int.from_bytes(f.read(8), "big")
        f.seek(7 * 20)
        f.write((phy + 1).to_bytes(8, "big"))
    index_dir = os.path.join(stopped_store, "index")
    files = sorted(os.listdir(index_dir))
    assert len(files) >= 3
    os.unlink(os.path.join(index_dir, files[1]))
    problems = verify(spark, stopped_store)
    assert f"consumequeue audit/1 offset 7: no record at commit-log offset {phy + 1}" in problems
    missing = [p for p in problems if p.startswith("index:")]
    assert 200 <= len(missing) <= 256  # the keys the deleted file held (255 per file)
    assert all("is not indexed" in p for p in missing)


def test_verify_command_exit_code(stopped_store):
    shutil.rmtree(os.path.join(stopped_store, "index"))
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server"), TZ="UTC")
    proc = subprocess.run(
        [sys.executable, "-m", "msgstore.cli", "--json", "pipeline", "verify", stopped_store, "--master", "local[1]"],
        capture_output=True,
        env=env,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 1, proc.stderr.decode()[-2000:]
    import json

    report = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert not report["ok"] and any("is not indexed" in p for p in report["problems"])


def test_verify_counts_the_delayed_messages_records_and_refuses_a_directory_without_a_store(spark, tmp_path):
    """A delayed message's unit in the timer's queue points at a record of the store's own
    topic, which verify read past: a healthy store had "problems"; an empty directory was ok."""
    from msgstore.pipeline.verify import verify

    node = ServerProcess(str(tmp_path / "data"), name="delays").start()
    try:
        with Client(node.address) as c:
            assert c.send("later", b"x", delay=3600).ok
            dispatched(c)
    finally:
        node.terminate()
    assert verify(spark, node.data_dir) == []
    (tmp_path / "empty").mkdir()
    out = subprocess.run(
        [sys.executable, "-m", "msgstore.cli", "pipeline", "verify", str(tmp_path / "empty")],
        capture_output=True,
        env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server")),
        timeout=120,
    )
    assert out.returncode == 2 and "holds no store" in out.stderr.decode(), out.stderr[-500:]


def test_a_job_refused_for_data_loss_says_so_in_one_line():
    from msgstore.pipeline.cli import job_error

    loss = "msgstore: topic t queue n/0: offsets 100..899 were deleted by retention (the queue now starts at 900)"
    refusal = f"msgstore.pipeline.source.DataLossError: {loss}; set failOnDataLoss=false to skip them"
    trace = f"Traceback ...\npyspark...PythonException:\n{refusal}\n\tat org"
    assert job_error(trace) == f"{loss}; --allow-data-loss skips them"
    assert job_error("java.lang.OutOfMemoryError") is None
