"""What a SendStream send stored is dispatched by the send's own path (servicer.py
DataPlane.SendStream, store-format §6), in process on a real store whose dispatcher thread
polls only once an hour: nothing waits for a poll."""

from __future__ import annotations

import threading
import time
import types

import pytest

from msgstore.api.servicer import DataPlane
from msgstore.client import OutMessage
from msgstore.client.client import encode_send
from msgstore.store import dispatch


class CutStream:
    """A stream context whose client is gone: every answer's write fails."""

    def peer(self) -> str:
        return "ipv4:127.0.0.1:5"

    async def write(self, answer) -> None:
        raise RuntimeError("the stream was cut")


@pytest.mark.asyncio
async def test_a_send_whose_answer_cannot_be_written_is_dispatched_all_the_same(make_store, monkeypatch):
    """The dispatch after a send's answer ran only once the answer was written: a client that
    cut its stream left what it had stored to the dispatcher's poll (found by a cold review)."""
    store = make_store()
    monkeypatch.setattr(dispatch, "POLL_INTERVAL", 3600.0)
    store.dispatcher.wakeup()  # one more cycle, after which the thread waits an hour unless woken
    deadline = time.monotonic() + 10
    while store.dispatcher._wake.is_set():
        assert time.monotonic() < deadline, "the dispatcher did not take its wakeup"
        time.sleep(0.001)
    server = types.SimpleNamespace(
        store=store,
        replica=None,
        metrics=None,
        node_name="n0",
        unavailable_reason=lambda: None,
        authenticator=types.SimpleNamespace(refreshed=lambda caller: caller),
        queue_count=lambda topic: 8,
    )

    arrivals: list[threading.Thread] = []
    store.add_arrival_listener(lambda topic, queue_id, max_offset: arrivals.append(threading.current_thread()))

    async def requests():
        yield encode_send("t", 0, [OutMessage(b"stored, never answered")], None)

    with pytest.raises(RuntimeError, match="cut"):
        await DataPlane(server).SendStream(requests(), CutStream())
    assert store.max_offset("t", 0) == 1  # not left to an hour's poll
    assert arrivals == [threading.current_thread()]  # by the send's own path, on the loop, before the error went on
