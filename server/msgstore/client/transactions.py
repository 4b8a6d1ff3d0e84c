"""Transactional messages from a client (RocketMQ's TransactionProducer): send a half message,
run the local transaction, then commit (the message becomes visible, once) or roll back; a
half left unresolved is checked back with ``check`` on any member of the producer group.

    def check(m: CheckedMessage) -> str:          # "commit", "rollback" or "unknown"
        return "commit" if order_exists(m.body) else "rollback"

    with client.transaction_producer("orders-tx", check) as tp:
        tx = tp.send("orders", b"order-7")
        try:
            save_order()
            tx.commit()
        except Exception:
            tx.rollback()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from ..record.recall_handle import RecallHandle
from ..v1 import msgstore_pb2 as pb
from .errors import StoreError
from .routing import QueueRef

log = logging.getLogger(__name__)

RESOLUTIONS = {"commit": pb.COMMIT, "rollback": pb.ROLLBACK, "unknown": pb.UNKNOWN}


@dataclass
class CheckedMessage:
    """A half message the store asks about: commit it, roll it back, or not known yet."""

    transaction_id: str
    topic: str
    body: bytes
    check: int  # 1 for the first check-back
    properties: dict[str, str] = field(default_factory=dict)
    msg_id: str = ""


def _end_request(transaction_id: str, resolution: str) -> tuple[str, QueueRef, pb.EndTransactionRequest]:
    """(topic, the group's queue, request) of an EndTransaction: where it goes and what it says."""
    if resolution not in RESOLUTIONS:
        raise StoreError(grpc.StatusCode.INVALID_ARGUMENT, f"resolution: one of commit, rollback, unknown; got {resolution!r}")
    try:
        h = RecallHandle.decode(transaction_id)
    except ValueError:
        raise StoreError(grpc.StatusCode.INVALID_ARGUMENT, "transaction_id: not a transaction id this store gave out") from None
    return h.topic, QueueRef(h.group, "", 0), pb.EndTransactionRequest(transaction_id=transaction_id, resolution=RESOLUTIONS[resolution])


def end_transaction(client: Any, transaction_id: str, resolution: str) -> None:
    topic, queue, req = _end_request(transaction_id, resolution)
    client._group_call(topic, queue, "EndTransaction", req, reads=False)


class Transaction:
    def __init__(self, client: Any, result: Any):
        self.client = client
        self.result = result  # the half message's SendResult
        self.id: str = result.transaction_id

    def commit(self) -> None:
        end_transaction(self.client, self.id, "commit")

    def rollback(self) -> None:
        end_transaction(self.client, self.id, "rollback")


class TransactionProducer:
    """Sends half messages for ``group`` and answers the store's check-backs with ``check``
    (one listening thread per node, reconnecting until closed)."""

    def __init__(self, client: Any, group: str, check: Callable[[CheckedMessage], str]):
        self.client = client
        self.group = group
        self.check = check
        self._stop = threading.Event()
        self._calls: list[Any] = []
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._listen, args=(n.name, n.address), name=f"tx-checks-{n.name}", daemon=True)
            for n in client.route("", refresh=True).nodes
        ]
        for t in self._threads:
            t.start()

    def send(self, topic: str, body: bytes | str, **kw: Any) -> Transaction:
        props = {**(kw.pop("properties", None) or {}), "TRAN_MSG": "true", "PGROUP": self.group}
        res = self.client.send(topic, body, properties=props, **kw)
        if not res.ok or not res.transaction_id:
            raise StoreError(grpc.StatusCode.UNAVAILABLE, f"the half message was not stored: {res.status} {res.error}")
        return Transaction(self.client, res)

    def _listen(self, node: str, address: str) -> None:
        """Listen on ``node``'s master: after the stream ends (a failover, a restart) the route
        is read again and the listening goes on at whoever is the master now."""
        while not self._stop.is_set():
            call = None
            try:
                stub = self.client.stub(address)
                call = stub.TransactionChecks(
                    pb.TransactionChecksRequest(producer_group=self.group), metadata=self.client.security.data_metadata() or None
                )
                with self._lock:
                    if self._stop.is_set():
                        call.cancel()
                        return
                    self._calls.append(call)
                for c in call:
                    m = c.message
                    msg = CheckedMessage(c.transaction_id, m.topic, bytes(m.body), c.check, dict(m.properties), m.msg_id)
                    try:
                        decision = self.check(msg)
                    except Exception:
                        log.exception("transaction check-back failed; the store asks again later")
                        continue
                    try:
                        end_transaction(self.client, c.transaction_id, decision or "unknown")
                    except StoreError as e:
                        log.warning("could not end transaction %s: %s", c.transaction_id, e)
            except Exception as e:  # (grpc.RpcError, or a client closed under us)
                if not isinstance(e, grpc.RpcError):
                    log.warning("transaction check-backs from %s: %s", node, e)
            finally:
                with self._lock:
                    if call is not None and call in self._calls:
                        self._calls.remove(call)
            if self._stop.wait(0.5):  # the stream ended (a restart, a failover): listen again
                return
            try:
                found = self.client.route("", refresh=True).node(node)
                address = found.address if found is not None else address
            except StoreError:
                pass

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            for call in self._calls:
                call.cancel()
        for t in self._threads:
            t.join(5)

    def __enter__(self) -> TransactionProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def end_transaction_async(client: Any, transaction_id: str, resolution: str) -> None:
    topic, queue, req = _end_request(transaction_id, resolution)
    await client._group_call(topic, queue, "EndTransaction", req, reads=False)


