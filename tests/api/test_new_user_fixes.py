"""What a new user's trial of the CLI, the client and start-up found (issue 24), through real
server processes and the ``msgstore`` command: each test failed before its fix."""

from __future__ import annotations

import collections
import json
import os
import socket
import subprocess

import pytest

from msgstore.client import Client, Consumer, OutMessage, Producer
from tests.support.servers import ServerProcess, wait_until

from .test_user_trial_fixes import cli


def one_line_error(out: subprocess.CompletedProcess) -> str:
    err = out.stderr.decode()
    assert out.returncode == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


# ---------------------------------------------------------------------------------- 1, 2


@pytest.mark.parametrize(
    "args, flag",
    [
        (["serve", "--port", "70000"], "--port"),
        (["serve", "--port", "-5"], "--port"),
        (["serve", "--metrics-port", "65536"], "--metrics-port"),
        (["serve", "--replica-of", "127.0.0.1:99999"], "--replica-of"),
        (["serve", "--peers", "127.0.0.1:10911,127.0.0.1:0"], "--peers"),
        (["send", "orders", "x", "--server", "127.0.0.1:99999"], "--server"),
        (["topics", "list", "--server", "127.0.0.1"], "--server"),
        (["admin", "role", "--replica-of", "m0:123456", "--server", "127.0.0.1:1"], "--replica-of"),
    ],
)
def test_an_out_of_range_port_is_refused_in_one_line_naming_the_flag(tmp_path, args, flag):
    """``--port 70000`` ended in an OverflowError traceback; ``--server 127.0.0.1:99999``
    dialed port 34463 (99999 mod 65536): another server, maybe."""
    err = one_line_error(cli(*args, "--data-dir", str(tmp_path / "d")) if args[0] == "serve" else cli(*args))
    assert f"argument {flag}:" in err and ("65535" in err or "host:port" in err), err
    assert not os.path.exists(tmp_path / "d")  # refused before anything was created


def test_the_client_refuses_an_address_it_cannot_dial():
    for bad in ("127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1", "127.0.0.1:http"):
        with pytest.raises(ValueError, match="port|host:port"):
            Client(bad)
    Client("dns:///localhost:10911").close()  # gRPC target URIs are left to gRPC


# ---------------------------------------------------------------------------------- 3


def test_pull_says_its_default_limit_and_tells_a_script_it_stopped(server):
    assert "default 100" in cli("pull", "--help").stdout.decode()
    c = Client(server.address)
    c.create_topic("many", 2)
    assert all(r.ok for r in c.send_batch("many", [OutMessage(b"m%d" % i) for i in range(150)]))
    out = cli("--json", "pull", "many", "--server", server.address)
    assert out.returncode == 0
    assert len([json.loads(line) for line in out.stdout.decode().splitlines()]) == 100  # stdout: messages only
    notice = json.loads(out.stderr.decode())
    assert notice["notice"] == "max" and notice["max"] == 100 and "more may follow" in notice["message"]
    assert "stopped after 100 messages" in cli("pull", "many", "--server", server.address).stderr.decode()


# ---------------------------------------------------------------------------------- 4


def test_query_says_what_pull_says_and_json_is_always_a_document(server):
    c = Client(server.address)
    c.create_topic("orders", 2)
    c.send("orders", b"found", key="k-1")
    s = ["--server", server.address]
    hit = cli("query", "orders", "--key", "k-1", "--json", *s)
    assert hit.returncode == 0 and [r["body"] for r in json.loads(hit.stdout)] == ["found"]
    miss = cli("query", "orders", "--key", "nope", "--json", *s)
    assert miss.returncode == 1 and json.loads(miss.stdout) == []
    assert json.loads(miss.stderr)["notice"] == "no messages"
    human = cli("query", "orders", "--key", "nope", *s)
    assert human.returncode == 1 and human.stdout == b"" and "no messages with key 'nope'" in human.stderr.decode()
    missing = cli("query", "nosuch", "--key", "k-1", "--json", *s)
    assert missing.returncode == 1 and json.loads(missing.stdout) == []
    assert "no topic 'nosuch' on any node" in missing.stderr.decode()
    assert "no topic 'nosuch' on any node" in cli("query", "nosuch", "--key", "k", *s).stderr.decode()


# ---------------------------------------------------------------------------------- 5, 6


def test_a_second_server_on_a_directory_in_use_says_whose_lock_it_waits_for_and_does_not_listen(tmp_path):
    first = ServerProcess(str(tmp_path / "d"), name="first").start()
    second = ServerProcess(str(tmp_path / "d"), name="second", args=["--lock-wait", "60"])
    try:
        second.start(wait=False)
        wait_until(lambda: "waiting for the lock" in second.log(), timeout=15, what="the waiting line")  # not after --lock-wait
        assert f"held by pid {first.proc.pid}" in second.log()
        assert "listening" not in second.log()
        with socket.socket() as probe:  # it answers on no port it cannot back
            assert probe.connect_ex(("127.0.0.1", second.port)) != 0
        first.kill()  # the lock is let go: the second takes the directory over
        second.wait_serving()
        with Client(second.address) as c:
            assert c.send("t", b"after").ok
    finally:
        first.kill()
        second.kill()


