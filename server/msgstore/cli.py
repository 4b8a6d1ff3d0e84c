"""The ``msgstore`` command: run a store, talk to one, or look at a directory offline.

Human-readable tables by default; ``--json`` prints JSON (one object per line for messages).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

from .output import body_text as _body_text
from .output import emit as _emit
from .output import table as _table

DEFAULT_SERVER = "127.0.0.1:10911"


# ------------------------------------------------------------------------------------------- client side


def _read_token(path: str | None, env: str | None) -> str | None:
    from .api.auth import read_token

    return read_token(path, env)


def _token_source(path: str | None, env: str | None):
    """A server's expected token: a file is followed as it changes (a rotated Secret)."""
    from .api.auth import TokenSource

    if path:
        return TokenSource(path=path)
    value = _read_token(None, env)
    return TokenSource(value) if value else None


def _client(args, send_streams: bool = True):
    from .client import Client

    return Client(
        args.server,
        token=_read_token(args.token_file, args.token_env),
        admin_token=_read_token(args.admin_token_file, args.admin_token_env),
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        server_name=args.server_name,
        timeout=args.timeout,
        send_streams=send_streams,
    )


def _note(text: str) -> None:
    """A correction or a warning for the person at the terminal (stderr; never mixed into --json)."""
    print(text, file=sys.stderr)


def _notice(args, kind: str, text: str, **fields: Any) -> None:
    """Something the output alone does not show (no match, a cut-off): a line on stderr, a
    JSON object there with ``--json`` so that a script reading stdout's messages can see it."""
    if getattr(args, "json", False):
        print(json.dumps({"notice": kind, "message": text, **fields}), file=sys.stderr)
    else:
        _note(text)


def _partial(skipped: list[str], what: str) -> int:
    """Name what could not be reached; the exit code says the result is partial (1)."""
    for s in skipped:
        _note(f"skipped {s}: {what}")
    return 1 if skipped else 0


def cmd_send(args) -> int:
    from .client import OutMessage

    if args.file:
        with open(args.file, "rb") as f:
            body = f.read()
    elif args.body is None or args.body == "-":
        if sys.stdin.isatty():
            _note("reading the message body from stdin (end it with Ctrl-D)")
        body = sys.stdin.buffer.read()
        if not body and not args.allow_empty:
            print("error: the message body is empty (stdin had nothing); give a BODY, --file, or --allow-empty", file=sys.stderr)
            return 2
    else:
        body = args.body.encode("utf-8", "surrogateescape")
    props = {}
    for p in args.property:
        name, sep, value = p.partition("=")
        if not sep or not name:
            print(f"error: --property {p!r}: expected NAME=VALUE", file=sys.stderr)
            return 2
        props[name] = value
    with _client(args, send_streams=False) as c:  # one request: no stream threads to start and tear down
        queue = None
        if args.queue is not None or args.node is not None:
            found = _queues(c, args.topic, args.queue, args.node)
            if isinstance(found, str):
                print(f"error: {found}", file=sys.stderr)
                return 2
            queue = found[0]
        res = c.send_batch(
            args.topic,
            [OutMessage(body, keys=args.key, tags=args.tags, properties=props)],
            key=args.key[0] if args.key and queue is None else None,
            queue=queue,
            wait_flush=False if args.no_wait_flush else None,
            visible=not args.no_wait_visible,
            reorder=args.reorder,
        )[0]
    row = {
        "status": res.status,
        "message_id": res.message_id,
        "node": res.node,
        "queue": res.queue_id,
        "offset": res.queue_offset,
        "commitlog_offset": res.commitlog_offset,
    }
    if res.error:
        row["error"] = res.error
    _emit(args, row)
    return 0 if res.ok else 1


def _queues(c, topic: str, queue_id: int | None, node: str | None):
    """The route's queues selected by ``--queue``/``--node``, or an error text naming what does
    not exist (an unknown queue or node used to select every queue without a word)."""
    route = c.route(topic, refresh=True)
    if node is not None and route.node(node) is None:
        return f"no node {node!r}; the nodes are {', '.join(n.name or n.address for n in route.nodes)}"
    every = [q for q in route.key_queues() if node is None or node in (q.node, q.address)]
    chosen = [q for q in every if queue_id is None or q.queue_id == queue_id]
    if not chosen:
        ids = sorted({q.queue_id for q in every})
        where = f" on {node}" if node else ""
        return (
            f"topic {topic} has no queue {queue_id}{where} (its queues are {ids[0]}-{ids[-1]})" if ids else f"no queues of {topic}{where}"
        )
    return chosen


def _parse_time(text: str) -> int:
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise SystemExit(f"error: --from takes earliest, latest, an offset (>= 0) or an ISO time, not {text!r}") from None
    if when.tzinfo is None:
        when = when.astimezone()
    return int(when.timestamp() * 1000)


