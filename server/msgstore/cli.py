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
from collections.abc import Iterable
from typing import Any

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


def _client(args):
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
    )


def cmd_send(args) -> int:
    from .client import OutMessage

    if args.file:
        with open(args.file, "rb") as f:
            body = f.read()
    elif args.body is None or args.body == "-":
        body = sys.stdin.buffer.read()
    else:
        body = args.body.encode()
    props = dict(p.split("=", 1) for p in args.property)
    with _client(args) as c:
        queue = None
        if args.queue is not None:
            queue = next(
                (
                    q
                    for q in c.route(args.topic).queues
                    if q.queue_id == args.queue and (args.node is None or args.node in (q.node, q.address))
                ),
                None,
            )
            if queue is None:
                print(f"error: no queue {args.queue} of {args.topic}" + (f" on {args.node}" if args.node else ""), file=sys.stderr)
                return 2
        res = c.send_batch(
            args.topic,
            [OutMessage(body, keys=args.key, tags=args.tags, properties=props)],
            key=args.key[0] if args.key else None,
            queue=queue,
            wait_flush=False if args.no_wait_flush else None,
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


def _start_positions(c, topic: str, queues, spec: str) -> dict:
    offsets = c.queue_offsets(topic)
    out = {}
    for q in queues:
        lo, hi = offsets.get(q, (0, 0))
        if spec == "earliest":
            out[q] = lo
        elif spec == "latest":
            out[q] = hi
        elif spec.lstrip("-").isdigit():
            out[q] = int(spec)
        else:
            out[q] = c.offset_by_time(topic, q, _parse_time(spec))
    return out


def _parse_time(text: str) -> int:
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise SystemExit(f"error: --from takes earliest, latest, an offset or an ISO time, not {text!r}") from None
    if when.tzinfo is None:
        when = when.astimezone()
    return int(when.timestamp() * 1000)


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


def cmd_pull(args) -> int:
    from .client import Consumer

    with _client(args) as c:
        route = c.route(args.topic)
        queues = [
            q
            for q in route.queues
            if (args.queue is None or q.queue_id == args.queue) and (args.node is None or args.node in (q.node, q.address))
        ]
        consumer = Consumer(c, args.group, args.topic, tag_filter=args.tag_filter, max_messages=min(args.max, 1024))
        if args.group and args.start is None:  # resume where the group left off
            consumer.positions = {q: off for q, off in consumer.positions.items() if q in queues}
        else:
            consumer.positions = _start_positions(c, args.topic, queues, args.start or "earliest")
        shown = 0
        rows = []
        try:
            while True:
                batch = consumer.poll(timeout=1.0 if args.follow else 0)
                for rec in batch:
                    row = _message_row(rec.queue.node, rec.message)
                    if args.follow or args.json:
                        print(json.dumps(row) if args.json else _line(row), flush=True)
                    else:
                        rows.append(row)
                    shown += 1
                    if not args.follow and shown >= args.max:
                        break
                if args.group and batch:
                    consumer.commit()
                if not args.follow and (not batch or shown >= args.max):
                    break
        except KeyboardInterrupt:
            pass
    if rows:
        print(_table(rows, ["node", "queue", "offset", "tags", "keys", "store_time", "body"]))
    elif not args.json and not args.follow:
        print("no messages", file=sys.stderr)
    return 0


def _line(row: dict[str, Any]) -> str:
    return f"{row['node']}/{row['queue']}@{row['offset']}  tags={row['tags']}  keys={row['keys']}  {row['body']}"


def cmd_query(args) -> int:
    with _client(args) as c:
        found = c.query(args.topic, args.key, args.max)
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
    _emit(args, rows, ["node", "queue", "offset", "msg_id", "tags", "keys", "store_time", "body"])
    return 0 if rows else 1


def cmd_topics(args) -> int:
    with _client(args) as c:
        if args.action == "create":
            infos = c.create_topic(args.name, args.queues)
            _emit(args, [{"topic": i.name, "queues": i.write_queue_nums} for i in infos], ["topic", "queues"])
            return 0
        topics = c.topics()
    _emit(
        args,
        [{"topic": t, "queues": " ".join(f"{n}:{q}" for n, q in per.items())} for t, per in sorted(topics.items())],
        ["topic", "queues"],
    )
    return 0


def cmd_route(args) -> int:
    with _client(args) as c:
        route = c.route(args.topic or "", refresh=True)
    _emit(
        args,
        [{"node": n.name, "address": n.address, "ready": n.ready, "queues": len(n.queue_ids)} for n in route.nodes],
        ["node", "address", "ready", "queues"],
    )
    return 0


def cmd_admin(args) -> int:
    with _client(args) as c:
        nodes = [n.name for n in c.nodes()] if args.node is None and args.action == "status" else [args.node]
        if args.action == "status":
            rows = []
            for n in nodes:
                st = c.admin(n).status()
                rows.append(st)
            if args.json:
                print(json.dumps(rows if len(rows) > 1 else rows[0], indent=2))
            else:
                print(
                    _table(
                        [_status_row(s) for s in rows],
                        [
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
                        ],
                    )
                )
            return 0
        admin = c.admin(args.node)
        if args.action == "config":
            if args.config_action == "get":
                _emit(args, admin.config())
                return 0
            from .store.config import parse_assignments

            res = admin.update_config(parse_assignments(args.assignments), dry_run=args.dry_run)
            _emit(
                args,
                {
                    "applied": dict(res.applied),
                    "restart_required": dict(res.restart_required),
                    "generation": res.generation,
                    "dry_run": res.dry_run,
                },
            )
            return 0
        if args.action == "delete-expired":
            res = admin.manual_delete()
            _emit(args, {"deleted_segments": res.deleted_segments, "min_phy_offset": res.min_phy_offset, "runs_armed": res.runs_armed})
            return 0
        removed = admin.clean_expired_consume_queues() if args.action == "clean-expired-cq" else admin.clean_unused_topics()
        _emit(args, {"removed": removed})
        return 0


def _status_row(s: dict[str, Any]) -> dict[str, Any]:
    rec = s.get("recovery", {})
    usage = s.get("disk_usage", -1)
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


def cmd_inspect(args) -> int:
    from .store.offline import inspect_dir

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
    }
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(f"{rep.records} records ({rep.bytes} bytes), {rep.units_checked} queue units, {rep.keys_checked} keys checked")
        for p in rep.problems:
            print(f"PROBLEM  {p}")
        print("ok" if rep.ok else f"{len(rep.problems)} problem(s)")
    return 0 if rep.ok else 1