def test_a_data_dir_that_is_a_file_or_read_only_is_named_in_one_line(tmp_path):
    (tmp_path / "file").write_bytes(b"")
    port = ["--port", "0", "--metrics-port", "-1"]
    out = cli("serve", "--data-dir", str(tmp_path / "file"), *port)
    assert out.returncode == 2 and out.stderr.decode().strip() == f"error: data directory {tmp_path / 'file'} is not a directory"
    if os.geteuid() != 0:
        pytest.skip("a read-only file system needs a mount (root)")
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(ro)], check=True)
    try:
        out = cli("serve", "--data-dir", str(ro / "store"), *port)
        assert (
            out.returncode == 2
            and out.stderr.decode().strip() == f"error: data directory {ro / 'store'} is read-only (its file system is mounted read-only)"
        )
    finally:
        subprocess.run(["umount", str(ro)], check=True)


def test_with_port_0_the_log_names_the_port_bound(tmp_path):
    proc = ServerProcess(str(tmp_path / "d"), name="anyport")
    proc.port = 0
    proc.start(wait=False)
    try:
        wait_until(lambda: '"listening"' in proc.log(), timeout=20, what="listening")
        line = next(json.loads(x) for x in proc.log().splitlines() if '"listening"' in x)
        host, port = line["address"].rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        proc.port = int(port)
        proc.wait_serving()
        with Client(line["address"]) as c:
            assert c.send("t", b"x").ok
    finally:
        proc.kill()


# ---------------------------------------------------------------------------------- 7


def test_groups_shows_a_committed_offset_for_every_queue_a_member_held_before_any_commit(server):
    c = Client(server.address)
    c.create_topic("jobs", 8)
    c.send_batch("jobs", [OutMessage(b"x")], queue=c.route("jobs", refresh=True).queues[3])
    a = Consumer(Client(server.address), "G", "jobs")
    b = None
    try:
        wait_until(lambda: (a.poll(timeout=0.2), len(a.assignment()) == 8)[1], timeout=30, what="a holds every queue")
        b = Consumer(Client(server.address), "G", "jobs")  # a lets half go (committing them), b takes them
        wait_until(
            lambda: (a.poll(timeout=0.1), b.poll(timeout=0.1), len(a.assignment()) == len(b.assignment()) == 4)[2],
            timeout=40,
            what="the split",
        )
        report = json.loads(cli("groups", "G", "--json", "--server", server.address).stdout)
        committed = {q["queue"]: q["committed"] for q in report[0]["queues"]}
        assert len(committed) == 8 and all(v >= 0 for v in committed.values()), committed  # no "-" beside "0"
        human = [
            line for line in cli("groups", "G", "--server", server.address).stdout.decode().splitlines()[1:] if not line.startswith("G: ")
        ]
        assert len(human) == 8 and not [line for line in human if line.split()[6] == "-"], human
    finally:
        a.close()
        if b is not None:
            b.close()


# ---------------------------------------------------------------------------------- 8


def test_a_producer_spreads_keyless_messages_over_every_queue_of_every_node(cluster):
    """The README's loop put 10,000 keyless messages on 2 of 8 queues (2,388 and 7,612)."""
    c = Client(cluster[0].address)
    c.create_topic("spread", 4)
    queues = c.route("spread", refresh=True).queues
    assert len(queues) == 12
    with Producer(c, linger_ms=5, max_batch=200) as producer:
        futures = [producer.send("spread", b"m%d" % i) for i in range(12_000)]
    per_queue = collections.Counter(f.result().queue for f in futures)
    assert set(per_queue) == {(q.node, q.queue_id) for q in queues}, per_queue  # every (node, queue)
    assert max(per_queue.values()) <= 3 * min(per_queue.values()), per_queue  # evenly, within a batch or two
    nodes = collections.Counter()
    for (node, _), n in per_queue.items():
        nodes[node] += n
    assert min(nodes.values()) >= 2_000, nodes


def test_the_readme_producer_loop_uses_every_queue(server):
    c = Client(server.address)
    c.create_topic("orders", 8)
    with Producer(c, linger_ms=5) as producer:
        futures = [producer.send("orders", b"m%d" % i) for i in range(10_000)]
    per_queue = collections.Counter(f.result().queue for f in futures)
    assert len(per_queue) == 8 and max(per_queue.values()) <= 2_000, per_queue
