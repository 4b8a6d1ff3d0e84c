"""FIFO groups' state across restarts (broker/fifo.py, pop.py), on an embedded store: what was
finished past a message still in flight stays finished, a lapsed message keeps its delivery
count and backoff, a checkpoint replayed after a restart cannot release a second delivery, and
tag filters apply."""

from __future__ import annotations

import pytest

from msgstore.broker.pop import PopService
from msgstore.broker.scheduling import Scheduler
from msgstore.record.receipt import Receipt
from msgstore.store import Message, MessageStore
from msgstore.store.clock import ManualClock

SETTINGS = {"mappedFileSizeCommitLog": 1 << 20, "maxHashSlotNum": 1024, "maxIndexNum": 4096}


@pytest.fixture
def store(tmp_path):
    s = MessageStore(str(tmp_path / "s"), SETTINGS, clock=ManualClock(1_800_000_000_000)).start()
    s.groups.ensure("g")
    s.groups.groups["g"].update(
        {
            "consumeMessageOrderly": True,
            "retryMaxTimes": 5,
            "groupRetryPolicy": {"type": "CUSTOMIZED", "customizedRetryPolicy": {"next": [600_000]}},
        }
    )
    yield s
    s.shutdown()


def pop_of(store: MessageStore, persisted: PopService | None = None) -> PopService:
    """A PopService as a (re)start makes it: the progress file, then the revive log."""
    if persisted is not None:
        persisted.persist()
    assert store.wait_dispatched()  # (a restart dispatches the whole log before it serves)
    p = PopService(store, Scheduler(lambda: store.config, store.clock.now_ms), lambda: "n")
    p.load()
    p.take_new()
    return p


def put(store: MessageStore, body: str, group: str, tags: str = "") -> None:
    props = {"__SHARDINGKEY": group, **({"TAGS": tags} if tags else {})}
    assert store.put_messages("t", 0, [Message("t", body.encode(), 0, properties=props)]).ok
    assert store.wait_dispatched()


def bodies(got) -> list[str]:
    return [d.message.body.decode() for d in got]


def test_messages_finished_past_one_in_flight_stay_finished_after_a_restart(store):
    put(store, "a0", "a")
    for i in range(3):
        put(store, f"b{i}", "b")
    p = pop_of(store)
    now = store.clock.now_ms()
    first = p.receive("g", "t", 10, 60_000, now)
    assert bodies(first) == ["a0", "b0"]
    for _ in range(2):  # b0, b1 acked one by one; a0 stays in flight
        (b,) = [d for d in first if d.message.body.startswith(b"b")]
        assert p.ack([Receipt.decode(b.receipt)]) == [""]
        first = p.receive("g", "t", 10, 60_000, now)
    assert bodies(first) == ["b2"]
    again = pop_of(store, persisted=p)  # a clean restart
    assert bodies(again.receive("g", "t", 10, 60_000, now)) == []  # b0, b1 not again; a0 and b2 in flight


def test_a_lapsed_message_comes_back_first_with_its_count_across_a_restart(store):
    """Its invisible time was the wait: it is due at once (no backoff after it), and first."""
    put(store, "a0", "a")
    put(store, "a1", "a")
    p = pop_of(store)
    assert bodies(p.receive("g", "t", 10, 1_000, store.clock.now_ms())) == ["a0"]
    store.clock.advance(2_000)
    p.run_due(store.clock.now_ms())
    again = pop_of(store, persisted=p)
    got = again.receive("g", "t", 10, 1_000, store.clock.now_ms())
    assert [(d.message.body, d.attempt) for d in got] == [(b"a0", 2)]


def test_a_nacked_message_keeps_its_group_back_for_its_backoff_across_a_restart(store):
    put(store, "a0", "a")
    put(store, "a1", "a")
    p = pop_of(store)
    (d,) = p.receive("g", "t", 10, 1_000, store.clock.now_ms())
    p.change_invisible(Receipt.decode(d.receipt), 600_000, store.clock.now_ms())  # a nack with the group's 600 s backoff
    store.clock.advance(2_000)
    p.run_due(store.clock.now_ms())
    again = pop_of(store, persisted=p)
    assert bodies(again.receive("g", "t", 10, 1_000, store.clock.now_ms())) == []  # still waiting (nothing of a overtakes it)
    store.clock.advance(600_000)
    again.run_due(store.clock.now_ms())
    got = again.receive("g", "t", 10, 1_000, store.clock.now_ms())
    assert [(d.message.body, d.attempt) for d in got] == [(b"a0", 2)]


def test_a_replayed_checkpoint_cannot_release_a_second_delivery(store):
    put(store, "a0", "a")
    put(store, "a1", "a")
    p = pop_of(store)
    p.store.groups.groups["g"]["groupRetryPolicy"] = {"type": "CUSTOMIZED", "customizedRetryPolicy": {"next": [100]}}
    assert bodies(p.receive("g", "t", 10, 1_000, store.clock.now_ms())) == ["a0"]
    store.clock.advance(2_000)
    p.run_due(store.clock.now_ms())
    store.clock.advance(200)
    second = p.receive("g", "t", 10, 60_000, store.clock.now_ms())
    assert [(d.message.body, d.attempt) for d in second] == [(b"a0", 2)]
    crashed = pop_of(store)  # no save since: both checkpoints replayed, the first already due
    crashed.run_due(store.clock.now_ms())
    store.clock.advance(200)
    assert bodies(crashed.receive("g", "t", 10, 60_000, store.clock.now_ms())) == []  # a0 is out (2nd delivery), a1 waits


def test_tag_filters_apply_to_fifo_groups(store):
    put(store, "x", "a", tags="TagX")
    put(store, "y", "b", tags="TagY")
    p = pop_of(store)
    assert bodies(p.receive("g", "t", 10, 60_000, store.clock.now_ms(), "TagY")) == ["y"]


def test_a_nacked_fifo_message_comes_back_first(store):
    put(store, "a0", "a")
    put(store, "a1", "a")
    store.groups.groups["g"]["groupRetryPolicy"] = {"type": "CUSTOMIZED", "customizedRetryPolicy": {"next": [100]}}
    p = pop_of(store)
    (d,) = p.receive("g", "t", 10, 60_000, store.clock.now_ms())
    p.change_invisible(Receipt.decode(d.receipt), 0, store.clock.now_ms())  # a nack
    p.run_due(store.clock.now_ms())
    store.clock.advance(200)
    got = p.receive("g", "t", 10, 60_000, store.clock.now_ms())
    assert [(x.message.body, x.attempt) for x in got] == [(b"a0", 2)]


def test_a_waiting_message_a_filter_now_excludes_still_holds_its_group_back(store):
    put(store, "a0", "a", tags="B")
    put(store, "a1", "a", tags="A")
    p = pop_of(store)
    (d,) = p.receive("g", "t", 10, 1_000, store.clock.now_ms())
    p.change_invisible(Receipt.decode(d.receipt), 600_000, store.clock.now_ms())  # nacked: back in 600 s
    store.clock.advance(2_000)
    p.run_due(store.clock.now_ms())
    assert bodies(p.receive("g", "t", 10, 60_000, store.clock.now_ms(), "A")) == []  # a1 must not overtake it
    store.clock.advance(600_000)
    p.run_due(store.clock.now_ms())
    assert bodies(p.receive("g", "t", 10, 60_000, store.clock.now_ms(), "A")) == ["a1"]  # a0 filtered out once due
