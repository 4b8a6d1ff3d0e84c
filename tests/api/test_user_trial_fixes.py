"""What a trial of msgstore as a new user found (issue 15), through the real server and the
``msgstore`` command: each test failed before its fix."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import grpc
import pytest

from msgstore.client import Client, Consumer, OutMessage, StoreError
from msgstore.client.routing import QueueRef
from tests.support.servers import ROOT, ServerProcess, free_port, wait_until


def cli(*args: str, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server"))
    return subprocess.run([sys.executable, "-m", "msgstore.cli", *args], input=stdin, capture_output=True, env=env, timeout=timeout)


def fill_queues(c: Client, topic: str, per_queue: int, queues: list[QueueRef]) -> None:
    for q in queues:
        assert all(
            r.ok for r in c.send_batch(topic, [OutMessage(f"{q.node}-{q.queue_id}-{i}".encode()) for i in range(per_queue)], queue=q)
        )


# ---------------------------------------------------------------------------------- 1


def test_a_group_pull_commits_exactly_what_it_printed(server):
    """Pulled with --max, the rest of the batch was committed too: the next run skipped it."""
    c = Client(server.address)
    c.create_topic("jobs", 4)
    fill_queues(c, "jobs", 10, c.route("jobs", refresh=True).queues)
    seen = []
    for _ in range(5):
        out = cli("--json", "pull", "jobs", "--group", "workers", "--max", "10", "--server", server.address)
        assert out.returncode == 0, out.stderr
        seen += [json.loads(line)["body"] for line in out.stdout.decode().splitlines()]
    assert sorted(seen) == sorted(f"node-0-{q}-{i}" for q in range(4) for i in range(10))
    assert len(seen) == len(set(seen)) == 40  # every message once, none skipped, none twice
    assert "stopped after 10 messages" in cli("pull", "jobs", "--max", "10", "--server", server.address).stderr.decode()


# ---------------------------------------------------------------------------------- 2


def test_a_key_keeps_its_queue_while_another_node_is_down(cluster):
    """Keys were hashed over the usable queues: a node going down moved most keys, and keys of
    the down node landed on two queues."""
    c = Client(cluster[0].address, timeout=3)
    keys = [f"customer-{i}" for i in range(30)]
    before = {k: c.send("orders", b"a", key=k).queue for k in keys}
    cluster[2].kill()
    c = Client(cluster[0].address, timeout=3)  # a fresh route, as a restarted producer would have
    down = [k for k in keys if before[k][0] == "store-2"]
    assert down and len(down) < len(keys)
    for k in keys:
        if k in down:
            with pytest.raises(StoreError) as e:
                c.send("orders", b"b", key=k)
            assert e.value.code == grpc.StatusCode.UNAVAILABLE and "store-2" in str(e.value) and "order" in str(e.value)
        else:
            assert c.send("orders", b"b", key=k).queue == before[k]  # unmoved
    moved = c.send("orders", b"c", key=down[0], reorder=True)  # allowed to break the order
    assert moved.ok and moved.node != "store-2"


# ---------------------------------------------------------------------------------- 3, 14


def test_admin_status_lists_a_down_node_and_the_others(cluster):
    Client(cluster[0].address).route("", refresh=True)  # the nodes have met (names are learnt from answers)
    cluster[1].kill()
    out = cli("admin", "status", "--server", cluster[0].address, "--timeout", "3")
    table = out.stdout.decode()
    assert out.returncode == 1, out.stderr  # partial: said by the exit code
    lines = {line.split()[0]: line for line in table.splitlines()[1:]}
    assert "running" in lines["store-0"] and "running" in lines["store-2"] and "down" in lines["store-1"]
    rows = json.loads(cli("--json", "admin", "status", "--server", cluster[0].address, "--timeout", "3").stdout)
    assert {r["node"]: r["state"] for r in rows} == {"store-0": "running", "store-1": "down", "store-2": "running"}


def test_admin_commands_act_on_every_node_and_name_each(cluster):
    s = ["--server", cluster[1].address]
    out = cli("admin", "config", "set", "fileReservedTime=48", *s)
    assert out.returncode == 0 and [line.split(":")[0] for line in out.stdout.decode().splitlines()] == ["store-0", "store-1", "store-2"]
    assert all(Client(n.address).admin().config()["fileReservedTime"] == "48" for n in cluster)
    one = json.loads(cli("--json", "admin", "config", "set", "fileReservedTime=24", "--node", "store-2", *s).stdout)
    assert one["node"] == "store-2" and one["applied"] == {"fileReservedTime": 24}
    assert [Client(n.address).admin().config()["fileReservedTime"] for n in cluster] == ["48", "48", "24"]
    table = cli("admin", "config", "get", *s).stdout.decode().splitlines()
    assert table[0].split() == ["KEY", "STORE-0", "STORE-1", "STORE-2"]
    assert next(line.split() for line in table if line.startswith("fileReservedTime ")) == ["fileReservedTime", "48", "48", "24"]
    deleted = json.loads(cli("--json", "admin", "delete-expired", *s).stdout)
    assert [d["node"] for d in deleted] == ["store-0", "store-1", "store-2"]


def test_reads_and_topic_commands_say_what_they_skipped(cluster):
    c = Client(cluster[0].address, timeout=3)
    c.send("seen", b"x", key="k")
    c.route("", refresh=True)  # the nodes have met (names are learnt from answers)
    cluster[2].kill()
    s = ["--server", cluster[0].address, "--timeout", "3"]
    for args in (("query", "seen", "--key", "k"), ("topics", "list"), ("topics", "create", "half"), ("pull", "seen")):
        out = cli(*args, *s)
        assert out.returncode == 1 and "skipped store-2" in out.stderr.decode(), (args, out.stderr)
    said = [json.loads(line) for line in cli("--json", "pull", "seen", *s).stderr.decode().splitlines()]  # (JSON lines only)
    assert any(n.get("notice") == "skipped" and n["node"].startswith("store-2") for n in said), said


def test_consumer_commit_goes_on_past_a_down_node(cluster):
    c = Client(cluster[0].address, timeout=3)
    c.create_topic("work", 2)
    fill_queues(c, "work", 3, c.route("work", refresh=True).queues)
    consumer = Consumer(c, "g", "work")
    while len(consumer.poll(timeout=0.5)) and sum(consumer.positions.values()) < 18:
        pass
    cluster[1].kill()
    with pytest.raises(StoreError) as e:
        consumer.commit()
    assert e.value.code == grpc.StatusCode.UNAVAILABLE and "store-1/0" in e.value.details and "store-1/1" in e.value.details, e.value
    for q in consumer.positions:
        if q.node != "store-1":
            assert c.committed("g", "work", q) == 3  # committed despite the failure on store-1


def test_a_consumer_finds_a_returning_node_within_seconds(cluster):
    c = Client(cluster[0].address, timeout=3)
    c.create_topic("back", 1)
    cluster[2].kill()
    consumer = Consumer(c, None, "back", long_poll_ms=200)
    assert consumer.poll(timeout=0.2) == []
    cluster[2].start()
    c2 = Client(cluster[2].address)
    c2.create_topic("back", 1)
    q = next(q for q in c2.route("back", refresh=True).queues if q.node == "store-2")
    c2.send_batch("back", [OutMessage(b"from the returning node")], queue=q)
    got = wait_until(lambda: consumer.poll(timeout=0.2), timeout=8, what="the returning node's message")
    assert [r.body for r in got] == [b"from the returning node"]


# ---------------------------------------------------------------------------------- 4


def test_the_admin_api_refuses_a_segment_size_the_store_cannot_open(server):
    Client(server.address).send("x", b"y")
    out = cli("admin", "config", "set", "mappedFileSizeCommitLog=524288", "--server", server.address)
    assert out.returncode == 1 and "INVALID_ARGUMENT" in out.stderr.decode() and "cannot open" in out.stderr.decode()


# ---------------------------------------------------------------------------------- 5


def test_nodes_with_one_name_are_refused_and_default_names_differ(tmp_path):
    ports = [free_port(), free_port()]
    same = [
        ServerProcess(str(tmp_path / f"s{i}"), port=p, name="same", args=["--peers", f"127.0.0.1:{ports[1 - i]}"])
        for i, p in enumerate(ports)
    ]
    try:
        for n in same:
            n.start()
        with pytest.raises(StoreError) as e:
            Client(same[0].address).route("t")
        assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION and "--node-name" in e.value.details
        assert same[0].address in e.value.details and same[1].address in e.value.details
    finally:
        for n in same:
            n.kill()
    ports = [free_port(), free_port()]
    default = [
        ServerProcess(str(tmp_path / f"d{i}"), port=p, name_flag=False, args=["--peers", f"127.0.0.1:{ports[1 - i]}"])
        for i, p in enumerate(ports)
    ]
    try:
        for n in default:
            n.start()
        names = [n.name for n in Client(default[0].address).route("t", refresh=True).nodes]
        assert sorted(names) == sorted(f"{socket.gethostname()}-{p}" for p in ports)
    finally:
        for n in default:
            n.kill()


# ---------------------------------------------------------------------------------- 6


def test_pull_says_what_it_corrected_and_fails_on_what_does_not_exist(tmp_path):
    node = ServerProcess(
        str(tmp_path / "n"),
        settings=[
            "mappedFileSizeCommitLog=4096",
            "fileReservedTime=0",
            "deleteWhen=0;1;2;3;4;5;6;7;8;9;10;11;12;13;14;15;16;17;18;19;20;21;22;23",
        ],
    ).start()
    try:
        c = Client(node.address)
        c.create_topic("t", 1)
        q = c.route("t", refresh=True).queues[0]
        for _ in range(20):
            assert c.send_batch("t", [OutMessage(b"z" * 500)], queue=q)[0].ok
        s = ["--server", node.address]
        bad = cli("pull", "t", "--from", "-5", *s)
        assert bad.returncode == 2 and "--from -5" in bad.stderr.decode()
        past = cli("pull", "t", "--from", "999999", *s)
        assert past.returncode == 0 and "past the end (20)" in past.stderr.decode()
        missing = cli("pull", "nope", *s)
        assert missing.returncode == 1 and "no topic 'nope'" in missing.stderr.decode()
        assert "no queue 999" in cli("pull", "t", "--queue", "999", *s).stderr.decode()
        node_out = cli("pull", "t", "--node", "nosuchnode", *s)
        assert node_out.returncode == 2 and "no node 'nosuchnode'" in node_out.stderr.decode()
        c.admin().manual_delete()  # everything expired: retention deletes all but the last segment
        lo = wait_until(lambda: (lambda x: x if x > 0 else None)(c.queue_offsets("t")[q][0]), 10, what="retention")
        gone = cli("--json", "pull", "t", "--from", "0", *s)
        assert f"offsets below {lo} were deleted by retention; reading from {lo}" in gone.stderr.decode()
        assert json.loads(gone.stdout.decode().splitlines()[0])["offset"] == lo
        # offline, inspect agrees with the server on the queue's minimum (it read file names)
        node.terminate()
        info = json.loads(cli("--json", "inspect", str(tmp_path / "n"), "--set", "mappedFileSizeCommitLog=4096").stdout)
        assert [x["min_offset"] for x in info["consume_queues"] if x["topic"] == "t"] == [lo]
    finally:
        node.kill()


# ---------------------------------------------------------------------------------- 8


@pytest.mark.parametrize("flag", ["--port", "--metrics-port"])
def test_a_busy_port_is_one_line_naming_it(tmp_path, flag):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        other = free_port()
        ports = {"--port": busy, "--metrics-port": other} if flag == "--port" else {"--port": other, "--metrics-port": busy}
        out = cli("serve", "--data-dir", str(tmp_path / "d"), *[str(x) for kv in ports.items() for x in kv])
    err = out.stderr.decode().strip().splitlines()
    assert out.returncode == 2 and len([line for line in err if "error" in line.lower()]) == 1, err
    assert str(busy) in err[-1] and flag in err[-1] and "Traceback" not in out.stderr.decode()


# ---------------------------------------------------------------------------------- 9, 15k


def test_bad_send_arguments_are_invalid_argument_naming_the_field(server):
    c = Client(server.address)
    with pytest.raises(StoreError) as e:
        c.send("", b"x")
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and e.value.details.startswith("topic:")
    with pytest.raises(StoreError) as e:
        c.send("t", b"x", key="bad\udcff")  # what a shell gives for a non-UTF-8 byte
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "keys[0]" in e.value.details
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server"))
    raw = subprocess.run(
        [sys.executable, "-m", "msgstore.cli", "send", "t", "x", "--key", b"bad\xff", "--server", server.address],
        capture_output=True,
        env=env,
    )
    assert raw.returncode == 1 and b"keys[0]: not valid UTF-8" in raw.stderr and b"Traceback" not in raw.stderr


# ---------------------------------------------------------------------------------- 10


def test_a_commit_survives_a_sigkill_right_after_it(server):
    c = Client(server.address)
    c.create_topic("t", 1)
    q = c.route("t", refresh=True).queues[0]
    c.send_batch("t", [OutMessage(b"m")] * 9, queue=q)
    c.commit("g", "t", q, 7)
    server.kill()  # at once: the 5 s persister never ran
    server.start()
    assert Client(server.address).committed("g", "t", q) == 7


# ---------------------------------------------------------------------------------- 11


def test_a_visible_send_can_be_pulled_and_queried_at_once(server):
    c = Client(server.address)
    c.create_topic("rw", 2)
    for i in range(300):
        r = c.send("rw", b"v%d" % i, key=f"k{i}", visible=True)
        q = next(x for x in c.route("rw").queues if x.queue_id == r.queue_id)
        got = c.pull("rw", q, r.queue_offset, max_messages=1)
        assert got.messages and got.messages[0].body == b"v%d" % i, i
        assert [m.body for _, m in c.query("rw", f"k{i}")] == [b"v%d" % i], i
    # the command line waits by default: send, then query, finds the message
    out = cli("send", "rw", "cli", "--key", "cli-key", "--server", server.address)
    assert out.returncode == 0 and cli("query", "rw", "--key", "cli-key", "--server", server.address).returncode == 0


# ---------------------------------------------------------------------------------- 15


def test_the_command_line_small_things(server, tmp_path):
    s = ["--server", server.address]
    empty = cli("send", "t", *s, stdin=b"")
    assert empty.returncode == 2 and "empty" in empty.stderr.decode()
    assert cli("send", "t", "--allow-empty", *s, stdin=b"").returncode == 0
    prop = cli("send", "t", "x", "--property", "novalue", *s)
    assert prop.returncode == 2 and "expected NAME=VALUE" in prop.stderr.decode() and "Traceback" not in prop.stderr.decode()
    assert json.loads(cli("route", "--json", *s).stdout) == [{"node": "node-0", "address": server.address, "ready": True, "queues": "-"}]
    cli("send", "t", "b" * 300, *s)
    table = cli("pull", "t", *s).stdout.decode().splitlines()
    # (the sends' queues are the round robin's, which starts at random: the rows' order is the queues')
    assert all(len(line) < 220 for line in table) and any(line.rstrip().endswith("…") for line in table)  # cut in the table
    assert "b" * 300 in [json.loads(line)["body"] for line in cli("--json", "pull", "t", *s).stdout.decode().splitlines()]  # whole in JSON
    follower = subprocess.Popen(
        [sys.executable, "-m", "msgstore.cli", "pull", "t", "-f", *s],
        stdout=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server")),
    )
    try:
        assert follower.stdout.readline().decode() == table[0] + "\n"  # the same header and columns as pull
    finally:
        follower.kill()
        follower.wait()
    warned = cli("fsck", server.data_dir)
    assert "a running store (pid" in warned.stderr.decode()


def test_fsck_notes_missing_index_files_instead_of_calling_them_damage(tmp_path):
    node = ServerProcess(str(tmp_path / "n")).start()
    Client(node.address).send("t", b"x", key="k")
    node.terminate()
    for name in os.listdir(tmp_path / "n" / "index"):
        os.unlink(tmp_path / "n" / "index" / name)
    out = cli(
        "--json",
        "fsck",
        str(tmp_path / "n"),
        "--set",
        "mappedFileSizeCommitLog=262144",
        "--set",
        "maxHashSlotNum=4096",
        "--set",
        "maxIndexNum=16384",
    )
    rep = json.loads(out.stdout)
    assert out.returncode == 0 and rep["ok"] and rep["problems"] == [] and "the next start rebuilds them" in rep["notes"][0]


def test_a_start_up_setting_that_overrides_a_persisted_one_is_logged(tmp_path):
    node = ServerProcess(str(tmp_path / "n")).start()
    Client(node.address).admin().update_config({"fileReservedTime": 24})
    node.terminate()
    node.settings.append("fileReservedTime=48")
    node.start()
    assert "fileReservedTime=48 overrides fileReservedTime=24 persisted by `admin config set`" in node.log()
    assert Client(node.address).admin().config()["fileReservedTime"] == "48"
    node.kill()


def test_operator_help_prints_help():
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "msgstore-operator"), "--help"], capture_output=True, timeout=30)
    assert out.returncode == 0 and b"usage: msgstore-operator" in out.stdout and b"WATCH_NAMESPACE" in out.stdout
