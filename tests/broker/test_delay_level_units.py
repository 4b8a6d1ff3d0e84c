"""Delay levels read their due times from the consume queue (issue 33): a unit of
``SCHEDULE_TOPIC_XXXX`` holds its message's due time in its tagsCode, as RocketMQ writes it,
whether the unit was written by a put, by a rebuild from the commit log, or by RocketMQ; and a
backlog of level messages is not read again until its first one is due."""

from __future__ import annotations

import os
import shutil
import struct

import pytest

from msgstore.broker.delay_levels import DelayLevelService
from msgstore.broker.scheduling import Scheduler
from msgstore.broker.services import BrokerServices
from msgstore.broker.system_topics import SCHEDULE_TOPIC
from msgstore.store import GetStatus, ManualClock, Message, MessageStore

SETTINGS = {"mappedFileSizeCommitLog": 1 << 20, "maxHashSlotNum": 1024, "maxIndexNum": 4096, "messageDelayLevel": "1s 5s 10s"}
T0 = 1_800_000_000_000


def open_store(root: str, clock: ManualClock) -> MessageStore:
    return MessageStore(root, SETTINGS, clock=clock).start()


def put_level(store: MessageStore, clock: ManualClock, level: int, body: bytes) -> None:
    stored, _ = Scheduler(lambda: store.config, clock.now_ms).prepare(Message("orders", body, 0, properties={"DELAY": str(level)}))
    assert stored.topic == SCHEDULE_TOPIC
    if store.topics.get(SCHEDULE_TOPIC) is None:
        store.create_topic(SCHEDULE_TOPIC, 3)
    assert store.put_messages(stored.topic, stored.queue_id, [stored]).ok
    assert store.wait_dispatched()


def unit_tags(store: MessageStore, level: int) -> list[int]:
    cq = store.consume_queue(SCHEDULE_TOPIC, level - 1)
    assert cq is not None
    return [int(t) for t in cq.units_array(0, 1000)["tag"]]


def delivered(store: MessageStore) -> list[bytes]:
    res = store.get_message(None, "orders", 0, 0, max_msgs=1000)
    try:
        return [m.body for m in res.messages()] if res.status is GetStatus.FOUND else []
    finally:
        res.release()


def set_unit_tag(store: MessageStore, level: int, offset: int, tag: int) -> None:
    """Write a unit as another broker would have (RocketMQ's due time, or a tag hash from before)."""
    cq = store.consume_queue(SCHEDULE_TOPIC, level - 1)
    assert cq is not None
    phy, size, _tag = cq.unit(offset)
    cq.rewrite(offset, struct.pack(">qiq", phy, size, tag))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def store(tmp_path, clock):
    s = open_store(str(tmp_path / "s"), clock)
    yield s
    s.shutdown()


def test_a_level_unit_holds_its_due_time_when_put_and_when_rebuilt(tmp_path, clock):
    root = str(tmp_path / "s")
    store = open_store(root, clock)
    put_level(store, clock, 2, b"a")
    clock.advance(700)
    put_level(store, clock, 2, b"b")
    put_level(store, clock, 3, b"c")
    assert unit_tags(store, 2) == [T0 + 5000, T0 + 700 + 5000]
    assert unit_tags(store, 3) == [T0 + 700 + 10_000]
    store.shutdown()
    shutil.rmtree(os.path.join(root, "consumequeue"))  # dispatched again from the commit log
    store = open_store(root, clock)
    try:
        assert unit_tags(store, 2) == [T0 + 5000, T0 + 700 + 5000]
        assert unit_tags(store, 3) == [T0 + 700 + 10_000]
    finally:
        store.shutdown()


def test_the_due_time_comes_from_the_unit_not_from_the_message(store, clock):
    put_level(store, clock, 3, b"early")  # due at T0 + 10 s by its store time
    set_unit_tag(store, 3, 0, T0 + 2000)  # RocketMQ computed another due time
    levels = DelayLevelService(store, lambda: store.config)
    assert levels.run_due(T0 + 1999) == 1
    assert delivered(store) == []
    clock.advance(2000)
    assert levels.run_due(T0 + 2000) is None
    assert store.wait_dispatched()
    assert delivered(store) == [b"early"]


def test_a_due_time_beyond_the_levels_delay_is_due_now_as_rocketmq_corrects_it(store, clock):
    put_level(store, clock, 1, b"skewed")
    set_unit_tag(store, 1, 0, T0 + 3_600_000)  # the clock went back an hour since it was stored
    levels = DelayLevelService(store, lambda: store.config)
    assert levels.run_due(T0) is None
    assert store.wait_dispatched()
    assert delivered(store) == [b"skewed"]


def test_units_written_before_due_times_go_by_the_store_time(store, clock):
    put_level(store, clock, 2, b"old-1")
    clock.advance(1000)
    put_level(store, clock, 2, b"old-2")
    put_level(store, clock, 2, b"new")
    set_unit_tag(store, 2, 0, 0)  # no tag
    set_unit_tag(store, 2, 1, -1_234_567)  # a tag hash (jhash widened)
    levels = DelayLevelService(store, lambda: store.config)
    assert levels.run_due(T0 + 4999) == 1
    assert levels.run_due(T0 + 5000) == 1000  # old-1 is due; old-2 by its store time, then new by its unit
    assert store.wait_dispatched()
    assert delivered(store) == [b"old-1"]
    assert levels.run_due(T0 + 6000) is None
    assert store.wait_dispatched()
    assert delivered(store) == [b"old-1", b"old-2", b"new"]


def test_a_backlog_is_not_read_again_before_its_first_message_is_due(store, clock):
    services = BrokerServices(store)
    for i in range(300):
        put_level(store, clock, 3, b"%d" % i)
    levels = services.levels
    assert levels.run_due(T0) == 10_000
    reads = []
    real = store.get_message

    def counted(group, topic, *a, **kw):
        if topic == SCHEDULE_TOPIC:
            reads.append(a)
        return real(group, topic, *a, **kw)

    store.get_message = counted  # type: ignore[method-assign]
    for i in range(50):
        put_level(store, clock, 3, b"more-%d" % i)
        clock.advance(10)
        assert levels.run_due(clock.now_ms()) == 10_000 - 10 * (i + 1)
    assert reads == []  # (each round read 256 whole messages to find none due: 11x slower timer sends)
    assert levels.waits_on(3) and not levels.waits_on(1)
    clock.advance(10_000)
    assert levels.run_due(clock.now_ms()) is None
    assert store.wait_dispatched()
    assert len(delivered(store)) == 350 and reads


def test_a_clock_gone_back_makes_a_remembered_level_due_as_rocketmq_corrects_it(store, clock):
    put_level(store, clock, 3, b"held")
    levels = DelayLevelService(store, lambda: store.config)
    assert levels.run_due(T0) == 10_000 and levels.waits_on(3)  # remembered: due at T0 + 10 s
    assert levels.run_due(T0 - 60_000) is None  # the clock went back a minute: more than the level's delay away
    assert store.wait_dispatched()
    assert delivered(store) == [b"held"]
