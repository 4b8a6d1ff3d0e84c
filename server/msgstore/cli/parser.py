"""The command line: every command, its flags, and the types that check them."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from typing import Any, NoReturn

from .. import __version__
from .admin import cmd_admin
from .common import DEFAULT_SERVER
from .console import cmd_console
from .groups import cmd_groups
from .messages import cmd_pull, cmd_query, cmd_recall, cmd_send
from .offline import cmd_fsck, cmd_inspect
from .pop import cmd_ack, cmd_dlq, cmd_receive
from .serve import cmd_serve
from .topics import cmd_route, cmd_topics
from .users import cmd_users


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
    from ..client.connection import check_endpoint

    try:
        return check_endpoint(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _addresses(text: str) -> str:
    for part in text.split(","):
        if part.strip():
            _address(part.strip())
    return text


_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _duration(text: str) -> float:
    """An argparse type: seconds from '30s', '500ms', '1.5m', '2h', '1d' or a bare number of seconds."""
    t = text.strip()
    unit = next((u for u in ("ms", "s", "m", "h", "d") if t.endswith(u)), "")
    try:
        value = float(t[: len(t) - len(unit)]) * _DURATION_UNITS.get(unit, 1.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (like 30s, 500ms, 5m, 2h)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration must not be negative")
    return value


def _when(text: str) -> float:
    """An argparse type: epoch seconds from an ISO 8601 time (local time without a zone) or a number."""
    import datetime

    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.datetime.fromisoformat(text.strip()).astimezone().timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time (like 2026-11-25T18:30:00+01:00, or epoch seconds)") from None


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
    g.add_argument(
        "--access-key",
        default=os.environ.get("MSGSTORE_ACCESS_KEY") or None,
        help="sign data calls as this user (env MSGSTORE_ACCESS_KEY), with its secret key from --secret-file or MSGSTORE_SECRET_KEY",
    )
    g.add_argument("--secret-file", help="file holding the user's secret key")
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

    json_errors = False  # set by main() when --json is among the arguments (they are not parsed yet)

    def error(self, message: str) -> NoReturn:
        """One line naming the flag, as every other refusal of ours (the usage is a --help away);
        with --json, a JSON object on stderr, as every other error then."""
        if _Parser.json_errors:
            self.exit(2, json.dumps({"error": f"{self.prog}: {message}", "code": "usage"}) + "\n")
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _at_least(least: int):
    return _between(least, None)


def _between(least: int, most: int | None):
    """An argparse type: a whole number from ``least`` (to ``most``), named in the refusal
    (``receive --max 0`` printed 'no messages' and exited 0)."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if n < least or (most is not None and n > most):
            raise argparse.ArgumentTypeError(f"must be {least} or more, got {n}" if most is None else f"must be {least} to {most}, got {n}")
        return n

    return parse


def _arbiter(text: str) -> str:
    from ..ha.etcd import EtcdTarget

    try:
        EtcdTarget.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _whole_seconds(least: int):
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds") from None
        if n < least:
            raise argparse.ArgumentTypeError(f"must be at least {least} seconds, got {n}")
        return n

    return parse


