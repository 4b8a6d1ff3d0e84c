"""One SparkSession for the whole run (local[2]); real store processes feed it."""

import os

import pytest

from msgstore.client import Client, OutMessage
from tests.support.servers import ServerProcess, wait_until


@pytest.fixture(scope="session")
def spark():
    os.environ["TZ"] = "UTC"
    from msgstore.pipeline.session import spark_session

    session = spark_session(
        "local[2]", app="msgstore-tests", test_jvm=True, extra={"spark.ui.showConsoleProgress": "false", "spark.driver.memory": "1g"}
    )
    yield session
    session.stop()


def fill(client: Client, topic: str, count: int, queues: int = 4, start: int = 0, chunk: int = 500) -> None:
    """``count`` messages spread over ``queues`` queues, each with tags and a key; returns once
    the node has dispatched them (an ack means stored: its dispatch may come a moment later,
    and Spark reads the consume queues)."""
    route = client.route(topic)
    per_queue: dict[int, list[OutMessage]] = {}
    for i in range(start, start + count):
        per_queue.setdefault(i % queues, []).append(
            OutMessage(b"body-%06d-" % i + b"x" * (i % 50), key=f"key-{i}", tags=f"tag{i % 3}", properties={"n": str(i)})
        )
    for qid, msgs in per_queue.items():
        q = next(x for x in route.queues if x.queue_id == qid)
        for k in range(0, len(msgs), chunk):
            assert all(r.ok for r in client.send_batch(topic, msgs[k : k + chunk], queue=q))
    dispatched(client)


def dispatched(client: Client) -> None:
    """Until the node the client was given has nothing left to dispatch."""
    wait_until(lambda: client.admin().status_pb().dispatch_behind_bytes == 0, timeout=10, what="the node to dispatch what it stored")


@pytest.fixture(scope="module")
def store_node(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipeline")
    node = ServerProcess(str(root / "data"), name="spark-node")
    node.start()
    client = Client(node.address)
    fill(client, "orders", 1200)
    fill(client, "payments", 300, queues=2)
    yield node, client
    client.close()
    node.kill()
