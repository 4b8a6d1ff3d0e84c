"""The Telemetry stream: a RocketMQ 5 client's settings and the server's commands to it.

A client opens it to each endpoint it uses and sends its Settings; the answer is the settings
the server holds for it (push consumers wait for that answer before they start): the largest
body this store takes, the consumer group's retry policy (max attempts and backoff, from
``subscriptionGroup.json`` as msgstore.v1 UpdateGroup sets it), whether the group is FIFO,
batch size and long-polling time. A producer's stream also carries check-backs of its
orphaned transactions (``RecoverOrphanedTransactionCommand``): the producer publishing a
half message's topic is asked, as the broker's TransactionChecks stream does for v1.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from ...acl.identity import CALLER
from ...broker.pop import is_fifo
from ...broker.retry_policy import RetryPolicy
from .messages import producer_group, to_v2
from .protocol import definition as d
from .protocol import service as s
from .status import status

if TYPE_CHECKING:
    from .context import Service

log = logging.getLogger(__name__)

RECEIVE_BATCH = 32
MAX_TOPICS = 1024  # a producer's topics, each listened on for check-backs
PUSH_POLL_S = 20


def _duration(ms: int) -> Any:
    from google.protobuf.duration_pb2 import Duration

    out = Duration()
    out.FromMilliseconds(ms)
    return out


def retry_policy(policy: RetryPolicy) -> Any:
    out = d.RetryPolicy(max_attempts=policy.max_deliveries)
    if policy.initial_ms > 0:
        out.exponential_backoff.initial.CopyFrom(_duration(policy.initial_ms))
        out.exponential_backoff.max.CopyFrom(_duration(policy.max_ms or policy.initial_ms))
        out.exponential_backoff.multiplier = policy.multiplier
    else:
        out.customized_backoff.next.extend(_duration(ms) for ms in policy.next_ms)
    return out


class Telemetry:
    def __init__(self, service: Service):
        self.service = service

    def settings_for(self, given: Any) -> Any:
        """The settings this node holds for a client that sent ``given``."""
        server = self.service.server
        out = d.Settings()
        out.CopyFrom(given)
        out.metric.Clear()
        out.metric.on = False  # no OTLP collector here
        kind = given.WhichOneof("pub_sub")
        if kind == "publishing":
            out.publishing.max_body_size = server.store.config.maxMessageSize
            out.publishing.validate_message_type = True
            if not given.HasField("backoff_policy"):
                out.backoff_policy.max_attempts = 3
                out.backoff_policy.exponential_backoff.initial.CopyFrom(_duration(10))
                out.backoff_policy.exponential_backoff.max.CopyFrom(_duration(1000))
                out.backoff_policy.exponential_backoff.multiplier = 2
        elif kind == "subscription":
            group = given.subscription.group.name
            entry = server.store.groups.groups.get(group)
            out.backoff_policy.CopyFrom(retry_policy(RetryPolicy.of_group(entry)))
            out.subscription.fifo = is_fifo(entry)
            out.subscription.receive_batch_size = given.subscription.receive_batch_size or RECEIVE_BATCH
            if not given.subscription.HasField("long_polling_timeout"):
                out.subscription.long_polling_timeout.seconds = PUSH_POLL_S
        return out

    async def serve(self, requests, context) -> None:
        writing = asyncio.Lock()
        listening: dict[str, asyncio.Task] = {}

        async def write(cmd: Any) -> None:
            async with writing:
                await context.write(cmd)

        try:
            async for cmd in requests:
                kind = cmd.WhichOneof("command")
                if kind == "settings":
                    if len(cmd.settings.publishing.topics) > MAX_TOPICS:
                        message = f"settings.publishing.topics: at most {MAX_TOPICS} topics, got {len(cmd.settings.publishing.topics)}"
                        await write(s.TelemetryCommand(status=status(d.BAD_REQUEST, message)))
                        continue
                    caller = CALLER.get()
                    named = [t.name for t in cmd.settings.publishing.topics if t.name]
                    refused = next((t for t in named if not caller.may("topic", t, "pub")), None)
                    if refused is not None:  # its check-backs carry the topic's messages: a publisher's only
                        message = f"settings.publishing.topics: user {caller.name} may not pub topic:{refused}"
                        await write(s.TelemetryCommand(status=status(d.FORBIDDEN, message)))
                        continue
                    settings = self.settings_for(cmd.settings)
                    await write(s.TelemetryCommand(status=status(), settings=settings))
                    if cmd.settings.WhichOneof("pub_sub") == "publishing":
                        topics = {producer_group(t) for t in named}
                        for gone in set(listening) - topics:
                            listening.pop(gone).cancel()
                        for topic in topics - set(listening):
                            listening[topic] = asyncio.ensure_future(self._checks(topic, write))
                elif kind in ("thread_stack_trace", "verify_message_result", None):
                    continue  # answers to commands we never send; a bare status
                else:
                    await write(s.TelemetryCommand(status=status(d.BAD_REQUEST, f"command: {kind} is not one a client sends")))
        finally:
            for task in listening.values():
                task.cancel()

    async def _checks(self, group: str, write) -> None:
        """Forward check-backs of ``group``'s half messages while this node is its master."""
        server = self.service.server
        listeners = server.check_listeners
        caller = CALLER.get()
        auth = server.authenticator
        q = listeners.add(group, None if caller.user is None else lambda topic: auth.may_now(caller, "topic", topic, "pub"))
        try:
            while not server.stopping:
                try:
                    check = await asyncio.wait_for(q.get(), 1.0)
                except TimeoutError:
                    continue
                if not server._broker_master():
                    continue
                try:
                    command = s.RecoverOrphanedTransactionCommand(message=to_v2(check.message), transaction_id=check.transaction_id)
                except Exception:  # our bug: this one is asked again after transactionCheckInterval
                    log.exception("a check-back of %s could not be sent", group)
                    continue
                await write(s.TelemetryCommand(recover_orphaned_transaction_command=command))
        except asyncio.CancelledError:
            pass
        except Exception as e:  # the stream ended under a write: the producer reconnects and is asked again
            log.info("check-backs for %s over this stream stopped: %s", group, e)
        finally:
            listeners.remove(group, q)