class AsyncTransaction:
    def __init__(self, client: Any, result: Any):
        self.client = client
        self.result = result
        self.id: str = result.transaction_id

    async def commit(self) -> None:
        await end_transaction_async(self.client, self.id, "commit")

    async def rollback(self) -> None:
        await end_transaction_async(self.client, self.id, "rollback")


class AsyncTransactionProducer:
    """TransactionProducer on asyncio: ``check`` may be a plain function or a coroutine
    function; one listening task per node. Use ``async with`` (or ``await start()`` and
    ``await close()``)."""

    def __init__(self, client: Any, group: str, check: Callable[[CheckedMessage], Any]):
        self.client = client
        self.group = group
        self.check = check
        self._tasks: list[Any] = []

    async def start(self) -> AsyncTransactionProducer:
        import asyncio

        for n in (await self.client.route("", refresh=True)).nodes:
            self._tasks.append(asyncio.ensure_future(self._listen(n.name, n.address)))
        return self

    async def send(self, topic: str, body: bytes | str, **kw: Any) -> AsyncTransaction:
        props = {**(kw.pop("properties", None) or {}), "TRAN_MSG": "true", "PGROUP": self.group}
        res = await self.client.send(topic, body, properties=props, **kw)
        if not res.ok or not res.transaction_id:
            raise StoreError(grpc.StatusCode.UNAVAILABLE, f"the half message was not stored: {res.status} {res.error}")
        return AsyncTransaction(self.client, res)

    async def _listen(self, node: str, address: str) -> None:
        import asyncio
        import inspect

        while True:
            try:
                call = self.client.stub(address).TransactionChecks(
                    pb.TransactionChecksRequest(producer_group=self.group), metadata=self.client.security.data_metadata() or None
                )
                async for c in call:
                    m = c.message
                    msg = CheckedMessage(c.transaction_id, m.topic, bytes(m.body), c.check, dict(m.properties), m.msg_id)
                    try:
                        decision = self.check(msg)
                        if inspect.isawaitable(decision):
                            decision = await decision
                        await end_transaction_async(self.client, c.transaction_id, decision or "unknown")
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        log.exception("transaction check-back failed; the store asks again later")
            except asyncio.CancelledError:
                raise
            except grpc.RpcError:
                pass
            await asyncio.sleep(0.5)  # the stream ended (a restart, a failover): the group's master now
            try:
                found = (await self.client.route("", refresh=True)).node(node)
                address = found.address if found is not None else address
            except StoreError:
                pass

    async def close(self) -> None:
        import asyncio

        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def __aenter__(self) -> AsyncTransactionProducer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
