"""Issue 33 (1, 2): config files RocketMQ wrote are read as they are, and a config file that
cannot be read stops the start instead of being replaced by an empty one.

The files below are in RocketMQ 5's exact layout, as its fastjson writes them
(ConfigManager.encode(true) pretty-prints; integer map keys bare): a store directory moved from
a RocketMQ broker must keep every group's offsets and every delay level's progress."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from msgstore.broker.delay_levels import DelayLevelService
from msgstore.store import MessageStore
from msgstore.store import metadata as md
from tests.support.servers import ServerProcess

SETTINGS = {"mappedFileSizeCommitLog": 1 << 20, "maxHashSlotNum": 1024, "maxIndexNum": 4096}

TOPICS = """{
	"dataVersion":{
		"counter":7,
		"stateVersion":0,
		"timestamp":1700000000123
	},
	"topicConfigTable":{
		"orders":{
			"attributes":{"+message.type":"FIFO"},
			"order":false,
			"perm":6,
			"readQueueNums":4,
			"topicFilterType":"SINGLE_TAG",
			"topicName":"orders",
			"topicSysFlag":0,
			"writeQueueNums":4
		}
	}
}"""

OFFSETS = """{
	"dataVersion":{
		"counter":3,
		"stateVersion":0,
		"timestamp":1700000000456
	},
	"offsetTable":{
		"orders@billing":{0:250,1:251,2:0,3:17},
		"%RETRY%billing@billing":{0:5}
	}
}"""

DELAY = """{
	"dataVersion":{
		"counter":12,
		"stateVersion":0,
		"timestamp":1700000000789
	},
	"offsetTable":{1:3,2:0,17:42}
}"""

GROUPS = """{
	"dataVersion":{"counter":2,"stateVersion":0,"timestamp":1700000000999},
	"forbiddenTable":{"billing":{"orders":1}},
	"subscriptionGroupTable":{
		"billing":{"groupName":"billing","consumeEnable":true,"retryMaxTimes":16,"retryQueueNums":1,"brokerId":0}
	}
}"""

FILTERS = """{
	"dataVersion":{"counter":1,"stateVersion":0,"timestamp":1700000000000},
	"filterDataByTopic":{"orders":{"topic":"orders","groupFilterData":{"billing":{"expression":"a > 1 AND b IN ('{1:2}')"}}}}
}"""


def rocketmq_dir(root) -> str:
    config = os.path.join(str(root), "config")
    os.makedirs(config)
    for name, text in (
        ("topics.json", TOPICS),
        ("consumerOffset.json", OFFSETS),
        ("delayOffset.json", DELAY),
        ("subscriptionGroup.json", GROUPS),
        ("consumerFilter.json", FILTERS),
    ):
        with open(os.path.join(config, name), "w") as f:
            f.write(text)
    return str(root)


def load(path: str) -> dict:
    with open(path, "rb") as f:
        return md.parse_config(f.read())


def test_fastjson_keys_are_quoted_outside_strings_only():
    assert md.parse_config(b'{"a":"{1:2}, 3:4","t":{0:250,-1:7},"l":[{5:6}]}') == {
        "a": "{1:2}, 3:4",
        "t": {"0": 250, "-1": 7},
        "l": [{"5": 6}],
    }
    assert md.parse_config(b'{"esc":"q\\"{1:2}","n":{ 1 : 2 }}') == {"esc": 'q"{1:2}', "n": {"1": 2}}
    with pytest.raises(ValueError):
        md.parse_config(b'{"offsetTable":{0:}')


def test_a_store_directory_rocketmq_wrote_keeps_its_offsets_topics_and_versions(tmp_path):
    root = rocketmq_dir(tmp_path / "s")
    config = os.path.join(root, "config")
    store = MessageStore(root, SETTINGS).start()
    try:
        assert [store.offsets.query("billing", "orders", q) for q in range(4)] == [250, 251, 0, 17]
        assert store.offsets.query("billing", "%RETRY%billing", 0) == 5
        assert store.topics.get("orders").read_queue_nums == 4
        store.offsets.commit("billing", "orders", 0, 260)
        store.offsets.persist()
        store.create_topic("payments", 2)
        store.groups.ensure("audit")
        store.groups.persist()
    finally:
        store.shutdown()
    offsets = load(os.path.join(config, "consumerOffset.json"))
    assert offsets["offsetTable"]["orders@billing"] == {"0": 260, "1": 251, "2": 0, "3": 17}
    assert offsets["dataVersion"] == {"counter": 3, "stateVersion": 0, "timestamp": 1700000000456}  # kept: the table's version did not move
    topics = load(os.path.join(config, "topics.json"))
    assert topics["topicConfigTable"]["orders"]["attributes"] == {"+message.type": "FIFO"}  # written back as read
    assert topics["dataVersion"]["counter"] == 8 and topics["dataVersion"]["stateVersion"] == 0
    assert topics["dataVersion"]["timestamp"] > 1700000000123
    groups = load(os.path.join(config, "subscriptionGroup.json"))
    assert groups["forbiddenTable"] == {"billing": {"orders": 1}} and set(groups["subscriptionGroupTable"]) == {"billing", "audit"}
    assert groups["dataVersion"]["counter"] == 3
    assert open(os.path.join(config, "consumerFilter.json")).read() == FILTERS  # not ours: left as it is
    with MessageStore(root, SETTINGS) as again:  # and what we wrote reads back
        assert again.offsets.query("billing", "orders", 0) == 260 and again.topics.get("payments").read_queue_nums == 2


def test_delay_level_progress_rocketmq_wrote_is_kept(tmp_path):
    root = rocketmq_dir(tmp_path / "s")
    with MessageStore(root, SETTINGS) as store:
        service = DelayLevelService(store, lambda: store.config)
        service.load()
        assert service.offsets == {1: 3, 2: 0, 17: 42}  # not {}: every pending level message would be delivered again
        service.offsets[1] = 4
        service.dirty = True
        service.persist()
    saved = load(os.path.join(root, "config", "delayOffset.json"))
    assert saved["offsetTable"] == {"1": 4, "2": 0, "17": 42}
    assert saved["dataVersion"] == {"counter": 12, "stateVersion": 0, "timestamp": 1700000000789}


def test_an_unreadable_config_file_is_never_replaced_by_an_empty_one(tmp_path):
    root = rocketmq_dir(tmp_path / "s")
    path = os.path.join(root, "config", "consumerOffset.json")
    with open(path, "w") as f:
        f.write('{"offsetTable":{"orders@billing":{0:250,')  # cut short, and no backup
    with pytest.raises(md.UnreadableConfig) as e:
        MessageStore(root, SETTINGS).start()
    assert "consumerOffset.json cannot be read" in str(e.value) and "consumerOffset.json.bak missing" in str(e.value)
    assert open(path).read().startswith('{"offsetTable":{"orders@billing":{0:250,')  # untouched

    # a readable backup is used instead, as before
    with open(path + ".bak", "w") as f:
        f.write(OFFSETS)
    with MessageStore(root, SETTINGS) as store:
        assert store.offsets.query("billing", "orders", 1) == 251


def test_serve_refuses_fsck_names_the_file_and_the_flag_starts_anyway(tmp_path):
    root = rocketmq_dir(tmp_path / "s")
    path = os.path.join(root, "config", "consumerOffset.json")
    with open(path, "w") as f:
        f.write("\x00\x00garbage")
    cli = [sys.executable, "-m", "msgstore.cli"]
    serve = subprocess.run(
        [*cli, "serve", "--data-dir", root, "--port", "0", "--metrics-port", "-1"], capture_output=True, text=True, timeout=60
    )
    assert serve.returncode == 1
    assert serve.stderr.strip().splitlines()[-1].startswith("error: ") and "consumerOffset.json cannot be read" in serve.stderr
    assert "--set-aside-unreadable-config" in serve.stderr and "Traceback" not in serve.stderr

    fsck = subprocess.run([*cli, "fsck", root, "--json"], capture_output=True, text=True, timeout=60)
    report = json.loads(fsck.stdout)
    assert fsck.returncode == 1 and not report["ok"]
    assert any(p.startswith("config/consumerOffset.json cannot be read") for p in report["problems"]), report
    assert any("config/delayOffset.json: written by RocketMQ" in n for n in report["notes"]), report

    node = ServerProcess(root, name="anyway", args=["--set-aside-unreadable-config"]).start()
    try:
        from msgstore.client import Client

        with Client(node.address, timeout=10) as c:
            assert c.committed("billing", "orders", next(q for q in c.route("orders").queues if q.queue_id == 1)) == -1
    finally:
        node.kill()
    assert open(path + ".unreadable").read() == "\x00\x00garbage"  # kept, never deleted


def test_rocketmq_5s_binary_timercheck_does_not_stop_the_broker_services(tmp_path):
    """RocketMQ 5 keeps its timer progress in a binary config/timercheck where we keep JSON: our
    own progress files are rebuilt when unreadable (a refusal there, after the start, left
    delays, timers and receives waiting on services that never came up)."""
    root = rocketmq_dir(tmp_path / "s")
    with open(os.path.join(root, "config", "timercheck"), "wb") as f:
        f.write(b"\x00\x00\x00\x00\x00\x01\xe2\x40" * 4)
    node = ServerProcess(root, name="rmq").start()
    try:
        from msgstore.client import Client
        from tests.support.servers import wait_until

        with Client(node.address, timeout=10) as c:
            c.create_topic("later", 1)
            c.send("later", b"due", delay=0.3)
            q = c.route("later").queues[0]
            wait_until(lambda: c.pull("later", q, 0).messages, timeout=20, what="the timed message delivered")
    finally:
        node.kill()


def test_an_unreadable_delay_offset_file_stops_the_start(tmp_path):
    root = rocketmq_dir(tmp_path / "s")
    with open(os.path.join(root, "config", "delayOffset.json"), "w") as f:
        f.write("{1:3,")
    with pytest.raises(md.UnreadableConfig) as e:
        MessageStore(root, SETTINGS).start()
    assert "delayOffset.json cannot be read" in str(e.value)


def test_a_copy_set_aside_before_is_never_overwritten(tmp_path):
    root = rocketmq_dir(tmp_path / "s")
    path = os.path.join(root, "config", "consumerOffset.json")
    md.SET_ASIDE_UNREADABLE = True
    try:
        for text in ("first{", "second{"):
            with open(path, "w") as f:
                f.write(text)
            with MessageStore(root, SETTINGS):
                pass
            for left in (path, path + ".bak"):  # (what the store wrote since)
                if os.path.exists(left):
                    os.remove(left)
    finally:
        md.SET_ASIDE_UNREADABLE = False
    assert open(path + ".unreadable").read() == "first{" and open(path + ".unreadable.1").read() == "second{"
