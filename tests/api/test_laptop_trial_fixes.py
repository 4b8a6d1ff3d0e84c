"""What a trial of msgstore as a developer on a laptop found (the README's commands and client,
against a real server): each test failed before its fix."""

from __future__ import annotations

import asyncio
import json

import pytest

from msgstore.client import AsyncClient, AsyncConsumer, Client, Consumer
from tests.api.test_user_trial_fixes import cli


@pytest.mark.parametrize(
    ("group", "topic", "client_id", "named"),
    [
        ("bad group", "orders", None, "group"),
        ("x/y", "orders", None, "group"),
        ("g", "no such", None, "topic"),
        ("g", "orders", "a b", "client_id"),
    ],
)
def test_a_consumer_with_a_name_no_node_takes_is_refused_at_once(server, group, topic, client_id, named):
    """Refused by every node, its heartbeats and start positions were taken for a node that is
    down: its polls came back empty forever, with no error."""
    with Client(server.address, timeout=10) as c:
        with pytest.raises(ValueError, match=named):
            Consumer(c, group, topic, client_id=client_id)

    async def aio() -> None:
        async with AsyncClient(server.address, timeout=10) as ac:
            with pytest.raises(ValueError, match=named):
                AsyncConsumer(ac, group, topic, client_id=client_id)

    asyncio.run(aio())


def test_keyless_sends_of_short_lived_clients_spread_over_the_queues(server):
    """Every fresh process's round robin started at queue 0: CLI sends and short scripts put
    every keyless message on the first queue (RocketMQ starts its index at random)."""
    with Client(server.address, timeout=10) as c:
        c.create_topic("spread", 8)
    queues = set()
    for i in range(12):
        with Client(server.address, timeout=10) as c:
            queues.add(c.send("spread", b"m%d" % i).queue_id)
    assert len(queues) > 1  # (all twelve on one queue by chance: 8 ** -11)
    sent = cli("--json", "send", "spread", "from the command line", "--server", server.address)
    assert sent.returncode == 0, sent.stderr


def test_file_flags_naming_a_directory_and_paths_that_hold_no_store_are_one_line(server, tmp_path):
    s = ["--server", server.address]
    for args in (("send", "t", "--file", str(tmp_path), *s), ("admin", "status", "--admin-token-file", str(tmp_path), *s)):
        out = cli(*args)
        err = out.stderr.decode()
        assert out.returncode == 2 and "Traceback" not in err and f"error: {tmp_path}: Is a directory" in err, err
    a_file = tmp_path / "afile"
    a_file.write_text("x")
    (tmp_path / "empty").mkdir()
    cases = ((a_file, "is not a directory"), (tmp_path / "nonexistent", "is not a directory"), (tmp_path / "empty", "holds no store"))
    for path, says in cases:
        for command in ("fsck", "inspect"):
            out = cli(command, str(path))
            err = out.stderr.decode()
            assert out.returncode == 2 and says in err and "Traceback" not in err, (command, path, err)
            assert out.stdout.decode().strip() != "ok"
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    out = cli("fsck", server.data_dir, "--config", str(bad))
    assert out.returncode == 2 and f"{bad}: not valid JSON" in out.stderr.decode()


def test_admin_config_get_shows_the_keys_asked_for(server):
    s = ["--server", server.address]
    got = cli("--json", "admin", "config", "get", "fileReservedTime", "deleteWhen", *s)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["config"] == {"fileReservedTime": 72, "deleteWhen": "04"}
    unknown = cli("admin", "config", "get", "noSuchKey", *s)
    assert unknown.returncode == 2 and "noSuchKey: unknown configuration key" in unknown.stderr.decode()
    assignment = cli("admin", "config", "get", "fileReservedTime=1", *s)
    assert assignment.returncode == 2 and "admin config set" in assignment.stderr.decode()


def test_pull_shows_properties_and_says_everything_as_json(server):
    s = ["--server", server.address]
    assert cli("send", "props", "x", "--property", "region=eu", "--property", "amount=120", *s).returncode == 0
    row = json.loads(cli("--json", "pull", "props", *s).stdout.decode().splitlines()[0])
    assert row["properties"]["region"] == "eu" and row["properties"]["amount"] == "120"
    assert json.loads(cli("--json", "query", "props", "--key", "nothing", *s).stdout) == []
    past = cli("--json", "pull", "props", "--from", "999", *s)
    lines = past.stderr.decode().splitlines()
    assert lines and all(isinstance(json.loads(line), dict) for line in lines), lines  # no plain-text line among them
    assert any(json.loads(line).get("notice") == "past the end" for line in lines)
    one = cli("pull", "props", "--max", "1", *s)
    assert "stopped after 1 message (--max)" in one.stderr.decode()
    for name in ("", "bad topic"):
        for command in ("pull", "query"):
            out = cli(command, name, *(("--key", "k") if command == "query" else ()), *s)
            err = out.stderr.decode()
            assert out.returncode == 2 and "topic" in err and "no topic" not in err, (command, name, err)


def test_a_call_without_the_admin_token_says_which_flag_gives_it(servers, tmp_path):
    token = tmp_path / "admin-token"
    token.write_text("s3cret\n")
    node = servers("guarded", args=["--admin-token-file", str(token)])
    out = cli("admin", "status", "--server", node.address)
    assert out.returncode == 1 and "--admin-token-file" in out.stderr.decode(), out.stderr
    assert cli("admin", "status", "--server", node.address, "--admin-token-file", str(token)).returncode == 0


def test_admin_status_json_gives_64_bit_numbers_as_numbers(server):
    """proto3's JSON mapping writes int64 as strings: "max_phy_offset": "601" beside real numbers."""
    with Client(server.address, timeout=10) as c:
        c.send("t", b"x")
    st = json.loads(cli("--json", "admin", "status", "--server", server.address).stdout)
    assert isinstance(st["max_phy_offset"], int) and st["max_phy_offset"] > 0
    assert isinstance(st["recovery"]["duration_ms"], int) and isinstance(st["config_generation"], int)
