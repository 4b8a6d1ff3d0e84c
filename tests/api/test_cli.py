"""The ``msgstore`` command against a real server, and offline on a directory."""

import json
import os
import re
import subprocess
import sys
import time

import pytest

from tests.support.servers import ROOT


def run(*args, stdin: bytes | None = None, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server"))
    proc = subprocess.run(
        [sys.executable, "-m", "msgstore.cli", *args], input=stdin, capture_output=True, env=env, timeout=timeout, cwd=ROOT
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}: {proc.stderr.decode()}")
    return proc


def test_send_pull_query_round_trip(server, tmp_path):
    s = ["--server", server.address]
    out = json.loads(run("--json", "send", "cli", "from an argument", "--key", "k-1", "--tags", "A", *s).stdout)
    assert out["status"] == "PUT_OK" and out["message_id"]
    (tmp_path / "body.bin").write_bytes(b"from a file")
    run("send", "cli", "--file", str(tmp_path / "body.bin"), "--queue", str(out["queue"]), *s)
    run("send", "cli", "--queue", str(out["queue"]), "--property", "origin=stdin", *s, stdin=b"from stdin")
    lines = run("--json", "pull", "cli", *s).stdout.decode().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["body"] for r in rows] == ["from an argument", "from a file", "from stdin"]
    assert rows[0]["tags"] == "A" and rows[0]["keys"] == "k-1"
    human = run("pull", "cli", "--queue", str(out["queue"]), "--from", "1", *s).stdout.decode()
    assert "from a file" in human and "from an argument" not in human and human.startswith("NODE")
    assert run("pull", "cli", "--from", "latest", *s).stderr.decode().strip() == "no messages"
    future = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 3600))
    assert run("pull", "cli", "--from", future, *s).stderr.decode().strip() == "no messages"
    found = json.loads(run("query", "cli", "--key", "k-1", "--json", *s).stdout)
    assert [r["body"] for r in found] == ["from an argument"]  # one JSON array: a bounded answer (--json after the command too)
    assert run("query", "cli", "--key", "nope", *s, check=False).returncode == 1


