"""Thousands of queues on one real server process with its descriptor limit lowered (issue 21):
before, each queue held two descriptors and the node refused every write once the limit was
reached; now queues hold none, a new topic is refused with RESOURCE_EXHAUSTED naming the limit
when the process is near it, and restarts after SIGTERM and SIGKILL read every message back."""

from __future__ import annotations

import concurrent.futures
import os
import signal

import grpc
import pytest

from msgstore.client import Client, OutMessage, StoreError
from msgstore.client.routing import QueueRef
from tests.support.servers import ServerProcess, wait_until

TOPICS, QUEUES = 400, 8  # 3,200 queues against a limit of 128 descriptors
NOFILE = 128


def open_fds(proc: ServerProcess) -> int:
    return len(os.listdir(f"/proc/{proc.proc.pid}/fd"))


def fill(address: str) -> dict[tuple[str, int], bytes]:
    sent: dict[tuple[str, int], bytes] = {}
    with Client(address, timeout=30) as c:
        node = c.route("", refresh=True).nodes[0].name

        def one(t: int) -> None:
            topic = f"many-{t:04d}"
            c.create_topic(topic, QUEUES)
            for q in range(QUEUES):
                body = b"%s/%d" % (topic.encode(), q)
                assert c.send_batch(topic, [OutMessage(body)], queue=QueueRef(node, address, q))[0].ok
                sent[(topic, q)] = body

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(one, range(TOPICS)))
    return sent


def read_back(address: str, sent: dict[tuple[str, int], bytes]) -> None:
    with Client(address, timeout=30) as c:
        node = c.route("", refresh=True).nodes[0].name
        for (topic, q), body in sent.items():
            got = c.pull(topic, QueueRef(node, address, q), 0, max_messages=4)
            assert [m.body for m in got.messages] == [body], (topic, q)


@pytest.fixture
def node(tmp_path):
    proc = ServerProcess(
        str(tmp_path / "node"), name="many", prefix=["prlimit", f"--nofile={NOFILE}:{NOFILE}"], settings=["maxOpenQueueFiles=64"]
    )
    proc.start()
    yield proc
    proc.kill()


def test_thousands_of_queues_under_a_low_descriptor_limit_survive_both_restarts(node):
    sent = fill(node.address)
    assert open_fds(node) < NOFILE * 0.9
    read_back(node.address, sent)

    assert node.terminate() == 0
    node.start()
    assert open_fds(node) < 64  # no queue file opened to start
    read_back(node.address, sent)
    with Client(node.address) as c:
        assert c.admin().status()["recovery"]["mode"] == "normal"

    os.kill(node.proc.pid, signal.SIGKILL)
    node.proc.wait()
    node.start()
    with Client(node.address) as c:
        assert c.admin().status()["recovery"]["mode"] == "abnormal"
    read_back(node.address, sent)


def test_a_new_topic_is_refused_near_the_descriptor_limit_and_every_queue_still_takes_writes(node):
    sent = fill(node.address)
    # connections take the rest of the descriptors: each channel is a connection of its own
    hogs = []
    try:
        while open_fds(node) < NOFILE * 0.92:
            ch = grpc.insecure_channel(node.address, options=[("grpc.use_local_subchannel_pool", 1)])
            grpc.channel_ready_future(ch).result(timeout=10)
            hogs.append(ch)
            assert len(hogs) < NOFILE
        with Client(node.address, timeout=10) as c:
            with pytest.raises(StoreError) as e:
                c.create_topic("one-too-many", QUEUES)
            assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "open files" in str(e.value), e.value
            with pytest.raises(StoreError) as e:  # auto-creation on a send, the same
                c.send("auto-created", b"x")
            assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "RLIMIT_NOFILE" in str(e.value), e.value
            node_name = c.route("", refresh=True).nodes[0].name
            for (topic, q), body in list(sent.items())[::7]:  # existing queues take writes (and reads) all along
                assert c.send_batch(topic, [OutMessage(body + b"+")], queue=QueueRef(node_name, node.address, q))[0].ok
            first = QueueRef(node_name, node.address, 0)
            assert c.send_batch("many-0000", [OutMessage(b"visible")], queue=first, visible=True)[0].ok
            got = [m.body for m in c.pull("many-0000", first, 0, max_messages=4).messages]
            assert got[0] == b"many-0000/0" and got[-1] == b"visible"
    finally:
        for ch in hogs:
            ch.close()
    with Client(node.address, timeout=10) as c:  # the limit no longer near: creation works again
        wait_until(lambda: open_fds(node) < NOFILE * 0.8, what="the connections closed")
        assert c.create_topic("one-too-many", QUEUES)
