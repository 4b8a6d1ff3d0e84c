"""A follower's dispatch bound, its master's confirm offset (ha/follower.py bound_dispatch), on a
real store whose dispatcher polls only once an hour: what wakes it."""

from __future__ import annotations

import time

import pytest

from msgstore.ha.follower import bound_dispatch
from msgstore.record import codec
from msgstore.store import Message, dispatch


def _parked(store, monkeypatch) -> None:
    """The store's dispatcher, from now on, dispatches only when woken."""
    monkeypatch.setattr(dispatch, "POLL_INTERVAL", 3600.0)
    store.dispatcher.wakeup()  # one more cycle, after which it waits an hour unless woken
    deadline = time.monotonic() + 10
    while store.dispatcher._wake.is_set():
        assert time.monotonic() < deadline, "the dispatcher did not take its wakeup"
        time.sleep(0.001)


def _append(store) -> int:
    """A record appended as a replicated chunk's bytes are, waking nobody; the log's end."""
    batch = codec.prepare_batch("t", 0, [Message("t", b"m")], store.commitlog.store_host_bytes, store.clock.now_ms(), 1 << 20)
    assert store.put_prepared(batch).status.stored
    return store.commitlog.max_offset


def _dispatched(store, end: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while store.dispatcher.reput_from < end and time.monotonic() < deadline:
        time.sleep(0.001)
    return store.dispatcher.reput_from >= end


def test_a_confirm_offset_that_moves_without_data_wakes_the_dispatcher(make_store, monkeypatch):
    """The master's confirm offset often comes alone (a keepalive, or the chunk after the
    report that moved it): the follower's consumers then see the message at once, not at the
    dispatcher's next poll (an hour here)."""
    store = make_store()
    first = _append(store)
    assert store.wait_dispatched()
    bound_dispatch(store.dispatcher, first, 0, carries_data=True)  # confirmed: the first record
    _parked(store, monkeypatch)
    end = _append(store)
    assert not _dispatched(store, end, 0.05)  # held back by the bound
    bound_dispatch(store.dispatcher, end, first, carries_data=False)
    assert _dispatched(store, end, 10)


@pytest.mark.parametrize("confirm", [0, 7])
def test_the_same_confirm_offset_again_or_one_with_data_does_not_wake_it(make_store, monkeypatch, confirm):
    """A chunk with data is written next, and the append wakes the dispatcher (with the bound
    already set); an unchanged bound has nothing new to dispatch. 0 lifts the bound."""
    store = make_store()
    woken: list[bool] = []
    monkeypatch.setattr(store.dispatcher, "wakeup", lambda: woken.append(True))
    bound_dispatch(store.dispatcher, confirm, confirm, carries_data=False)
    bound_dispatch(store.dispatcher, confirm + 5, confirm, carries_data=True)
    assert woken == []
    assert store.dispatcher.limit() == confirm + 5
    bound_dispatch(store.dispatcher, 0, confirm + 5, carries_data=True)
    assert store.dispatcher.limit is None
    bound_dispatch(store.dispatcher, 9, 0, carries_data=False)  # (and a move without data does)
    assert woken == [True]
