"""Python client for msgstore: sync and asyncio flavours, a batching producer, a consumer.

from msgstore.client import Client, Producer, Consumer
with Client("127.0.0.1:10911") as c:
    c.send("orders", b"hello", key="order-1")
"""

from .admin import AdminClient
from .aio import AsyncClient
from .aio_consumer import AsyncConsumer
from .client import Client, OutMessage, PullResult, SendResult, StoreError
from .consumer import BROADCASTING, CLUSTERING, Consumer, ConsumerRecord
from .pop import Received
from .producer import Producer
from .routing import Node, QueueRef, Route

__all__ = [
    "Received",
    "AsyncClient",
    "AsyncConsumer",
    "BROADCASTING",
    "CLUSTERING",
    "AdminClient",
    "Client",
    "OutMessage",
    "PullResult",
    "SendResult",
    "StoreError",
    "Consumer",
    "ConsumerRecord",
    "Producer",
    "Node",
    "QueueRef",
    "Route",
]
