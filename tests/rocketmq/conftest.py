"""RocketMQ 5's official Python client (rocketmq-python-client, pinned) against real server
processes: every client here is started and shut down through its public API."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest
from rocketmq import ClientConfiguration, Credentials, MessageListener
from rocketmq.v5.client.connection.rpc_client import RpcClient

from tests.api import conftest as api

# real server processes, started and stopped as tests/api does
servers = api.servers
cluster = api.cluster

FAST_TX = ["transactionTimeOut=300", "transactionCheckInterval=300", "transactionCheckMax=3"]


@pytest.fixture
def server(servers):
    return servers("node-0", settings=FAST_TX)


def config(address: str, secret: str = "") -> ClientConfiguration:
    return ClientConfiguration(address, Credentials("app" if secret else "", secret), request_timeout=5)


def startup(client) -> None:
    """``client.startup()``, with the calling thread's event loop set as the client sets it.

    The official client opens its telemetry stream in the thread that runs its route query's
    callback: its I/O loop's thread, or ours when the answer came before the callback was added
    (a race it loses now and then). grpc.aio then needs a current event loop in our thread, and
    a test's earlier ``asyncio.run()`` left the main thread with none: "There is no current
    event loop in thread 'MainThread'", and a push consumer's start-up failed 10 s later (one
    CI run). The client's own channel creation makes its I/O loop the calling thread's; this
    does that before it starts, whichever thread then opens the stream."""
    asyncio.set_event_loop(RpcClient.get_channel_io_loop())
    client.startup()


@contextlib.contextmanager
def started(client):
    """A client started (``startup``), and shut down however the test ends."""
    startup(client)
    try:
        yield client
    finally:
        client.shutdown()


class Recorder(MessageListener):
    """A push consumer's listener: records each delivery; ``answer`` decides its result."""

    def __init__(self, answer):
        self.answer = answer
        self.seen: list = []
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)

    def consume(self, message):
        with self.lock:
            self.seen.append(message)
            self.changed.notify_all()
        return self.answer(message)
