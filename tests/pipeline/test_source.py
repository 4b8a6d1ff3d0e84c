"""The msgstore Spark source: both inputs, bounds, data loss, streaming."""

import json
import os
import time

import pytest

from msgstore.client import Client
from msgstore.pipeline.schema import ARROW
from tests.pipeline.conftest import dispatched, fill
from tests.support.servers import ServerProcess


def live(spark, node, **options):
    r = spark.read.format("msgstore").option("endpoints", node.address)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def offline(spark, path, **options):
    r = spark.read.format("msgstore").option("path", path)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_both_inputs_give_identical_dataframes(spark, store_node):
    node, _ = store_node
    a = live(spark, node, topics="orders,payments", maxMessagesPerPartition="250")
    b = offline(spark, node.data_dir)
    assert a.schema == b.schema
    assert a.rdd.getNumPartitions() >= 1200 // 250  # split by maxMessagesPerPartition
    assert a.count() == b.count() == 1500
    order = ["topic", "queue_id", "queue_offset"]
    assert a.orderBy(order).collect() == b.orderBy(order).collect()  # (EXCEPT cannot compare map columns)
    row = a.where("queue_offset = 3 and topic = 'orders' and queue_id = 1").collect()[0]
    assert row.body.startswith(b"body-000013-") and row.keys == ["key-13"] and row.tags == "tag1"
    assert row.properties == {"n": "13", "TAGS": "tag1", "KEYS": "key-13"}
    assert row.store_host == node.address and len(row.msg_id) == 32


def test_arrow_schema_is_spark_s(spark, store_node):
    from pyspark.sql.pandas.types import to_arrow_schema

    node, _ = store_node
    expected = to_arrow_schema(live(spark, node, topics="orders").schema, timezone="UTC")
    assert [(f.name, f.type) for f in expected] == [(f.name, f.type) for f in ARROW]


def test_offset_bounds(spark, store_node):
    node, _ = store_node
    start = json.dumps({"orders": {"0": 10, "1": 290}})
    end = json.dumps({"orders": {"0": 20}})
    df = live(spark, node, topics="orders", startingOffsets=start, endingOffsets=end)
    got = {(r.queue_id, r.queue_offset) for r in df.select("queue_id", "queue_offset").collect()}
    expected = {(0, o) for o in range(10, 20)} | {(1, o) for o in range(290, 300)} | {(q, o) for q in (2, 3) for o in range(300)}
    assert got == expected
    off = offline(spark, node.data_dir, topics="orders", startingOffsets=start, endingOffsets=end)
    assert {(r.queue_id, r.queue_offset) for r in off.select("queue_id", "queue_offset").collect()} == expected
    assert live(spark, node, topics="orders", startingOffsets="latest").count() == 0
    with pytest.raises(Exception) as e:  # Spark wraps the source's error; its kind and the option stay in the text
        live(spark, node, topics="orders", startingOffsets="{oops").count()
    assert "OptionError" in str(e.value) and "startingOffsets" in str(e.value)


def test_timestamp_bounds(spark, store_node):
    node, client = store_node
    before = int(time.time() * 1000)
    time.sleep(0.05)  # store timestamps are milliseconds: make the boundary unambiguous
    fill(client, "timed", 40, queues=2)
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    fill(client, "timed", 60, queues=2, start=40)
    assert live(spark, node, topics="timed", startingTimestamp=str(middle)).count() == 60
    assert live(spark, node, topics="timed", endingTimestamp=str(middle)).count() == 40
    assert live(spark, node, topics="timed", startingTimestamp=str(before), endingTimestamp=str(middle)).count() == 40
    assert offline(spark, node.data_dir, topics="timed", startingTimestamp=str(middle)).count() == 60