def _start_positions(c, topic: str, queues, spec: str, offsets) -> dict:
    """Where each queue starts, with a note where the asked offset had to be corrected."""
    out = {}
    for q in queues:
        lo, hi = offsets[q]
        if spec == "earliest":
            out[q] = lo
        elif spec == "latest":
            out[q] = hi
        elif spec.isdigit():
            want = int(spec)
            out[q] = min(max(want, lo), hi)
            if want < lo:
                _note(f"{q}: offsets below {lo} were deleted by retention; reading from {lo}")
            elif want > hi:
                _note(f"{q}: offset {want} is past the end ({hi}); nothing to read there")
        else:
            out[q] = c.offset_by_time(topic, q, _parse_time(spec))
    return out


def _message_row(node: str, m) -> dict[str, Any]:
    return {
        "node": node,
        "queue": m.queue_id,
        "offset": m.queue_offset,
        "msg_id": m.msg_id,
        "tags": m.tags or "",
        "keys": " ".join(m.user_keys),
        "store_time": _ms(m.store_timestamp),
        "body": _body_text(m.body),
    }


def _ms(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


MESSAGE_COLUMNS = [("node", 14), ("queue", 5), ("offset", 8), ("tags", 10), ("keys", 16), ("store_time", 29), ("body", 60)]


class MessagePrinter:
    """Messages as one line each, in the same fixed columns whether pulled, followed or
    queried; bodies and long fields are cut in the table (``--json`` carries them whole)."""

    def __init__(self, as_json: bool):
        self.as_json = as_json
        self.count = 0

    def _cell(self, value: Any, width: int, last: bool) -> str:
        text = str(value).replace("\n", "\\n")
        if len(text) > width:
            text = text[: width - 1] + "…"
        return text if last else text.ljust(width)

    def print(self, row: dict[str, Any]) -> None:
        if self.as_json:
            print(json.dumps(row), flush=True)
        else:
            if self.count == 0:
                print("  ".join(self._cell(c.upper(), w, i == len(MESSAGE_COLUMNS) - 1) for i, (c, w) in enumerate(MESSAGE_COLUMNS)))
            print(
                "  ".join(self._cell(row.get(c, ""), w, i == len(MESSAGE_COLUMNS) - 1) for i, (c, w) in enumerate(MESSAGE_COLUMNS)),
                flush=True,
            )
        self.count += 1


def cmd_pull(args) -> int:
    from .client import Consumer

    if args.start is not None and args.start not in ("earliest", "latest") and args.start.startswith("-"):
        print(f"error: --from {args.start}: an offset is >= 0 (or earliest, latest, an ISO time)", file=sys.stderr)
        return 2
    with _client(args) as c:
        listed_without: list[str] = []
        if args.topic not in c.topics(skipped=listed_without) and not listed_without:
            if not args.follow:
                print(f"error: no topic {args.topic!r} on any node (msgstore topics list shows them)", file=sys.stderr)
                return 1
            _note(f"topic {args.topic!r} does not exist yet; following it from its first message")
        chosen = _queues(c, args.topic, args.queue, args.node)
        if isinstance(chosen, str):
            print(f"error: {chosen}", file=sys.stderr)
            return 2
        unread: list[str] = []
        offsets = c.queue_offsets(args.topic, skipped=unread)
        wanted = {q.node for q in chosen} | {q.address for q in chosen}
        skipped = [s for s in unread if s.split(" ", 1)[0] in wanted]  # down nodes whose queues were asked for
        queues = [q for q in chosen if q in offsets]
        # a reader for the group, not a member of it: it takes no queue from the group's members
        consumer = Consumer(c, None, args.topic, tag_filter=args.tag_filter, max_messages=min(args.max, 1024))
        consumer.positions = _start_positions(c, args.topic, queues, args.start or "earliest", offsets)
        if args.group and args.start is None:  # resume where the group left off
            for q in queues:
                done = c.committed(args.group, args.topic, q)
                if done >= 0:
                    consumer.positions[q] = done
        out = MessagePrinter(args.json)
        committed: dict[Any, int] = {}
        try:
            while True:
                batch = consumer.poll(timeout=1.0 if args.follow else 0)
                printed: dict[Any, int] = {}  # queue → offset after its last printed message
                left: dict[Any, int] = {}
                for rec in batch:
                    left[rec.queue] = left.get(rec.queue, 0) + 1
                for rec in batch:
                    if not args.follow and out.count >= args.max:
                        break
                    out.print(_message_row(rec.queue.node, rec.message))
                    printed[rec.queue] = rec.queue_offset + 1
                    left[rec.queue] -= 1
                if args.group:
                    # commit exactly what was printed: a queue whose messages were all shown
                    # moves to where the consumer is; one cut short by --max, to after its last
                    # shown message; a queue with nothing shown keeps its committed offset
                    commit = {q: consumer.positions[q] if left.get(q, 0) == 0 else printed[q] for q in printed}
                    commit.update({q: pos for q, pos in consumer.positions.items() if q not in left})
                    for q, off in commit.items():
                        if committed.get(q) != off:
                            c.commit(args.group, args.topic, q, off)
                            committed[q] = off
                if not args.follow and (not batch or out.count >= args.max):
                    if out.count >= args.max and batch:
                        _notice(args, "max", f"stopped after {args.max} messages (--max); more may follow", max=args.max)
                    break
        except KeyboardInterrupt:
            pass
    if not out.count and not args.follow:
        _notice(args, "no messages", "no messages")
    return _partial(skipped, "its queues were not read")


def cmd_query(args) -> int:
    """A bounded answer (``--max``), so ``--json`` prints one JSON array, ``[]`` when nothing
    matched; ``pull``, which may follow forever, prints one object per line instead."""
    with _client(args) as c:
        listed_without: list[str] = []
        if args.topic not in c.topics(skipped=listed_without) and not listed_without:
            if args.json:
                print("[]")
            print(f"error: no topic {args.topic!r} on any node (msgstore topics list shows them)", file=sys.stderr)
            return 1
        skipped: list[str] = []
        found = c.query(args.topic, args.key, args.max, skipped=skipped)
    rows = [
        {
            "node": node,
            "queue": m.queue_id,
            "offset": m.queue_offset,
            "msg_id": m.msg_id,
            "tags": m.tags,
            "keys": " ".join(m.keys),
            "store_time": _ms(m.store_timestamp),
            "body": _body_text(m.body),
        }
        for node, m in found
    ]
    if args.json:
        print(json.dumps(rows))
    else:
        out = MessagePrinter(False)
        for row in rows:
            out.print(row)
    if not rows:
        _notice(args, "no messages", f"no messages with key {args.key!r} in topic {args.topic!r}")
    if _partial(skipped, "it was not searched"):
        return 1
    return 0 if rows else 1


def cmd_topics(args) -> int:
    skipped: list[str] = []
    with _client(args) as c:
        if args.action == "create":
            infos = c.create_topic(args.name, args.queues, skipped=skipped)
            _emit(args, [{"topic": i.name, "queues": i.write_queue_nums} for i in infos], ["topic", "queues"])
            return _partial(skipped, "the topic was not created there: run the command again when it is back")
        topics = c.topics(skipped=skipped)
    _emit(
        args,
        [{"topic": t, "queues": " ".join(f"{n}:{q}" for n, q in per.items())} for t, per in sorted(topics.items())],
        ["topic", "queues"],
    )
    return _partial(skipped, "its topics are not listed")


def group_report(found) -> list[dict[str, Any]]:
    """``describe_groups`` answers of every node as one record per group: its members (as any
    node knows them) and every queue with holder, committed offset, max offset and lag."""
    groups: dict[str, dict[str, Any]] = {}
    for node, info in found:
        g = groups.setdefault(info.name, {"group": info.name, "members": {}, "queues": [], "lag": 0})
        host_of = {m.client_id: m.host for m in info.members}
        for m in info.members:
            g["members"].setdefault(
                m.client_id,
                {
                    "client_id": m.client_id,
                    "host": m.host,
                    "topics": list(m.topics),
                    "mode": "broadcasting" if m.broadcasting else "clustering",
                },
            )
        for q in info.queues:
            g["queues"].append(
                {
                    "topic": q.topic,
                    "node": node.name,
                    "queue": q.queue_id,
                    "member": q.holder,
                    "host": host_of.get(q.holder, ""),
                    "committed": q.committed,
                    "max": q.max_offset,
                    "lag": q.lag,
                }
            )
            g["lag"] += q.lag
    out = []
    for name in sorted(groups):
        g = groups[name]
        g["members"] = sorted(g["members"].values(), key=lambda m: m["client_id"])
        g["queues"].sort(key=lambda q: (q["topic"], q["node"], q["queue"]))
        out.append(g)
    return out


def cmd_groups(args) -> int:
    skipped: list[str] = []
    with _client(args) as c:
        report = group_report(c.describe_groups(args.group or "", skipped=skipped))
    if args.json:
        _emit(args, report)
    else:
        rows = []
        for g in report:
            for q in g["queues"]:
                committed = q["committed"] if q["committed"] >= 0 else "-"
                rows.append({"group": g["group"], **q, "member": q["member"] or "-", "committed": committed})
            held = {q["member"] for q in g["queues"]}
            for m in g["members"]:
                if m["client_id"] not in held:  # a member with no queue (more members than queues, or broadcasting)
                    rows.append(
                        {
                            "group": g["group"],
                            "topic": ",".join(m["topics"]),
                            "node": "-",
                            "queue": "-",
                            "member": m["client_id"],
                            "host": m["host"],
                        }
                    )
        if not rows:
            print("no consumer groups" + (f" named {args.group}" if args.group else ""))
        else:
            print(_table(rows, ["group", "topic", "node", "queue", "member", "host", "committed", "max", "lag"]))
    return _partial(skipped, "its queues are not listed")


def cmd_route(args) -> int:
    with _client(args) as c:
        route = c.route(args.topic or "", refresh=True)
    rows = []
    for n in route.nodes:
        row: dict[str, Any] = {"node": n.name, "address": n.address, "ready": n.ready, "queues": len(n.queue_ids) if args.topic else "-"}
        if len(n.members) > 1:  # a replica group: who is master, who follows and how far behind
            if args.json:
                row["members"] = [
                    {"name": m.name, "address": m.address, "role": m.role, "ready": m.ready, "epoch": m.epoch, "lag_bytes": m.lag_bytes}
                    for m in n.members
                ]
            else:
                row["members"] = ", ".join(
                    f"{m.name} {m.role}"
                    + (f" lag {m.lag_bytes} B" if m.role == "SLAVE" else f" epoch {m.epoch}")
                    + ("" if m.ready else " (down)")
                    for m in n.members
                )
        rows.append(row)
    columns = ["node", "address", "ready", "queues"] + (["members"] if any("members" in r for r in rows) else [])
    _emit(args, rows, columns)
    return 0


def _typed_config(values: dict[str, str]) -> dict[str, Any]:
    """Config values as their types (the API carries text): numbers as numbers in --json."""
    from .store.config import KEYS, ConfigError, _coerce

    out: dict[str, Any] = {}
    for k, v in values.items():
        try:
            out[k] = _coerce(k, KEYS[k], v) if k in KEYS else v
        except ConfigError:
            out[k] = v
    return out


def _admin_targets(c, node: str | None, action: str = "") -> list[str]:
    """The nodes an admin command acts on: ``--node``, else every member of the store (a role
    change: only the node ``--server`` names, never every node at once)."""
    if node is not None:
        return [node]
    if action in ("promote", "role"):
        return [c.endpoints[0]]
    return [m.name or m.address for m in c.members()]


def cmd_admin(args) -> int:
    from .client import StoreError

    failed = 0
    with _client(args) as c:
        results: list[dict[str, Any]] = []
        for node in _admin_targets(c, args.node, args.action):
            try:
                results.append(_admin_one(c.admin(node), node, args))
            except StoreError as e:
                failed += 1
                results.append(
                    {
                        "node": node,
                        "state": "down" if e.code.name in ("UNAVAILABLE", "DEADLINE_EXCEEDED") else "error",
                        "error": f"{e.code.name}: {e.details}",
                    }
                )
    if args.json:  # one node: its result; several: a list, each result naming its node
        print(json.dumps(results if len(results) > 1 else results[0], indent=2))
    elif args.action == "status":
        print(_table([_status_row(s) for s in results], STATUS_COLUMNS))
    elif args.action == "config" and args.config_action == "get":
        _print_configs(results)
    else:
        for r in results:
            print(
                f"{r['node']}: "
                + ", ".join(f"{k}={json.dumps(v) if isinstance(v, (dict, list)) else v}" for k, v in r.items() if k != "node")
            )
    for r in results:
        if "error" in r:
            _note(f"{r['node']}: {r['error']}")
    return 1 if failed else 0


def _admin_one(admin, node: str, args) -> dict[str, Any]:
    if args.action == "status":
        return admin.status()
    if args.action == "config":
        if args.config_action == "get":
            return {"node": node, "config": _typed_config(admin.config())}
        from .store.config import parse_assignments

        res = admin.update_config(parse_assignments(args.assignments), dry_run=args.dry_run)
        return {
            "node": node,
            "applied": _typed_config(dict(res.applied)),
            "restart_required": _typed_config(dict(res.restart_required)),
            "generation": res.generation,
            "dry_run": res.dry_run,
        }
    if args.action == "promote":
        return _promote(admin, node, args)
    if args.action == "role":
        if args.forget:
            return {"node": node, **_role_row(admin.forget_member(args.forget))}
        if args.replica_of:
            return {"node": node, **_role_row(admin.set_role(args.replica_of))}
        return {"node": node, **_role_row(admin.role_pb())}
    if args.action == "delete-expired":
        res = admin.manual_delete()
        return {"node": node, "deleted_segments": res.deleted_segments, "min_phy_offset": res.min_phy_offset, "runs_armed": res.runs_armed}
    removed = admin.clean_expired_consume_queues() if args.action == "clean-expired-cq" else admin.clean_unused_topics()
    return {"node": node, "removed": removed}


def _promote(admin, node: str, args) -> dict[str, Any]:
    """The manual failover (msgstore.client.failover): fence, elect from the in-sync set, promote, repoint."""
    from .client.failover import PromotionRefused, promote

    try:
        p = promote(admin.client, admin.address, mode=args.mode or "", epoch=args.epoch, force=args.force, unclean=args.unclean, say=_note)
    except PromotionRefused as e:
        import grpc

        from .client import StoreError

        raise StoreError(grpc.StatusCode.FAILED_PRECONDITION, str(e), node) from None
    assert p.status is not None
    row = {"node": node, **_role_row(p.status), "fenced_old_master": p.old_master if p.fenced else "", "repointed": p.repointed}
    if p.notes:
        row["notes"] = p.notes
    return row


def _role_row(r) -> dict[str, Any]:
    row: dict[str, Any] = {"group": r.group, "role": r.role, "epoch": r.epoch, "end_offset": r.end_offset}
    if r.role == "MASTER":
        row["mode"] = r.mode
        row["followers"] = [
            {"member": f.member, "acked_offset": f.acked_offset, "lag_bytes": f.lag_bytes, "in_sync": f.in_sync} for f in r.followers
        ]
    else:
        row.update(master=r.master_address, connected=r.connected, lag_bytes=r.lag_bytes, lag_seconds=round(r.lag_seconds, 3))
    return row


def _print_configs(results: list[dict[str, Any]]) -> None:
    """One line per key, one column per node (a difference between nodes shows at once)."""
    ok = [r for r in results if "config" in r]
    keys = sorted({k for r in ok for k in r["config"]})
    rows = [{"key": k, **{r["node"]: r["config"].get(k, "") for r in ok}} for k in keys]
    print(_table(rows, ["key", *[r["node"] for r in ok]]))


STATUS_COLUMNS = [
    "node",
    "state",
    "recovery",
    "recovery_ms",
    "disk",
    "disk_full",
    "min_offset",
    "max_offset",
    "lag",
    "segments",
    "generation",
    "pending_restart",
]


def _status_row(s: dict[str, Any]) -> dict[str, Any]:
    if "error" in s and "recovery" not in s:
        return {"node": s.get("node"), "state": s.get("state", "down")}
    rec = s.get("recovery", {})
    usage = s.get("disk_usage", -1)
    pending = s.get("pending_restart") or {}
    return {
        "node": s.get("node"),
        "state": s.get("state"),
        "recovery": rec.get("mode"),
        "recovery_ms": rec.get("duration_ms"),
        "disk": "?" if usage < 0 else f"{usage:.0%}",
        "disk_full": s.get("disk_full"),
        "min_offset": s.get("min_phy_offset"),
        "max_offset": s.get("max_phy_offset"),
        "lag": s.get("dispatch_behind_bytes"),
        "segments": s.get("commitlog_segments"),
        "generation": s.get("config_generation"),
        "pending_restart": " ".join(f"{k}={v}" for k, v in sorted(pending.items())) or "-",
    }


# ------------------------------------------------------------------------------------------- offline


def _settings(args) -> dict[str, Any]:
    from .api.server import load_config_file
    from .store.config import parse_assignments

    out: dict[str, Any] = {}
    if getattr(args, "config", None):
        out.update(load_config_file(args.config))
    out.update(parse_assignments(getattr(args, "set", None) or []))
    return out


def _warn_if_open(root: str) -> None:
    from .store.offline import open_by

    pid = open_by(root)
    if pid:
        _note(f"warning: a running store (pid {pid}) has {root} open: what is read may change while it is read")


def cmd_inspect(args) -> int:
    from .store.offline import inspect_dir

    _warn_if_open(args.dir)
    info = inspect_dir(args.dir, _settings(args))
    if args.json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    print(f"store {info['root']}  abort file: {'yes' if info['abort_file'] else 'no'}  locked by pid: {info['locked_by_pid'] or '-'}")
    print("\ncommit log")
    print(_table(info["commitlog"], ["name", "size", "records_end"]) if info["commitlog"] else "  (none)")
    print("\nconsume queues")
    print(
        _table(info["consume_queues"], ["topic", "queue_id", "segments", "min_offset", "max_offset", "max_phy_offset"])
        if info["consume_queues"]
        else "  (none)"
    )
    print("\nindex files")
    print(_table(info["index"], ["name", "keys", "capacity", "begin_phy_offset", "end_phy_offset"]) if info["index"] else "  (none)")
    if "checkpoint" in info:
        print("\ncheckpoint")
        for k, v in info["checkpoint"].items():
            print(f"  {k}: {v}")
    print(f"\ntopics: {', '.join(info['topics']) or '-'}")
    return 0


def cmd_fsck(args) -> int:
    from .store.offline import fsck

    def progress(stage: str, done: int, total: int) -> None:
        if args.json or not sys.stderr.isatty() and not args.progress:
            return
        pct = 100 * done / total if total else 100
        bar = "#" * int(pct / 5)
        print(f"\rfsck {stage:15s} [{bar:<20s}] {pct:5.1f}%", end="", file=sys.stderr, flush=True)

    _warn_if_open(args.dir)
    rep = fsck(args.dir, _settings(args), progress)
    if not args.json:
        print(file=sys.stderr)
    data = {
        "ok": rep.ok,
        "records": rep.records,
        "bytes": rep.bytes,
        "commitlog_end": rep.commitlog_end,
        "units_checked": rep.units_checked,
        "keys_checked": rep.keys_checked,
        "problems": rep.problems,
        "notes": rep.notes,
    }
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(f"{rep.records} records ({rep.bytes} bytes), {rep.units_checked} queue units, {rep.keys_checked} keys checked")
        for p in rep.problems:
            print(f"PROBLEM  {p}")
        for n in rep.notes:
            print(f"note     {n}")
        print("ok" if rep.ok else f"{len(rep.problems)} problem(s)")
    return 0 if rep.ok else 1


# ------------------------------------------------------------------------------------------- serve


def cmd_serve(args) -> int:
    from . import logs
    from .api.server import ServerOptions, StartError, serve
    from .store.config import ConfigError

    logs.setup(args.log_format, args.log_level)
    try:
        settings = _settings(args)
        from .store import StoreConfig

        StoreConfig(settings)  # fail fast, naming the key
    except (ConfigError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    peers = [p for p in (args.peers or "").split(",") if p.strip()]
    options = ServerOptions(
        data_dir=args.data_dir,
        host=args.host,
        port=args.port,
        advertise=args.advertise,
        node_name=args.node_name,
        settings=settings,
        admin_token=_token_source(args.admin_token_file, args.admin_token_env),
        data_token=_token_source(args.token_file, None),
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        peers=peers,
        peers_dns=args.peers_dns,
        peers_file=args.peers_file,
        metrics_port=None if args.metrics_port < 0 else args.metrics_port,
        metrics_host=args.metrics_host,
        grace_s=args.grace,
        lock_wait_s=args.lock_wait,
        group=args.group,
        replica_of=args.replica_of,
        roles_file=args.roles_file,
    )
    try:
        return asyncio.run(serve(options))
    except KeyboardInterrupt:
        return 0
    except StartError as e:  # one line, not a traceback
        print(f"error: {e}", file=sys.stderr)
        return 2


# ------------------------------------------------------------------------------------------- parser


def _port(lowest: int) -> Callable[[str], int]:
    """An argparse type: a TCP port (0 = any free one, -1 = off where ``lowest`` allows)."""

    def parse(text: str) -> int:
        try:
            port = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
        if not lowest <= port <= 65535:
            raise argparse.ArgumentTypeError(f"{port} is out of range: a port is 0-65535" + (" (-1 = off)" if lowest < 0 else ""))
        return port

    return parse


def _address(text: str) -> str:
    from .client.connection import check_endpoint

    try:
        return check_endpoint(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _addresses(text: str) -> str:
    for part in text.split(","):
        if part.strip():
            _address(part.strip())
    return text


def _connection_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("connection")
    g.add_argument(
        "--server",
        type=_addresses,
        default=os.environ.get("MSGSTORE_SERVER", DEFAULT_SERVER),
        help="host:port of any node, comma-separated for several (env MSGSTORE_SERVER)",
    )
    g.add_argument("--token-file", help="file holding the data-plane token, when the server requires one")
    g.add_argument("--token-env", default="MSGSTORE_TOKEN", help="environment variable holding the data-plane token")
    g.add_argument("--admin-token-file", help="file holding the admin token")
    g.add_argument("--admin-token-env", default="MSGSTORE_ADMIN_TOKEN", help="environment variable holding the admin token")
    g.add_argument("--tls-ca", help="CA bundle to verify the server (enables TLS)")
    g.add_argument("--tls-cert", help="client certificate (mutual TLS)")
    g.add_argument("--tls-key", help="client key (mutual TLS)")
    g.add_argument("--server-name", help="TLS name to verify when connecting by IP")
    g.add_argument("--timeout", type=float, default=10.0, help="seconds per call")


def _offline_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", help="store root directory")
    p.add_argument("--config", help="store config file (JSON or key=value lines)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="store setting (segment sizes, index geometry)")


class _Parser(argparse.ArgumentParser):
    """Every (sub)command takes --json, before or after the subcommand's name."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        # SUPPRESS: a subcommand that is not given --json leaves the main parser's value alone
        self.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")

    def error(self, message: str) -> NoReturn:
        """One line naming the flag, as every other refusal of ours (the usage is a --help away)."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="msgstore", description=__doc__.splitlines()[0])
    parser.set_defaults(json=False)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("serve", help="run a store node")
    s.add_argument("--data-dir", default=os.environ.get("MSGSTORE_DATA_DIR", "./data"), help="store root (default ./data)")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 in a cluster)")
    s.add_argument("--port", type=_port(0), default=10911, help="gRPC port (0 = any free port)")
    s.add_argument("--advertise", type=_address, help="host:port others use to reach this node (default POD_IP or host, and port)")
    s.add_argument("--node-name", help="node name in routes (default POD_NAME or the hostname)")
    s.add_argument("--config", help="store config file: JSON, or key=value lines as RocketMQ's broker.conf")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="store setting, e.g. --set flushDiskType=SYNC_FLUSH")
    s.add_argument("--admin-token-file", help="require this token on the admin service")
    s.add_argument("--admin-token-env", default="MSGSTORE_ADMIN_TOKEN", help="or read it from this environment variable")
    s.add_argument("--token-file", help="require this token on the data plane too")
    s.add_argument("--tls-cert", help="server certificate (enables TLS)")
    s.add_argument("--tls-key", help="server key")
    s.add_argument("--tls-client-ca", help="require client certificates signed by this CA")
    s.add_argument("--peers", type=_addresses, help="other nodes, comma-separated host:port")
    s.add_argument("--peers-dns", type=_address, help="host:port of a headless Service listing the nodes")
    s.add_argument("--peers-file", help="file of host:port lines, re-read when it changes")
    s.add_argument("--metrics-port", type=_port(-1), default=10912, help="Prometheus port (-1 = off)")
    s.add_argument("--metrics-host", help="address for the metrics endpoint (default: --host)")
    s.add_argument("--grace", type=float, default=10.0, help="seconds in-flight calls get at shutdown")
    s.add_argument("--lock-wait", type=float, default=30.0, help="seconds to wait for a previous process to release the data directory")
    s.add_argument("--group", help="replica group this node belongs to (default: its node name, a group of one)")
    s.add_argument(
        "--replica-of", metavar="HOST:PORT", type=_address, help="follow this master (brokerRole SLAVE): a byte-for-byte copy of its log"
    )
    s.add_argument("--roles-file", help="the operator's roles of every replica group (JSON), followed when it changes")
    s.add_argument("--log-format", choices=["text", "json"], default=os.environ.get("MSGSTORE_LOG_FORMAT", "text"))
    s.add_argument("--log-level", default="info")
    s.set_defaults(fn=cmd_serve)

    s = sub.add_parser("send", help="send a message")
    s.add_argument("topic")
    s.add_argument("body", nargs="?", help="message body (default: stdin; '-' = stdin)")
    s.add_argument("--file", help="read the body from a file")
    s.add_argument("--key", action="append", default=[], help="message key (repeatable); the first also picks the queue")
    s.add_argument("--tags")
    s.add_argument("--property", action="append", default=[], metavar="NAME=VALUE")
    s.add_argument("--queue", type=int, help="queue id (default: by key, else round robin)")
    s.add_argument("--node", help="node for --queue")
    s.add_argument("--no-wait-flush", action="store_true", help="do not wait for the disk flush (SYNC_FLUSH stores)")
    s.add_argument(
        "--no-wait-visible",
        action="store_true",
        help="answer once stored, before the message can be pulled or queried (by default the answer waits "
        "until it can, so a pull or query right after finds it)",
    )
    s.add_argument(
        "--reorder",
        action="store_true",
        help="when the key's queue is down, send to another queue (breaks the key's order) instead of failing",
    )
    s.add_argument("--allow-empty", action="store_true", help="send an empty body read from stdin")
    _connection_options(s)
    s.set_defaults(fn=cmd_send)

    s = sub.add_parser("pull", help="read messages")
    s.add_argument("topic")
    s.add_argument("--queue", type=int, help="one queue id (default: every queue of every node)")
    s.add_argument("--node", help="one node")
    s.add_argument("--from", dest="start", help="earliest | latest | OFFSET | ISO time (default: earliest, or where --group left off)")
    s.add_argument("--follow", "-f", action="store_true", help="keep waiting for new messages")
    s.add_argument("--max", type=int, default=100, help="stop after this many messages (default 100; --follow has no limit)")
    s.add_argument("--tag-filter", help="'TagA || TagB'")
    s.add_argument("--group", help="commit progress as this consumer group")
    _connection_options(s)
    s.set_defaults(fn=cmd_pull)

    s = sub.add_parser("query", help="find messages by key")
    s.add_argument("topic")
    s.add_argument("--key", required=True)
    s.add_argument("--max", type=int, default=32, help="at most this many messages (default 32)")
    _connection_options(s)
    s.set_defaults(fn=cmd_query)

    s = sub.add_parser("topics", help="list or create topics")
    s.add_argument("action", choices=["list", "create"])
    s.add_argument("name", nargs="?")
    s.add_argument("--queues", type=int, default=0)
    _connection_options(s)
    s.set_defaults(fn=cmd_topics)

    s = sub.add_parser("groups", help="consumer groups: members, the queues each holds, committed offsets and lag")
    s.add_argument("group", nargs="?", help="only this group")
    _connection_options(s)
    s.set_defaults(fn=cmd_groups)

    s = sub.add_parser("route", help="the nodes of the store")
    s.add_argument("topic", nargs="?")
    _connection_options(s)
    s.set_defaults(fn=cmd_route)

    s = sub.add_parser("admin", help="status, configuration and maintenance of every node (admin token)")
    asub = s.add_subparsers(dest="action", required=True, parser_class=_Parser)
    node_help = "one node (name or address); default: every node of the store, each named in the output"
    a = asub.add_parser("status", help="each node's state, recovery, disk, offsets and settings waiting for a restart")
    a.add_argument("--node", help=node_help)
    _connection_options(a)
    a = asub.add_parser("config", help="get, or set (validated as a whole; hot keys apply at once)")
    a.add_argument("config_action", choices=["get", "set"])
    a.add_argument("assignments", nargs="*", metavar="KEY=VALUE")
    a.add_argument("--dry-run", action="store_true")
    a.add_argument("--node", help=node_help)
    _connection_options(a)
    a = asub.add_parser("role", help="a member's role in its replica group; --replica-of makes it follow that master")
    a.add_argument("--replica-of", metavar="HOST:PORT", type=_address, help="follow this master (after cutting back what it never had)")
    a.add_argument("--forget", metavar="NAME", help="a member that left the group for good: no longer counted in its majority")
    a.add_argument("--node", help="the member (default: the node --server names)")
    _connection_options(a)
    a = asub.add_parser(
        "promote",
        help="make the member --server names its group's master: fence the old master, check the member is in sync and "
        "holds everything, promote it, point the others at it (a manual failover or switchover)",
    )
    a.add_argument("--epoch", type=int, default=0, help="the new epoch (default: one past the newest any member knows)")
    a.add_argument("--mode", choices=["SYNC", "ASYNC"], help="replication mode as master (default: the group's)")
    a.add_argument(
        "--force",
        action="store_true",
        help="promote although the old master cannot be reached to fence it (it may acknowledge writes until it learns of "
        "the new epoch; in ASYNC mode those are lost)",
    )
    a.add_argument(
        "--unclean",
        action="store_true",
        help="promote a member outside the in-sync set, or one that holds less than the old master (it may lack acknowledged messages)",
    )
    a.add_argument("--node", help="the member (default: the node --server names)")
    _connection_options(a)
    for name, text in (
        ("delete-expired", "delete expired commit-log segments now (arms 20 cleaner runs)"),
        ("clean-expired-cq", "remove consume queues whose data is gone"),
        ("clean-unused-topics", "remove consume queues of topics not in topics.json"),
    ):
        a = asub.add_parser(name, help=text)
        a.add_argument("--node", help=node_help)
        _connection_options(a)
    s.set_defaults(fn=cmd_admin)

    s = sub.add_parser("inspect", help="describe a store directory (offline)")
    _offline_options(s)
    s.set_defaults(fn=cmd_inspect)

    s = sub.add_parser("fsck", help="check a store directory's consistency (offline)")
    _offline_options(s)
    s.add_argument("--progress", action="store_true", help="show progress even when stderr is not a terminal")
    s.set_defaults(fn=cmd_fsck)

    from .pipeline.cli import add_commands

    add_commands(sub)
    return parser


def main(argv: Iterable[str] | None = None) -> int:
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `msgstore pull ... | head` ends quietly
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.command == "topics" and args.action == "create" and not args.name:
        parser.error("topics create needs a NAME")
    if args.command == "admin" and args.action == "config" and args.config_action == "set" and not args.assignments:
        parser.error("admin config set needs KEY=VALUE")
    from .client import StoreError

    try:
        return args.fn(args)
    except StoreError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
