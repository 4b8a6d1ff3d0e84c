"""What each page shows, gathered with the signed-in user's client (plain functions over
:class:`msgstore.client.Client`, run off the event loop): the store answers each call as it
would answer that user, so a page shows what the user may read and says what was refused."""

from __future__ import annotations

import base64
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..client import Client, OutMessage, QueueRef, StoreError
from ..record.recall_handle import RecallHandle

DLQ_PREFIX = "%DLQ%"
RETRY_PREFIX = "%RETRY%"
TIMER_TOPIC = "rmq_sys_wheel_timer"
SYSTEM_PREFIXES = ("rmq_sys_", "RMQ_SYS_", "SCHEDULE_TOPIC", "TRANS_", "%RETRY%", "%DLQ%")
HELD_TOPICS_LIMIT = 100  # topics whose messages held the topics page counts (one call per node each)
OLDEST_QUEUES_LIMIT = 64  # queues a topic page reads the first message of
SEARCH_LIMIT = 64  # (a query by key answers at most 64 per node)
DROP_ON_RESEND = ("DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "TAGS", "KEYS", "UNIQ_KEY")


def is_system(topic: str) -> bool:
    return topic.startswith(SYSTEM_PREFIXES)


def refusal(e: Exception) -> str:
    """A store's refusal as a person reads it: its gRPC code and message."""
    if isinstance(e, StoreError):
        return f"{e.code.name}: {e.details}" if getattr(e, "code", None) is not None else str(e)
    return f"{type(e).__name__}: {e}"


# ---------------------------------------------------------------------------------------------- messages


@dataclass
class MessageView:
    """One message as the pages show it, from a pull (StoredMessage) or a lookup (pb.Message)."""

    topic: str
    queue_id: int
    queue_offset: int
    msg_id: str
    node: str
    tags: str
    keys: list[str]
    properties: dict[str, str]
    born_ms: int
    store_ms: int
    reconsume_times: int
    body: bytes
    uniq_key: str = ""
    due_ms: int = 0  # a timed message's delivery time

    @classmethod
    def of(cls, m: Any, node: str = "") -> MessageView:
        props = dict(m.properties)
        keys = [w for w in props.get("KEYS", "").split(" ") if w]
        due = props.get("TIMER_DELIVER_MS", "")
        return cls(
            topic=props.get("REAL_TOPIC", "") if m.topic == TIMER_TOPIC else m.topic,
            queue_id=m.queue_id,
            queue_offset=m.queue_offset,
            msg_id=m.msg_id,
            node=node,
            tags=props.get("TAGS", "") or "",
            keys=keys,
            properties=props,
            born_ms=m.born_timestamp,
            store_ms=m.store_timestamp,
            reconsume_times=m.reconsume_times,
            body=bytes(m.body),
            uniq_key=props.get("UNIQ_KEY", ""),
            due_ms=int(due) if due.isdigit() else 0,
        )

    def body_as(self, form: str) -> str:
        """The body as text, indented JSON or hex (what the message page offers)."""
        if form == "hex":
            return " ".join(f"{b:02x}" for b in self.body[:65536])
        try:
            text = self.body.decode("utf-8")
        except UnicodeDecodeError:
            return "(not UTF-8 text: shown as hex)\n" + self.body_as("hex")
        if form == "json":
            try:
                return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
            except ValueError:
                return "(not JSON: shown as text)\n" + text
        return text

    def preview(self, n: int = 80) -> str:
        text = self.body[:n].decode("utf-8", "replace")
        return text + ("…" if len(self.body) > n else "")

    @property
    def ref(self) -> str:
        """How the message page finds it again: node, topic, queue, offset."""
        raw = "\x1f".join((self.node, self.topic if not self.due_ms else TIMER_TOPIC, str(self.queue_id), str(self.queue_offset)))
        return base64.urlsafe_b64encode(raw.encode()).decode()


def by_key(c: Client, topic: str, key: str, begin_ms: int = 0, end_ms: int = 0) -> list[MessageView]:
    """Messages whose KEYS or client message id (UNIQ_KEY) is ``key``, newest first."""
    found = c.query(topic, key, max_results=SEARCH_LIMIT, begin=begin_ms, end=end_ms)
    return sorted((MessageView.of(m, node) for node, m in found), key=lambda v: -v.store_ms)


def by_id(c: Client, msg_id: str, topic: str = "") -> list[MessageView]:
    """By the store's offset message id (it names the node), else by the client's message id
    (UNIQ_KEY) within ``topic``: the two ids RocketMQ gives a message."""
    try:
        m = c.get_message(msg_id)
        return [MessageView.of(m)]
    except (StoreError, ValueError) as e:
        if not topic:
            if isinstance(e, StoreError) and e.code.name != "INVALID_ARGUMENT":
                raise
            raise ValueError(f"{msg_id} is not an offset message id: give the topic to find a client message id") from None
    return [v for v in by_key(c, topic, msg_id) if v.uniq_key == msg_id or v.msg_id == msg_id]


def by_time(c: Client, topic: str, begin_ms: int, end_ms: int) -> list[MessageView]:
    """Messages stored between the two times, over every queue (at most SEARCH_LIMIT)."""
    out: list[MessageView] = []
    for q, (lo, hi) in sorted(c.queue_offsets(topic).items(), key=lambda x: (x[0].node, x[0].queue_id)):
        if hi <= lo:
            continue
        start = max(lo, c.offset_by_time(topic, q, begin_ms))
        stop = min(hi, c.offset_by_time(topic, q, end_ms, upper=True) if end_ms else hi)
        offset = start
        while offset < stop and len(out) < SEARCH_LIMIT:
            got = c.pull(topic, q, offset, max_messages=min(32, stop - offset))
            if not got.messages:
                break
            out.extend(
                MessageView.of(m, q.node)
                for m in got.messages
                if begin_ms <= m.store_timestamp and (not end_ms or m.store_timestamp <= end_ms)
            )
            offset = got.next_offset
    return sorted(out, key=lambda v: v.store_ms)[:SEARCH_LIMIT]


def by_offset(c: Client, topic: str, node: str, queue_id: int, offset: int, n: int = 20) -> list[MessageView]:
    q = _queue(c, topic, node, queue_id)
    return [MessageView.of(m, q.node) for m in c.pull(topic, q, offset, max_messages=n).messages]


def one(c: Client, ref: str) -> MessageView:
    node, topic, qid, offset = base64.urlsafe_b64decode(ref.encode()).decode().split("\x1f")
    got = by_offset(c, topic, node, int(qid), int(offset), 1)
    if not got or got[0].queue_offset != int(offset):
        raise LookupError(f"no message at {topic} {node}/{qid} offset {offset} (deleted by retention?)")
    return got[0]


def _queue(c: Client, topic: str, node: str, queue_id: int) -> QueueRef:
    for n in c.route(topic, refresh=True).nodes:
        if n.name == node or (not node and queue_id in n.queue_ids):
            return QueueRef(n.name, n.address, queue_id)
    raise LookupError(f"no node {node or '(any)'} holds {topic} queue {queue_id}")


# ---------------------------------------------------------------------------------------------- cluster


@dataclass
class GroupView:
    name: str
    master: str
    ready: bool
    epoch: int
    members: list[dict[str, Any]]
    in_sync: list[str] = field(default_factory=list)
    arbiter: str = ""


def cluster(c: Client, admin: Client | None) -> dict[str, Any]:
    """Replica groups (masters, epochs, each member's role and lag) from the route any signed-in
    user may read; with the console's admin client (read-only calls: role and status) the
    in-sync sets, arbiter holders and each member's state and disk too."""
    groups = []
    problems = []
    for n in c.nodes():
        members = [
            {
                "name": m.name,
                "address": m.address,
                "role": m.role,
                "ready": m.ready,
                "epoch": m.epoch,
                "lag_bytes": m.lag_bytes,
                "fenced": m.fenced,
                "stale_ms": m.stale_ms,
            }
            for m in n.members
        ]
        master = next((m["name"] for m in members if m["role"] != "SLAVE" and m["ready"] and not m["fenced"]), "")
        g = GroupView(n.name, master, n.ready, max((m["epoch"] for m in members), default=0), members)
        if admin is not None:
            with ThreadPoolExecutor(max_workers=max(1, len(members))) as pool:  # members at once: one down costs one deadline
                list(pool.map(lambda m, g=g: _member_status(admin, g, m), members))
        if not n.ready:
            problems.append(f"replica group {n.name} has no master taking writes")
        for m in members:
            if not m["ready"]:
                problems.append(f"{m['name']} ({m['address']}) is not ready")
        groups.append(g)
    return {"groups": groups, "problems": problems, "healthy": not problems, "admin": admin is not None}


def _member_status(admin: Client, g: GroupView, m: dict[str, Any]) -> None:
    try:
        role = admin.admin(m["address"]).role_pb()
        m["lag_seconds"] = round(role.lag_seconds, 1)
        if role.role == "MASTER" and role.sync_state_set:
            g.in_sync = list(role.sync_state_set)
        if role.HasField("arbiter") and role.arbiter.holder:
            g.arbiter = f"{role.arbiter.holder} (epoch {role.arbiter.epoch}, {role.arbiter.where})"
        st = admin.admin(m["address"]).status()
        m["state"] = st.get("state", "")
        m["disk_usage"] = st.get("disk_usage")
        m["recovery"] = (st.get("recovery") or {}).get("mode", "")
    except StoreError as e:
        m["error"] = refusal(e)


# ---------------------------------------------------------------------------------------------- topics


def topics(c: Client) -> list[dict[str, Any]]:
    infos = c.topic_infos()
    merged: dict[str, dict[str, Any]] = {}
    for node, ts in infos.items():
        for name, t in ts.items():
            row = merged.setdefault(
                name,
                {
                    "name": name,
                    "queues": 0,
                    "nodes": [],
                    "perm": t.perm,
                    "message_type": t.message_type,
                    "held": None,
                    "system": is_system(name),
                },
            )
            row["queues"] += t.write_queue_nums
            row["nodes"].append(node)
    rows = sorted(merged.values(), key=lambda r: (r["system"], r["name"]))
    counted = [r for r in rows if not r["system"]][:HELD_TOPICS_LIMIT]
    with ThreadPoolExecutor(max_workers=8) as pool:
        for row, (n_held, n_stored) in zip(counted, pool.map(lambda r: held(c, r["name"]), counted)):
            row["held"], row["stored"] = n_held, n_stored
    return rows


def held(c: Client, topic: str) -> tuple[int, int]:
    """(messages held now, messages ever stored) over the topic's queues."""
    offsets = c.queue_offsets(topic, skip_unavailable=True)
    return sum(max(0, hi - lo) for lo, hi in offsets.values()), sum(hi for _lo, hi in offsets.values())


def topic(c: Client, name: str, admin: Client | None = None) -> dict[str, Any]:
    """Its queues, the oldest message, and the bytes held, estimated from the first and last
    message of each queue (the store keeps no byte count per topic; reading every message's
    size would cost a read of the whole topic)."""
    offsets = c.queue_offsets(name, skip_unavailable=True)
    queues = []
    oldest = 0
    sizes: list[int] = []
    for q, (lo, hi) in sorted(offsets.items(), key=lambda x: (x[0].node, x[0].queue_id)):
        row = {"node": q.node, "queue_id": q.queue_id, "min": lo, "max": hi, "held": max(0, hi - lo)}
        if hi > lo and len(queues) < OLDEST_QUEUES_LIMIT:
            first = c.pull(name, q, lo, max_messages=1).messages
            if first:
                row["oldest_ms"] = first[0].store_timestamp
                oldest = min(oldest or first[0].store_timestamp, first[0].store_timestamp)
                sizes.append(first[0].store_size)
            last = c.pull(name, q, hi - 1, max_messages=1).messages if hi - 1 > lo else []
            sizes.extend(m.store_size for m in last)
        queues.append(row)
    held = sum(r["held"] for r in queues)
    out: dict[str, Any] = {"name": name, "queues": queues, "oldest_ms": oldest, "held": held, "stored": sum(r["max"] for r in queues)}
    if sizes:
        out["bytes_estimate"] = int(held * sum(sizes) / len(sizes))
        out["sampled"] = len(sizes)
    if admin is not None:
        try:
            config = admin.admin(c.nodes()[0].address).config()
            out["retention"] = {k: config.get(k, "") for k in ("fileReservedTime", "deleteWhen", "diskMaxUsedSpaceRatio")}
        except StoreError:
            pass
    return out


# ---------------------------------------------------------------------------------------------- groups


def groups(c: Client) -> list[dict[str, Any]]:
    merged: dict[str, dict[str, Any]] = {}
    for _node, g in c.describe_groups():
        row = merged.setdefault(
            g.name, {"name": g.name, "members": set(), "lag": 0, "inflight": 0, "retrying": 0, "dead_letters": 0, "topics": set()}
        )
        row["members"] |= {m.client_id for m in g.members}
        row["lag"] += sum(q.lag for q in g.queues)
        row["topics"] |= {q.topic for q in g.queues}
        row["inflight"] += g.inflight
        row["retrying"] += g.retrying
        row["dead_letters"] += g.dead_letters
    return sorted(merged.values(), key=lambda r: r["name"])


def group(c: Client, name: str) -> dict[str, Any]:
    queues = []
    members: dict[str, Any] = {}
    totals = {"inflight": 0, "retrying": 0, "dead_letters": 0}
    policy = None
    for node, g in c.describe_groups(name):
        if g.name != name:
            continue
        for m in g.members:
            members[m.client_id] = m
        for q in g.queues:
            queues.append(
                {
                    "node": node.name,
                    "topic": q.topic,
                    "queue_id": q.queue_id,
                    "holder": q.holder,
                    "committed": q.committed,
                    "max": q.max_offset,
                    "lag": q.lag,
                }
            )
        for k in totals:
            totals[k] += getattr(g, k)
        if g.HasField("policy"):
            policy = g.policy
    return {
        "name": name,
        "queues": sorted(queues, key=lambda r: (r["topic"], r["node"], r["queue_id"])),
        "members": list(members.values()),
        "lag": sum(q["lag"] for q in queues),
        "policy": policy,
        **totals,
    }


def lag_of(c: Client, name: str) -> int:
    return sum(q.lag for _n, g in c.describe_groups(name) if g.name == name for q in g.queues)


def dead_letters(c: Client, group_name: str, limit: int = 50) -> list[dict[str, Any]]:
    """The group's dead letters not yet resent (from its position in its DLQ, as `msgstore dlq`)."""
    dlq = DLQ_PREFIX + group_name
    out: list[dict[str, Any]] = []
    try:
        nodes = c.route(dlq, refresh=True).nodes
    except StoreError as e:
        if e.code.name == "NOT_FOUND":
            return []
        raise
    offsets = c.queue_offsets(dlq, skip_unavailable=True)  # (every node's, read once)
    for node in nodes:
        q = QueueRef(node.name, node.address, 0)
        done = _dlq_position(c, group_name, dlq, q, offsets)
        for m in c.pull(dlq, q, done, max_messages=limit).messages:
            v = MessageView.of(m, node.name)
            out.append({"message": v, "origin": v.properties.get("DLQ_ORIGIN_TOPIC", ""), "next": m.queue_offset == done})
            done = -1  # only the first one per node is next in order
    return out


def _dlq_position(c: Client, group_name: str, dlq: str, q: QueueRef, offsets: dict[QueueRef, tuple[int, int]] | None = None) -> int:
    """The group's next dead letter: its position in its DLQ, or the DLQ's first message
    still stored when retention deleted past it (or nothing was ever resent). ``offsets``: the
    DLQ's queue offsets when the caller has them already."""
    committed = c.committed(group_name, dlq, q)
    if offsets is None:
        offsets = c.queue_offsets(dlq, skip_unavailable=True)
    lo, _hi = offsets.get(q, (0, 0))
    return max(committed, lo, 0)


def resend_dead_letter(c: Client, group_name: str, node: str, offset: int) -> str:
    """Resend the dead letter at ``offset`` of the group's DLQ on ``node`` to its original topic
    and move the group's DLQ position past it. Only the next one in order: the position is a
    single offset, so resending one out of order would either list it again or hide the ones
    before it. Refusals are the store's (the user must be allowed to publish to the topic)."""
    dlq = DLQ_PREFIX + group_name
    q = _queue(c, dlq, node, 0)
    done = _dlq_position(c, group_name, dlq, q)
    if offset != done:
        raise ValueError(f"dead letters are resent in order: the next one on {node} is at offset {done}, not {offset}")
    got = c.pull(dlq, q, offset, max_messages=1).messages
    if not got or got[0].queue_offset != offset:
        raise LookupError(f"no dead letter at offset {offset} on {node}")
    m = got[0]
    origin = m.properties.get("DLQ_ORIGIN_TOPIC", "")
    if not origin:
        raise ValueError("this dead letter does not name its original topic")
    props = {k: v for k, v in m.properties.items() if k not in DROP_ON_RESEND}
    user_keys = [w for w in m.properties.get("KEYS", "").split(" ") if w]
    # a FIFO message goes back to its message group's queue (its order), as its first send did
    res = c.send_batch(
        origin, [OutMessage(bytes(m.body), keys=user_keys, tags=m.tags, properties=props)], key=props.get("__SHARDINGKEY") or None
    )[0]
    if not res.ok:
        raise RuntimeError(f"the store refused the resend: {res.status} {res.error}")
    try:
        c.commit(group_name, dlq, q, offset + 1)
    except StoreError as e:
        return (
            f"resent to {origin} as {res.message_id}, but the group's position in its DLQ did not move ({refusal(e)}): "
            "it is listed again, do not resend it"
        )
    return f"resent to {origin} as {res.message_id}"


# ---------------------------------------------------------------------------------------------- timers


SCHEDULED_WINDOW = 4096  # timer-queue entries the scheduled page reads (the newest): a page view is bounded


def scheduled(c: Client, now_ms: int | None = None, limit: int = 100) -> list[MessageView]:
    """Timed messages not yet due (deliver_at / delay in ms), soonest first, from the newest
    SCHEDULED_WINDOW entries of each node's timer queue (a timer scheduled long ago behind many
    newer ones is not listed: `msgstore pull rmq_sys_wheel_timer` reads it all). A recall is a
    marker entry after the message naming its topic and UNIQ_KEY, as the store matches it."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    out: list[MessageView] = []
    try:
        offsets = c.queue_offsets(TIMER_TOPIC, skip_unavailable=True)
    except StoreError as e:
        if e.code.name == "NOT_FOUND":
            return []
        raise
    for q, (lo, hi) in offsets.items():
        pending: list[MessageView] = []
        recalled: dict[tuple[str, str], int] = {}  # (topic, UNIQ_KEY) -> the marker's offset
        offset = max(lo, hi - SCHEDULED_WINDOW)
        while offset < hi:
            got = c.pull(TIMER_TOPIC, q, offset, max_messages=64)
            if not got.messages:
                break
            for m in got.messages:
                v = MessageView.of(m, q.node)
                if "TIMER_DEL_UNIQKEY" in v.properties:
                    recalled[(v.topic, v.properties["TIMER_DEL_UNIQKEY"])] = m.queue_offset
                elif v.due_ms > now_ms:
                    pending.append(v)
            offset = got.next_offset
        out.extend(v for v in pending if recalled.get((v.topic, v.uniq_key), -1) < v.queue_offset)
    return sorted(out, key=lambda v: v.due_ms)[:limit]


def recall(c: Client, topic: str, due_ms: int, uniq_key: str, group_name: str) -> None:
    """Cancel a timed message before its time (RocketMQ 5.3's recall), as its sender could."""
    c.recall(RecallHandle(topic, due_ms, uniq_key, group_name).encode())


# ---------------------------------------------------------------------------------------------- changes


PERMS = {"6": "read and write", "4": "read only", "2": "write only"}
MESSAGE_TYPES = ("", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED", "UNSPECIFIED")


def change_topic(c: Client, name: str, queues: int, perm: int, message_type: str) -> str:
    """Create the topic, or change it, on every node, as the CLI does; queues only grow here (a
    shrink hides the messages in the queues it drops from consumers)."""
    if queues < 0 or queues > 1024:
        raise ValueError(f"queues: {queues} is out of range (1-1024, 0 keeps them)")
    if queues:
        have = max((ts[name].write_queue_nums for ts in c.topic_infos().values() if name in ts), default=0)
        if queues < have:
            raise ValueError(f"queues: {name} has {have} queues per node; they only grow here (a shrink would hide their messages)")
    if str(perm) not in PERMS and perm != 0:
        raise ValueError(f"perm: {perm} is not 6, 4 or 2")
    if message_type not in MESSAGE_TYPES:
        raise ValueError(f"message type: {message_type!r} is not one of {', '.join(t for t in MESSAGE_TYPES if t)}")
    infos = c.create_topic(name, queues, perm=perm, message_type=message_type)
    return f"topic {name}: {sum(i.write_queue_nums for i in infos)} queues over {len(infos)} node(s)"


def change_group(c: Client, name: str, max_deliveries: int, fifo: bool | None) -> str:
    """``fifo`` None leaves the group's order as it is (a page that could not read it must not
    turn a FIFO group concurrent)."""
    if max_deliveries < 0 or max_deliveries > 1000:
        raise ValueError(f"max deliveries: {max_deliveries} is out of range (1-1000, 0 keeps it)")
    c.update_group(name, max_deliveries=max_deliveries, fifo=fifo)
    order = {True: "FIFO", False: "concurrent", None: "order kept"}[fifo]
    return f"group {name}: {order}" + (f", at most {max_deliveries} deliveries" if max_deliveries else "")
