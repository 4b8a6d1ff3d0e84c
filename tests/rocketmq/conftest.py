"""RocketMQ 5's official Python client (rocketmq-python-client, pinned) against real server
processes: every client here is started and shut down through its public API."""

from __future__ import annotations

import contextlib
import threading

import pytest
from rocketmq import ClientConfiguration, Credentials, MessageListener

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


@contextlib.contextmanager
def started(client):
    """A client started, and shut down however the test ends."""
    client.startup()
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