def test_pull_follow_prints_new_messages(server):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server"))
    follower = subprocess.Popen(
        [sys.executable, "-m", "msgstore.cli", "--json", "pull", "live", "--follow", "--server", server.address],
        stdout=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    try:
        run("topics", "create", "live", "--queues", "2", "--server", server.address)
        deadline = time.monotonic() + 30
        got = None
        while got is None and time.monotonic() < deadline:
            run("send", "live", "hello follower", "--server", server.address)
            line = follower.stdout.readline()
            got = json.loads(line) if line else None
        assert got is not None and got["body"] == "hello follower"
    finally:
        follower.kill()


def test_group_pull_commits(server):
    s = ["--server", server.address]
    for i in range(3):
        run("send", "grp", f"m{i}", "--queue", "0", *s)
    first = run("--json", "pull", "grp", "--group", "g1", *s).stdout.decode().splitlines()
    assert len(first) == 3
    assert run("pull", "grp", "--group", "g1", *s).stderr.decode().strip() == "no messages"


def test_admin_topics_and_route(server):
    s = ["--server", server.address]
    st = json.loads(run("--json", "admin", "status", *s).stdout)
    assert st["state"] == "running" and st["recovery"]["mode"] == "normal"
    table = run("admin", "status", *s).stdout.decode()
    assert table.startswith("NODE") and "running" in table
    res = json.loads(run("--json", "admin", "config", "set", "fileReservedTime=12", "flushDiskType=SYNC_FLUSH", *s).stdout)
    assert res["node"] == "node-0" and res["applied"] == {"fileReservedTime": 12}
    assert res["restart_required"] == {"flushDiskType": "SYNC_FLUSH"}
    assert json.loads(run("--json", "admin", "config", "get", *s).stdout)["config"]["fileReservedTime"] == 12
    assert "flushDiskType=SYNC_FLUSH" in run("admin", "status", *s).stdout.decode()  # waiting for a restart, in the table
    bad = run("admin", "config", "set", "fileReservedTime=soon", *s, check=False)
    assert bad.returncode == 1 and "fileReservedTime" in bad.stderr.decode()
    assert json.loads(run("--json", "admin", "delete-expired", *s).stdout)["runs_armed"] == 19
    assert json.loads(run("--json", "admin", "clean-expired-cq", *s).stdout) == {"node": "node-0", "removed": []}
    assert json.loads(run("--json", "admin", "clean-unused-topics", *s).stdout) == {"node": "node-0", "removed": []}
    run("topics", "create", "made", "--queues", "3", *s)
    assert "made" in run("topics", "list", *s).stdout.decode()
    route = json.loads(run("--json", "route", "made", *s).stdout)
    assert route == [{"node": "node-0", "address": server.address, "ready": True, "queues": 3}]


def test_unreachable_server_is_a_clear_error():
    proc = run("send", "x", "y", "--server", "127.0.0.1:1", "--timeout", "2", check=False)
    assert proc.returncode == 1 and proc.stderr.decode().startswith("error: UNAVAILABLE")


def test_inspect_and_fsck_offline(server):
    run("send", "off", "one", "--key", "a", "--server", server.address)
    run("send", "off", "two", "--key", "b", "--server", server.address)
    server.terminate()
    settings = ["--set", "mappedFileSizeCommitLog=262144"]
    info = json.loads(run("--json", "inspect", server.data_dir, *settings).stdout)
    assert info["abort_file"] is False and len(info["commitlog"]) == 1
    assert sum(q["max_offset"] for q in info["consume_queues"]) == 2 and info["topics"] == ["off"]
    assert "commit log" in run("inspect", server.data_dir, *settings).stdout.decode()
    ok = json.loads(run("--json", "fsck", server.data_dir, *settings).stdout)
    assert ok["ok"] and ok["records"] == 2 and ok["units_checked"] == 2 and ok["keys_checked"] == 2
    # corrupt a consume-queue unit: fsck reports it and exits non-zero
    qdir = next(os.path.join(dp, q) for dp, dirs, _ in os.walk(os.path.join(server.data_dir, "consumequeue")) for q in dirs if q.isdigit())
    seg = os.path.join(qdir, sorted(os.listdir(qdir))[0])
    with open(seg, "r+b") as f:
        f.seek(0)
        f.write((7).to_bytes(8, "big"))
    bad = run("--json", "fsck", server.data_dir, *settings, check=False)
    report = json.loads(bad.stdout)
    assert bad.returncode == 1 and not report["ok"]
    assert any("no record at commit-log offset 7" in p for p in report["problems"])


def test_help_lists_the_commands():
    text = run("--help").stdout.decode()
    for cmd in ("serve", "send", "pull", "query", "admin", "inspect", "fsck", "topics", "route"):
        assert cmd in text
    assert "--peers" in run("serve", "--help").stdout.decode()


@pytest.mark.parametrize("setting", ["bogusKey=1", "deleteWhen=25"])
def test_serve_refuses_bad_settings(tmp_path, setting):
    proc = run("serve", "--data-dir", str(tmp_path / "d"), "--port", "0", "--set", setting, check=False)
    assert proc.returncode == 2 and setting.split("=")[0] in proc.stderr.decode()


def test_groups_sets_a_groups_retry_policy_and_names_what_is_wrong(server):
    s = ["--server", server.address]
    no_group = run("groups", "--fifo", *s, check=False)
    assert no_group.returncode == 2 and b"name it" in no_group.stderr
    bad = run("groups", "billing", "--backoff", "1,soon", *s, check=False)
    assert bad.returncode == 2 and b"--backoff" in bad.stderr
    run("groups", "billing", "--fifo", "--max-deliveries", "4", "--backoff", "1,10", *s)
    with open(os.path.join(server.data_dir, "config", "subscriptionGroup.json")) as f:
        entry = json.load(f)["subscriptionGroupTable"]["billing"]
    assert entry["consumeMessageOrderly"] is True and entry["retryMaxTimes"] == 3
    assert entry["groupRetryPolicy"] == {"type": "CUSTOMIZED", "customizedRetryPolicy": {"next": [1000, 10000]}}


def test_with_json_errors_are_json_on_stderr_too(server):
    """They were plain text whatever --json said (issue 33.13): a usage error, a store's refusal,
    and a command's own check, each as one JSON object; without --json, one plain line."""
    s = ["--server", server.address]
    usage = run("send", "x", "y", "--delay", "soon", "--json", *s, check=False)
    assert usage.returncode == 2 and usage.stdout == b""
    doc = json.loads(usage.stderr)
    assert doc["code"] == "usage" and "--delay" in doc["error"]
    too_far = run("send", "x", "y", "--delay", "4d", "--json", *s, check=False)
    assert too_far.returncode == 1 and json.loads(too_far.stderr)["code"] == "INVALID_ARGUMENT"
    refused = run("--json", "receive", "g", "nowhere", "--invisible", "0.0001", *s, check=False)
    assert refused.returncode == 1
    doc = json.loads(refused.stderr.decode().strip().splitlines()[-1])
    assert doc == {"error": doc["error"], "code": "INVALID_ARGUMENT"} and "invisible: must be at least 1 ms" in doc["error"]
    own = run("--json", "send", "x", "y", "--property", "novalue", *s, check=False)
    assert own.returncode != 0 and json.loads(own.stderr)["error"].startswith("--property 'novalue'")
    plain = run("send", "x", "y", "--delay", "soon", *s, check=False)
    assert plain.returncode == 2 and plain.stderr.decode().startswith("msgstore send: error: argument --delay")


def test_groups_confirms_a_policy_and_shows_it(server):
    """It saved the policy and printed 'no consumer groups named G'; nothing showed a group's
    FIFO flag, deliveries and backoff; --backoff=-5 was reported as -5000 ms and
    --max-deliveries 0 meant 'unchanged' (issue 33.9)."""
    s = ["--server", server.address]
    out = run("groups", "billing", "--max-deliveries", "2", "--backoff", "1,5", "--fifo", *s).stdout.decode()
    assert "no consumer groups" not in out
    assert "billing: FIFO, 2 deliveries at most, backoff 1s, 5s (the last repeating) after a nack" in out
    (g,) = json.loads(run("--json", "groups", "billing", *s).stdout)
    assert g["policy"] == {"fifo": True, "max_deliveries": 2, "backoff_s": [1.0, 5.0]}
    run("groups", "billing", "--no-fifo", *s)  # the rest unchanged
    (g,) = json.loads(run("--json", "groups", "billing", *s).stdout)
    assert g["policy"] == {"fifo": False, "max_deliveries": 2, "backoff_s": [1.0, 5.0]}
    negative = run("groups", "billing", "--backoff=-5", *s, check=False)
    assert negative.returncode == 2 and "--backoff: seconds must be 0 or more, got -5" in negative.stderr.decode()
    zero = run("groups", "billing", "--max-deliveries", "0", *s, check=False)
    assert zero.returncode == 2 and "must be 1 or more, got 0" in zero.stderr.decode()
    assert "no consumer groups named nobody" in run("groups", "nobody", *s).stdout.decode()
    listing = run("groups", *s).stdout.decode()  # a group set up before anyone consumes is listed
    assert "no consumer groups" not in listing and "billing: not FIFO, 2 deliveries at most" in listing, listing


def test_what_a_new_user_tripped_on_in_the_cli(server):
    """Issue 33.14: each of these was silent, double, raw, or argparse's own words."""
    s = ["--server", server.address]
    for bad in ("0", "-1", "100000"):
        r = run("receive", "g", "t", "--max", bad, *s, check=False)
        assert r.returncode == 2 and "--max: must be 1 to 1000" in r.stderr.decode()  # ('no messages', exit 0, for 0 and -1)
    neg = run("send", "x", "y", "--delay", "-5s", *s, check=False)
    assert neg.returncode == 2 and "a duration must not be negative" in neg.stderr.decode()  # (was 'expected one argument')
    assert run("--version").stdout.decode().startswith("msgstore ")
    conf = run("admin", "config", "set", "noSuchKey=1", *s, check=False)
    assert conf.returncode != 0 and (conf.stdout + conf.stderr).decode().count("noSuchKey") == 1  # (said twice)
    later = json.loads(run("--json", "send", "fresh", "later", "--delay", "1h", *s).stdout)
    pulled = run("pull", "fresh", *s, check=False)  # its only message is still delayed: the topic is there, empty
    assert "no topic" not in pulled.stderr.decode() and pulled.returncode == 0, pulled.stderr
    assert later["status"] == "PUT_OK"


def test_a_late_recall_names_the_time_not_epoch_ms(server):
    s = ["--server", server.address]
    handle = json.loads(run("--json", "send", "soon", "x", "--delay", "200ms", *s).stdout)["recall_handle"]
    deadline = time.monotonic() + 20
    while True:
        r = run("recall", handle, *s, check=False)
        if r.returncode != 0 or time.monotonic() > deadline:
            break
    err = r.stderr.decode()
    assert "too late to recall" in err and re.search(r"\(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00\) has come", err), err


def test_pull_query_and_receive_show_rocketmqs_message_id_beside_ours(server):
    """An official client's send is known by its UNIQ_KEY (0102FC...); the CLI printed only
    the offset id (issue 33.11)."""
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    from tests.rocketmq.conftest import startup

    s = ["--server", server.address]
    run("topics", "create", "rmq", "--queues", "1", *s)
    producer = Producer(ClientConfiguration(server.address, Credentials()), ("rmq",))
    startup(producer)
    try:
        m = Message()
        m.topic, m.body = "rmq", b"official"
        m.keys = "order-1"
        sent = producer.send(m)
    finally:
        producer.shutdown()
    (pulled,) = [json.loads(line) for line in run("--json", "pull", "rmq", *s).stdout.decode().splitlines()]
    assert pulled["uniq_key"] == sent.message_id and pulled["msg_id"] and pulled["msg_id"] != sent.message_id
    (found,) = json.loads(run("--json", "query", "rmq", "--key", sent.message_id, *s).stdout)
    assert found["uniq_key"] == sent.message_id
    (got,) = json.loads(run("--json", "receive", "g", "rmq", *s).stdout)
    assert got["uniq_key"] == sent.message_id
