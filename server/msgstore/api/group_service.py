"""The consumer-group RPCs: Heartbeat, Unregister, DescribeGroups (see api/groups.py)."""

from __future__ import annotations

from ..record import codec
from ..v1 import msgstore_pb2 as pb
from . import validation as v
from .groups import MAX_EXPIRY_MS, Group, GroupRegistry
from .pop_service import group_policy


def check_client_id(client_id: str) -> str:
    err = codec.client_id_error(client_id or "")
    if err:
        raise v.InvalidArgument("client_id", err)
    return client_id


def _members(registry: GroupRegistry, g: Group) -> list[pb.GroupMember]:
    return [
        pb.GroupMember(
            client_id=m.client_id, topics=m.topics, host=m.host, expires_in_ms=registry.expires_in_ms(m), broadcasting=m.broadcasting
        )
        for _, m in sorted(g.members.items())
    ]


SYSTEM_PREFIXES = ("%RETRY%", "%DLQ%", "rmq_sys_")  # summarised as counts, not listed queue by queue


class GroupHandlers:
    """Mixed into the data plane: ``self.server`` (registry, node name) and ``self.store``."""

    server: object
    store: object

    async def Heartbeat(self, request: pb.HeartbeatRequest, context) -> pb.HeartbeatResponse:
        await self._ready(context)  # type: ignore[attr-defined]
        group = v.check_group(request.group)
        client_id = check_client_id(request.client_id)
        topics = [v.check_topic(t, f"topics[{i}]") for i, t in enumerate(request.topics)]
        v.check_range(request.expiry_ms, "expiry_ms", 0, MAX_EXPIRY_MS)
        claims = []
        for i, c in enumerate(request.claims):
            topic = v.check_topic(c.topic, f"claims[{i}].topic")
            qid = v.check_queue_id(c.queue_id, f"claims[{i}].queue_id")
            limit = self.server.queue_count(topic)  # type: ignore[attr-defined]
            if qid >= limit:
                raise v.InvalidArgument(f"claims[{i}].queue_id", f"{qid} is out of range: topic {topic} has {limit} queues")
            claims.append((topic, qid))
        registry: GroupRegistry = self.server.groups  # type: ignore[attr-defined]
        g, granted = registry.heartbeat(
            group, client_id, topics, context.peer() if context is not None else "", request.expiry_ms, claims, request.broadcasting
        )
        return pb.HeartbeatResponse(
            generation=g.generation,
            members=_members(registry, g),
            granted=[pb.QueueKey(topic=t, queue_id=q) for t, q in sorted(granted)],
            node=self.server.node_name,  # type: ignore[attr-defined]
        )

    async def Unregister(self, request: pb.UnregisterRequest, context) -> pb.UnregisterResponse:
        await self._ready(context)  # type: ignore[attr-defined]
        self.server.groups.unregister(v.check_group(request.group), check_client_id(request.client_id))  # type: ignore[attr-defined]
        return pb.UnregisterResponse()

    def _pop_counts(self, group: str, topics: set[str]) -> tuple[int, int, int]:
        """(in flight, waiting in the group's retry topics, in its DLQ) on this node."""
        store = self.store
        broker = self.server.broker  # type: ignore[attr-defined]
        inflight = broker.pop.inflight_counts().get(group, 0) if broker is not None and broker.active else 0
        retrying = 0
        for t in topics:
            if t.startswith(f"%RETRY%{group}_"):
                retrying += sum(p.lag for p in store.group_progress(group, t, [0]))  # type: ignore[attr-defined]
        dlq = f"%DLQ%{group}"
        dead = store.max_offset(dlq, 0) - store.min_offset(dlq, 0) if store.consume_queue(dlq, 0) is not None else 0  # type: ignore[attr-defined]
        return inflight, retrying, dead

    async def DescribeGroups(self, request: pb.DescribeGroupsRequest, context) -> pb.DescribeGroupsResponse:
        await self._ready(context)  # type: ignore[attr-defined]
        wanted = v.check_group(request.group) if request.group else None
        registry: GroupRegistry = self.server.groups  # type: ignore[attr-defined]
        store = self.store
        live = {g.name: g for g in registry.all()}
        committed = store.committed_groups()  # type: ignore[attr-defined]
        out = pb.DescribeGroupsResponse(node=self.server.node_name)  # type: ignore[attr-defined]
        entries = store.groups.groups  # type: ignore[attr-defined]
        # every group of the subscription table (a policy set, a commit, a pop), as RocketMQ's
        # consumerProgress lists them, and the live ones; a group whose members all left without
        # committing is forgotten
        for name in sorted(set(live) | set(committed) | set(entries)):
            if wanted is not None and name != wanted:
                continue
            g = live.get(name) or Group(name)
            if not g.members and name not in committed and name not in entries:
                continue
            topics = set(committed.get(name, ())) | {t for m in g.members.values() for t in m.topics}
            info = pb.GroupInfo(name=name, generation=g.generation, members=_members(registry, g))
            if name in entries:
                info.policy.CopyFrom(group_policy(entries[name]))
            info.inflight, info.retrying, info.dead_letters = self._pop_counts(name, topics)
            for topic in sorted(t for t in topics if not t.startswith(SYSTEM_PREFIXES)):
                queue_ids = range(self.server.queue_count(topic))  # type: ignore[attr-defined]
                for p in store.group_progress(name, topic, queue_ids):  # type: ignore[attr-defined]
                    info.queues.add(
                        topic=topic,
                        queue_id=p.queue_id,
                        holder=g.owners.get((topic, p.queue_id), ""),
                        committed=p.committed,
                        min_offset=p.min_offset,
                        max_offset=p.max_offset,
                        lag=p.lag,
                    )
            out.groups.append(info)
        return out