def test_fail_on_data_loss_both_ways(spark, tmp_path):
    node = ServerProcess(str(tmp_path / "lossy"), name="lossy", settings=["mappedFileSizeCommitLog=8192", "fileReservedTime=1"])
    node.start()
    try:
        client = Client(node.address)
        fill(client, "lossy", 400, queues=1, chunk=20)  # a batch must fit in one 8 KiB segment
        q = client.route("lossy").queues[0]
        seg_dir = os.path.join(node.data_dir, "commitlog")
        old = time.time() - 7200
        for name in sorted(os.listdir(seg_dir))[:3]:
            os.utime(os.path.join(seg_dir, name), (old, old))
        assert client.admin().manual_delete().deleted_segments == 3
        lo, hi = client.queue_offsets("lossy")[q]
        assert lo > 0 and hi == 400
        from_zero = json.dumps({"lossy": {"0": 0}})
        with pytest.raises(Exception) as e:
            live(spark, node, topics="lossy", startingOffsets=from_zero).count()
        text = str(e.value)
        assert "DataLossError" in text and f"offsets 0..{lo - 1} were deleted" in text and "lossy" in text and "spark-node" not in text
        df = live(spark, node, topics="lossy", startingOffsets=from_zero, failOnDataLoss="false")
        assert df.count() == 400 - lo
    finally:
        node.kill()


def test_streaming_available_now_over_two_batches(spark, store_node, tmp_path):
    node, client = store_node
    fill(client, "stream", 200, queues=2)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    def run() -> None:
        q = (
            spark.readStream.format("msgstore")
            .option("endpoints", node.address)
            .option("topics", "stream")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "100")
            .load()
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        assert q.exception() is None
        return q

    first = run()
    batches = [p for p in first.recentProgress if p["numInputRows"]]
    assert [p["numInputRows"] for p in batches] == [100, 100]  # two micro-batches of maxOffsetsPerTrigger
    assert spark.read.parquet(out).count() == 200
    fill(client, "stream", 50, queues=2, start=200)
    run()
    rows = spark.read.parquet(out)
    assert rows.count() == 250 and rows.select("topic", "queue_id", "queue_offset").distinct().count() == 250