def _failover_after(text: str) -> float | None:
    if text.strip().lower() == "never":
        return None
    try:
        n = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a number of seconds nor 'never'") from None
    if not n >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds (or never), got {text}")
    return n


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="msgstore", description="The msgstore command: run a store, talk to one, or look at a directory offline.")
    parser.set_defaults(json=False)
    parser.add_argument("--version", action="version", version=f"msgstore {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("serve", help="run a store node")
    s.add_argument("--data-dir", default=os.environ.get("MSGSTORE_DATA_DIR", "./data"), help="store root (default ./data)")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 in a cluster)")
    s.add_argument("--port", type=_port(0), default=10911, help="gRPC port (0 = any free port)")
    s.add_argument("--advertise", type=_address, help="host:port others use to reach this node (default POD_IP or host, and port)")
    s.add_argument("--node-name", help="node name in routes (default POD_NAME or the hostname)")
    s.add_argument("--config", help="store config file: JSON, or key=value lines as RocketMQ's broker.conf")
    s.add_argument(
        "--set-aside-unreadable-config",
        action="store_true",
        help="start even when a config/ file and its backup cannot be read (the store refuses otherwise): "
        "the file is kept as <file>.unreadable and its table starts empty (consumer offsets: groups start over)",
    )
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="store setting, e.g. --set flushDiskType=SYNC_FLUSH")
    s.add_argument("--admin-token-file", help="require this token on the admin service")
    s.add_argument("--admin-token-env", default="MSGSTORE_ADMIN_TOKEN", help="or read it from this environment variable")
    s.add_argument("--token-file", help="require this token on the data plane too")
    s.add_argument("--tls-cert", help="server certificate (enables TLS)")
    s.add_argument("--tls-key", help="server key")
    s.add_argument("--tls-client-ca", help="require client certificates signed by this CA")
    s.add_argument(
        "--tls-ca",
        help="CA bundle to verify the other members with (replication, forwarded calls; default: --tls-client-ca, else --tls-cert)",
    )
    s.add_argument(
        "--tls-server-name",
        help="the name to verify in the other members' certificates (they are dialed by address: a certificate "
        "renewed for a new pod address may not have landed yet; on Kubernetes the client Service's name)",
    )
    s.add_argument(
        "--health-port",
        type=_port(-1),
        default=-1,
        help="also answer gRPC health checks, and nothing else, in plain text on this port (the kubelet's gRPC "
        "probes cannot speak TLS; -1 = off)",
    )
    s.add_argument(
        "--access-point",
        nargs="?",
        const="",
        type=lambda t: _addresses(t) if t else "",
        metavar="HOST:PORT[,...]",
        help="clients reach the store through one address (a Service, a port-forward, a load balancer): routes name "
        "these addresses (alone: the address each client used) and any node forwards a call to the queue's master",
    )
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
    s.add_argument(
        "--arbiter",
        metavar="etcd://HOST:PORT[,HOST:PORT][/PREFIX]",
        type=_arbiter,
        default=os.environ.get("MSGSTORE_ARBITER") or None,
        help="etcd decides who is the replica group's master (the same on every member): a master acknowledges only while it "
        "holds its lease there, and elections read the in-sync set from it",
    )
    s.add_argument(
        "--failover-after",
        type=_failover_after,
        default=10.0,
        metavar="SECONDS|never",
        help="with --arbiter: a follower of the recorded in-sync set stands for election once its master has been silent this "
        "long and its lease has run out (default 10, as the operator's failoverAfterSeconds; never: only msgstore admin promote "
        "elects)",
    )
    s.add_argument(
        "--arbiter-ttl",
        type=_whole_seconds(2),
        metavar="SECONDS",
        help="the master's lease in the arbiter (default: --failover-after, at least 3, as the operator sizes the Lease); the "
        "master stops acknowledging 2/3 of it after its last renewal",
    )
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
    s.add_argument(
        "--message-group", metavar="GROUP", help="a FIFO message group: its messages share one queue and go one at a time to FIFO groups"
    )
    later = s.add_mutually_exclusive_group()
    later.add_argument("--delay", type=_duration, metavar="DURATION", help="deliver it this long after it is stored (30s, 5m, 2h)")
    later.add_argument("--deliver-at", type=_when, metavar="TIME", help="deliver it at this time (ISO 8601, local without a zone)")
    later.add_argument("--delay-level", type=int, metavar="N", help="RocketMQ 4's delay level N (of messageDelayLevel)")
    _connection_options(s)
    s.set_defaults(fn=cmd_send)

    s = sub.add_parser("receive", help="receive messages for a group, each invisible to it until acknowledged or its time is up")
    s.add_argument("group")
    s.add_argument("topic")
    s.add_argument("--max", type=_between(1, 1000), default=32, help="at most this many messages, 1 to 1000 (default 32)")
    s.add_argument("--invisible", type=_duration, default=30.0, metavar="DURATION", help="invisible to the group this long (default 30s)")
    s.add_argument("--wait", type=_duration, default=0.0, metavar="DURATION", help="wait this long for a first message")
    picks = s.add_mutually_exclusive_group()
    picks.add_argument("--tags", help="only messages with these tags ('a || b')")
    picks.add_argument(
        "--sql", metavar="SELECTOR", help="only messages whose properties match a SQL92 selector (\"region = 'eu' AND amount > 100\")"
    )
    _connection_options(s)
    s.set_defaults(fn=cmd_receive)

    s = sub.add_parser("ack", help="acknowledge received messages by their receipts")
    s.add_argument("group")
    s.add_argument("topic")
    s.add_argument("receipts", nargs="+", metavar="RECEIPT")
    _connection_options(s)
    s.set_defaults(fn=cmd_ack)

    s = sub.add_parser("dlq", help="a group's dead letters (%%DLQ%%GROUP): list them, or resend them to their original topics")
    s.add_argument("group")
    s.add_argument("--resend", action="store_true", help="send each to its original topic (once: the group's position moves past it)")
    s.add_argument("--max", type=_between(1, 100_000), default=1000, help="at most this many per node (default 1000)")
    _connection_options(s)
    s.set_defaults(fn=cmd_dlq)

    s = sub.add_parser("recall", help="cancel a message sent with --delay/--deliver-at before its time")
    s.add_argument("handle", help="the recall_handle that send printed")
    _connection_options(s)
    s.set_defaults(fn=cmd_recall)

    s = sub.add_parser("pull", help="read messages")
    s.add_argument("topic")
    s.add_argument("--queue", type=int, help="one queue id (default: every queue of every node)")
    s.add_argument("--node", help="one node")
    s.add_argument("--from", dest="start", help="earliest | latest | OFFSET | ISO time (default: earliest, or where --group left off)")
    s.add_argument("--follow", "-f", action="store_true", help="keep waiting for new messages")
    s.add_argument(
        "--max", type=_between(1, 10_000_000), default=100, help="stop after this many messages (default 100; --follow has no limit)"
    )
    picks = s.add_mutually_exclusive_group()
    picks.add_argument("--tag-filter", help="'TagA || TagB'")
    picks.add_argument("--sql", metavar="SELECTOR", help='only messages whose properties match a SQL92 selector ("amount > 100")')
    s.add_argument("--group", help="commit progress as this consumer group")
    _connection_options(s)
    s.set_defaults(fn=cmd_pull)

    s = sub.add_parser("query", help="find messages by key")
    s.add_argument("topic")
    s.add_argument("--key", required=True)
    s.add_argument("--max", type=_between(1, 64 * 1024), default=32, help="at most this many messages (default 32)")
    _connection_options(s)
    s.set_defaults(fn=cmd_query)

    s = sub.add_parser("topics", help="list, create (or change) and delete topics")
    s.add_argument("action", choices=["list", "create", "delete"])
    s.add_argument("name", nargs="?")
    s.add_argument("--queues", type=int, default=0, help="queues per node (create; default the store's defaultTopicQueueNums)")
    s.add_argument(
        "--perm", choices=["rw", "r", "w"], help="read and write, read only or write only (create; an existing topic: unchanged)"
    )
    s.add_argument(
        "--message-type",
        choices=["NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED", "UNSPECIFIED"],
        help="RocketMQ 5's message type (create; RocketMQ 5 clients are told it in their routes; UNSPECIFIED removes it)",
    )
    s.add_argument("--force", action="store_true", help="delete even where the topic holds messages (they are dropped)")
    _connection_options(s)
    s.set_defaults(fn=cmd_topics)

    s = sub.add_parser("groups", help="consumer groups: members, the queues each holds, committed offsets and lag")
    s.add_argument("group", nargs="?", help="only this group")
    policy = s.add_argument_group("retry policy of GROUP, set on every node first (RocketMQ's updateSubGroup)")
    policy.add_argument("--fifo", action=argparse.BooleanOptionalAction, default=None, help="each message group in order, one at a time")
    policy.add_argument(
        "--max-deliveries", type=_at_least(1), default=None, help="deliveries before the DLQ, the first included (retryMaxTimes + 1)"
    )
    policy.add_argument("--backoff", default="", help="seconds to wait after delivery 1, 2, ... (comma-separated, the last repeating)")
    _connection_options(s)
    s.set_defaults(fn=cmd_groups)

    s = sub.add_parser("console", help="serve the web console for a store (sign in as a store user)")
    s.add_argument("--host", default="127.0.0.1", help="address the console listens on (0.0.0.0 in a pod)")
    s.add_argument("--port", type=_port(1), default=8080, help="HTTP port (default 8080)")
    s.add_argument("--kubernetes", metavar="NAMESPACE/NAME", help="show this MessageStore's conditions and the operator's events")
    s.add_argument("--sample-interval", type=float, default=5.0, help="seconds between the samples of a page's plots")
    _connection_options(s)
    s.set_defaults(fn=cmd_console)

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
    a.add_argument("assignments", nargs="*", metavar="KEY=VALUE", help="set: KEY=VALUE ...; get: the KEYs to show (default: all)")
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
        help="make the member --server names its group's master: with an arbiter (serve --arbiter) an election through it; "
        "without one a switchover while every member answers (fence the old master, check the member is in sync and holds "
        "everything, promote it, point the others at it); replacing a master that cannot be reached then takes --unclean",
    )
    a.add_argument("--epoch", type=int, default=0, help="the new epoch (default: one past the newest any member knows)")
    a.add_argument("--mode", choices=["SYNC", "ASYNC"], help="replication mode as master (default: the group's)")
    a.add_argument("--force", action="store_true", help=argparse.SUPPRESS)  # gone: refused, saying what to use instead
    a.add_argument(
        "--unclean",
        action="store_true",
        help="promote although it may lose acknowledged messages (it says how much): a member outside the in-sync set, one "
        "holding less than another, or, without an arbiter, in place of a master that cannot be reached",
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
    a = asub.add_parser("user", help="users who sign calls with an access key and secret key (on every group's master)")
    usub = a.add_subparsers(dest="user_action", required=True, parser_class=_Parser)
    u = usub.add_parser("create", help="a new user without permissions (grant them with `admin acl grant`)")
    u.add_argument("name", metavar="ACCESS_KEY")
    u.add_argument("--secret-key-file", dest="new_secret_file", help="its secret key (default: one is made and shown once)")
    u.add_argument("--super", action="store_true", help="a Super user: every permission")
    _connection_options(u)
    u.set_defaults(fn=cmd_users)
    u = usub.add_parser("delete", help="remove a user")
    u.add_argument("name", metavar="ACCESS_KEY")
    _connection_options(u)
    u.set_defaults(fn=cmd_users)
    u = usub.add_parser("list", help="the users and their entries (never their secrets)")
    _connection_options(u)
    u.set_defaults(fn=cmd_users)
    a = asub.add_parser("acl", help="what a user may do: entries of resource, actions, allow or deny")
    acl = a.add_subparsers(dest="acl_action", required=True, parser_class=_Parser)
    g = acl.add_parser("grant", help="add an entry (a deny that matches always wins)")
    g.add_argument("name", metavar="ACCESS_KEY")
    g.add_argument("resource", help="topic:NAME, topic:PREFIX*, group:NAME, group:PREFIX*, cluster or *")
    g.add_argument("actions", help="comma-separated: pub, sub, create, update, delete, get, list, all")
    g.add_argument("--deny", action="store_true", help="a deny entry (default: allow)")
    g.add_argument("--source", action="append", metavar="CIDR", help="only for calls from these addresses (repeatable)")
    _connection_options(g)
    g.set_defaults(fn=cmd_users)
    g = acl.add_parser("revoke", help="remove the user's entries on a resource, or some of their actions")
    g.add_argument("name", metavar="ACCESS_KEY")
    g.add_argument("resource")
    g.add_argument("actions", nargs="?", help="comma-separated: only these actions (default: the whole entries)")
    g.add_argument("--deny", action="store_const", const=True, default=None, help="only its deny entries")
    g.add_argument("--allow", dest="deny", action="store_const", const=False, help="only its allow entries")
    _connection_options(g)
    g.set_defaults(fn=cmd_users)
    g = acl.add_parser("show", help="a user's entries")
    g.add_argument("name", metavar="ACCESS_KEY")
    _connection_options(g)
    g.set_defaults(fn=cmd_users)

    s = sub.add_parser("inspect", help="describe a store directory (offline)")
    _offline_options(s)
    s.set_defaults(fn=cmd_inspect)

    s = sub.add_parser("fsck", help="check a store directory's consistency (offline)")
    _offline_options(s)
    s.add_argument("--progress", action="store_true", help="show progress even when stderr is not a terminal")
    s.set_defaults(fn=cmd_fsck)

    from ..pipeline.cli import add_commands

    add_commands(sub)
    return parser