# ------------------------------------------------------------------------------------------- serve


def cmd_serve(args) -> int:
    from . import logs
    from .api.server import ServerOptions, serve
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
    )
    try:
        return asyncio.run(serve(options))
    except KeyboardInterrupt:
        return 0


# ------------------------------------------------------------------------------------------- parser


def _connection_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("connection")
    g.add_argument(
        "--server",
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="msgstore", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    sub = parser.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run a store node")
    s.add_argument("--data-dir", default=os.environ.get("MSGSTORE_DATA_DIR", "./data"), help="store root (default ./data)")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 in a cluster)")
    s.add_argument("--port", type=int, default=10911, help="gRPC port (0 = any free port)")
    s.add_argument("--advertise", help="host:port others use to reach this node (default POD_IP or host, and port)")
    s.add_argument("--node-name", help="node name in routes (default POD_NAME or the hostname)")
    s.add_argument("--config", help="store config file: JSON, or key=value lines as RocketMQ's broker.conf")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="store setting, e.g. --set flushDiskType=SYNC_FLUSH")
    s.add_argument("--admin-token-file", help="require this token on the admin service")
    s.add_argument("--admin-token-env", default="MSGSTORE_ADMIN_TOKEN", help="or read it from this environment variable")
    s.add_argument("--token-file", help="require this token on the data plane too")
    s.add_argument("--tls-cert", help="server certificate (enables TLS)")
    s.add_argument("--tls-key", help="server key")
    s.add_argument("--tls-client-ca", help="require client certificates signed by this CA")
    s.add_argument("--peers", help="other nodes, comma-separated host:port")
    s.add_argument("--peers-dns", help="host:port of a headless Service listing the nodes")
    s.add_argument("--peers-file", help="file of host:port lines, re-read when it changes")
    s.add_argument("--metrics-port", type=int, default=10912, help="Prometheus port (-1 = off)")
    s.add_argument("--metrics-host", help="address for the metrics endpoint (default: --host)")
    s.add_argument("--grace", type=float, default=10.0, help="seconds in-flight calls get at shutdown")
    s.add_argument("--lock-wait", type=float, default=30.0, help="seconds to wait for a previous process to release the data directory")
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
    _connection_options(s)
    s.set_defaults(fn=cmd_send)

    s = sub.add_parser("pull", help="read messages")
    s.add_argument("topic")
    s.add_argument("--queue", type=int, help="one queue id (default: every queue of every node)")
    s.add_argument("--node", help="one node")
    s.add_argument("--from", dest="start", help="earliest | latest | OFFSET | ISO time (default: earliest, or where --group left off)")
    s.add_argument("--follow", "-f", action="store_true", help="keep waiting for new messages")
    s.add_argument("--max", type=int, default=100, help="stop after this many (without --follow)")
    s.add_argument("--tag-filter", help="'TagA || TagB'")
    s.add_argument("--group", help="commit progress as this consumer group")
    _connection_options(s)
    s.set_defaults(fn=cmd_pull)

    s = sub.add_parser("query", help="find messages by key")
    s.add_argument("topic")
    s.add_argument("--key", required=True)
    s.add_argument("--max", type=int, default=32)
    _connection_options(s)
    s.set_defaults(fn=cmd_query)

    s = sub.add_parser("topics", help="list or create topics")
    s.add_argument("action", choices=["list", "create"])
    s.add_argument("name", nargs="?")
    s.add_argument("--queues", type=int, default=0)
    _connection_options(s)
    s.set_defaults(fn=cmd_topics)

    s = sub.add_parser("route", help="the nodes of the store")
    s.add_argument("topic", nargs="?")
    _connection_options(s)
    s.set_defaults(fn=cmd_route)

    s = sub.add_parser("admin", help="status, configuration and maintenance (admin token)")
    asub = s.add_subparsers(dest="action", required=True)
    a = asub.add_parser("status")
    a.add_argument("--node")
    _connection_options(a)
    a = asub.add_parser("config")
    a.add_argument("config_action", choices=["get", "set"])
    a.add_argument("assignments", nargs="*", metavar="KEY=VALUE")
    a.add_argument("--dry-run", action="store_true")
    a.add_argument("--node")
    _connection_options(a)
    for name, text in (
        ("delete-expired", "delete expired commit-log segments now (arms 20 cleaner runs)"),
        ("clean-expired-cq", "remove consume queues whose data is gone"),
        ("clean-unused-topics", "remove consume queues of topics not in topics.json"),
    ):
        a = asub.add_parser(name, help=text)
        a.add_argument("--node")
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