def test_bad_options_are_named(spark, store_node):
    node, _ = store_node
    for options, name in (
        ({"topics": ""}, "topics"),
        ({"topics": "orders", "maxMessagesPerPartition": "0"}, "maxMessagesPerPartition"),
        ({"topics": "orders", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ):
        with pytest.raises(Exception) as e:  # (Spark wraps the source's error)
            live(spark, node, **options).count()
        assert "OptionError" in str(e.value) and f"'{name}'" in str(e.value)
    with pytest.raises(Exception) as e:
        spark.read.format("msgstore").load().count()
    assert "OptionError" in str(e.value) and "endpoints" in str(e.value)


def test_the_stores_own_topics_are_read_only_when_asked(spark, tmp_path):
    """Delayed messages waiting, retries and dead letters live in the store's own topics: an
    offline read without 'topics' leaves them out unless systemTopics=true (or they are named)."""
    from msgstore.store import Message, MessageStore

    root = str(tmp_path / "store")
    store = MessageStore(root, {"mappedFileSizeCommitLog": 1 << 20, "maxHashSlotNum": 1024, "maxIndexNum": 4096}).start()
    for topic in ("plain", "plain", "SCHEDULE_TOPIC_XXXX", "%DLQ%g", "rmq_sys_wheel_timer"):
        assert store.put_messages(topic, 0, [Message(topic, b"x")]).ok
    store.shutdown()
    assert sorted(r.topic for r in offline(spark, root).select("topic").collect()) == ["plain", "plain"]
    every = offline(spark, root, systemTopics="true")
    assert sorted(r.topic for r in every.select("topic").collect()) == [
        "%DLQ%g",
        "SCHEDULE_TOPIC_XXXX",
        "plain",
        "plain",
        "rmq_sys_wheel_timer",
    ]
    assert offline(spark, root, topics="%DLQ%g").count() == 1


def test_messages_sent_with_rocketmqs_official_client_are_read_by_the_source(spark, tmp_path):
    """Issue 23: what a RocketMQ 5 application writes (its message id, tag, keys, properties, a
    FIFO message group) is in the DataFrame as RocketMQ stores it."""
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    from tests.rocketmq.conftest import startup

    node = ServerProcess(str(tmp_path / "data"), name="rmq-node").start()
    try:
        producer = Producer(ClientConfiguration(node.address, Credentials()), ("shipments",))
        startup(producer)
        sent = {}
        try:
            for i in range(4):
                m = Message()
                m.topic, m.body, m.tag, m.keys = "shipments", b"parcel-%d" % i, "eu", f"parcel-{i}"
                m.add_property("carrier", "dhl")
                if i % 2:
                    m.message_group = "truck-1"
                sent[producer.send(m).message_id] = i
        finally:
            producer.shutdown()
        with Client(node.address, timeout=10) as c:  # dispatched before Spark reads
            dispatched(c)
        rows = live(spark, node, topics="shipments").select("body", "keys", "tags", "properties").collect()
    finally:
        node.kill()
    assert sorted(r.body for r in rows) == [b"parcel-%d" % i for i in range(4)]
    for r in rows:
        props = dict(r.properties)
        i = sent[props["UNIQ_KEY"]]  # the official client's message id
        assert r.body == b"parcel-%d" % i and r.tags == "eu" and f"parcel-{i}" in r.keys and props["carrier"] == "dhl"
        assert props.get("__SHARDINGKEY") == ("truck-1" if i % 2 else None)


def test_the_live_input_reads_through_one_address(spark, tmp_path):
    """Issue 31: a store reached only through an access point (a port-forward, a Service): the
    nodes advertise addresses Spark cannot reach, and every partition reads through the one it can."""
    from tests.support.servers import free_port
    from tests.support.tcp_forwarder import TcpForwarder

    node = ServerProcess(str(tmp_path / "data"), name="behind", args=["--advertise", f"127.0.0.1:{free_port()}", "--access-point"])
    node.start()
    fwd = TcpForwarder(node.address)
    try:
        with Client(fwd.address) as c:
            fill(c, "orders", 400)
        df = spark.read.format("msgstore").option("endpoints", fwd.address).option("topics", "orders").load()
        assert df.count() == 400
        assert sorted(r.body[:12] for r in df.select("body").collect()) == sorted(b"body-%06d-" % i for i in range(400))
    finally:
        fwd.close()
        node.kill()


def test_the_live_input_reads_as_a_user_and_is_held_to_its_entries(spark, tmp_path):
    """Issue 32: a store that checks who calls; the reader signs as a user allowed to subscribe
    to one topic, and a user without that permission gets the store's refusal, naming it."""
    (tmp_path / "admin").write_text("spark-admin-token")
    node = ServerProcess(
        str(tmp_path / "data"), name="secured", settings=["authorizationEnabled=true"], args=["--admin-token-file", str(tmp_path / "admin")]
    )
    node.start()
    try:
        with Client(node.address, admin_token="spark-admin-token") as c:
            fill(c, "orders", 200)
            c.put_user("analyst", "analyst-secret", entries=[{"resource": "topic:orders", "actions": "sub"}])
            c.put_user("stranger", "stranger-secret")
        reader = spark.read.format("msgstore").option("endpoints", node.address).option("topics", "orders")
        assert reader.option("accessKey", "analyst").option("secretKey", "analyst-secret").load().count() == 200
        with pytest.raises(Exception) as e:
            reader.option("accessKey", "stranger").option("secretKey", "stranger-secret").load().count()
        assert "user stranger may not" in str(e.value) and "topic:orders" in str(e.value)
    finally:
        node.kill()


# ---------------------------------------------------------------------- a data engineer's trial


def test_offline_offsets_mean_what_they_mean_live(spark, store_node):
    """Offline, a queue named as node/queue (the README's form), latest as a start, earliest
    as an end, and -1/-2 in the JSON were ignored: the read returned every message."""
    node, _ = store_node
    for options in (
        {"startingOffsets": json.dumps({"orders": {"spark-node/2": 290}})},
        {"startingOffsets": "latest"},
        {"endingOffsets": "earliest"},
        {"startingOffsets": json.dumps({"orders": {"1": -1}}), "endingOffsets": json.dumps({"orders": {"2": -2}})},
    ):
        got = {(r.queue_id, r.queue_offset) for r in offline(spark, node.data_dir, topics="orders", **options).collect()}
        want = {(r.queue_id, r.queue_offset) for r in live(spark, node, topics="orders", **options).collect()}
        assert got == want, options


def test_a_typo_in_an_option_or_a_topic_is_an_error(spark, store_node):
    """An unknown option (startingOffset) was ignored and every message read; a topic no node
    has read nothing, and an archive of it said "nothing new"."""
    node, _ = store_node
    for options, named in (
        ({"topics": "orders", "startingOffset": "latest"}, "did you mean startingOffsets?"),
        ({"topics": "oders"}, "no topic oders"),
    ):
        with pytest.raises(Exception) as e:
            live(spark, node, **options).count()
        assert "OptionError" in str(e.value) and named in str(e.value), str(e.value)[-400:]
