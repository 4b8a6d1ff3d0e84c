"""What every command shares: a client from the connection flags, notices for the person at
the terminal (or a script), store settings from --config/--set, the message table."""

from __future__ import annotations

import datetime as dt
import json
import sys
from typing import Any

from ..output import body_text as _body_text

DEFAULT_SERVER = "127.0.0.1:10911"


def read_token(path: str | None, env: str | None) -> str | None:
    from ..api.auth import read_token

    return read_token(path, env)


def token_source(path: str | None, env: str | None):
    """A server's expected token: a file is followed as it changes (a rotated Secret)."""
    from ..api.auth import TokenSource

    if path:
        return TokenSource(path=path)
    value = read_token(None, env)
    return TokenSource(value) if value else None


def credentials(args) -> tuple[str | None, str | None]:
    """(access key, secret key) from --access-key and --secret-file / MSGSTORE_SECRET_KEY."""
    access_key = getattr(args, "access_key", None)
    if not access_key:
        if getattr(args, "secret_file", None):
            raise SystemExit("error: --secret-file is a user's secret key: give the user with --access-key NAME (or MSGSTORE_ACCESS_KEY)")
        return None, None
    secret = read_token(getattr(args, "secret_file", None), "MSGSTORE_SECRET_KEY")
    if not secret:
        raise SystemExit(f"error: --access-key {access_key} needs its secret key: --secret-file FILE or MSGSTORE_SECRET_KEY")
    return access_key, secret


def open_client(args, send_streams: bool = True):
    access_key, secret_key = credentials(args)
    return connect(
        args,
        token=read_token(args.token_file, args.token_env),
        admin_token=read_token(args.admin_token_file, args.admin_token_env),
        access_key=access_key,
        secret_key=secret_key,
        send_streams=send_streams,
    )


def connect(
    args,
    *,
    token: str | None = None,
    admin_token: str | None = None,
    access_key: str | None = None,
    secret_key: str | None = None,
    send_streams: bool = True,
):
    """A client for the connection flags (--server, TLS, --timeout) with the identity given."""
    from ..client import Client

    return Client(
        args.server,
        token=token,
        admin_token=admin_token,
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        server_name=args.server_name,
        access_key=access_key,
        secret_key=secret_key,
        timeout=args.timeout,
        send_streams=send_streams,
    )


def note(text: str) -> None:
    """A correction or a warning for the person at the terminal (stderr; never mixed into --json)."""
    print(text, file=sys.stderr)


def error(args, text: str, code: str = "") -> None:
    """A refusal for the person (``error: ...``), or with ``--json`` a JSON object on stderr
    (``{"error": ..., "code": ...}``) that a script can read as it reads the output."""
    if getattr(args, "json", False):
        print(json.dumps({"error": text, **({"code": code} if code else {})}), file=sys.stderr)
    else:
        print(f"error: {text}", file=sys.stderr)


def notice(args, kind: str, text: str, **fields: Any) -> None:
    """Something the output alone does not show (no match, a cut-off): a line on stderr, a
    JSON object there with ``--json`` so that a script reading stdout's messages can see it."""
    if getattr(args, "json", False):
        print(json.dumps({"notice": kind, "message": text, **fields}), file=sys.stderr)
    else:
        note(text)


def partial(args, skipped: list[str], what: str) -> int:
    """Name what could not be reached (a notice: JSON with ``--json``); the exit code says the
    result is partial (1)."""
    for s in skipped:
        notice(args, "skipped", f"skipped {s}: {what}", node=s)
    return 1 if skipped else 0


def store_settings(args) -> dict[str, Any]:
    from ..api.member import load_config_file
    from ..store.config import parse_assignments

    out: dict[str, Any] = {}
    if getattr(args, "config", None):
        out.update(load_config_file(args.config))
    out.update(parse_assignments(getattr(args, "set", None) or []))
    return out


def uniq_key(m) -> str:
    """RocketMQ's message id (what its clients print and look up), beside our offset id."""
    return (m.properties or {}).get("UNIQ_KEY", "")


def message_row(node: str, m) -> dict[str, Any]:
    return {
        "node": node,
        "queue": m.queue_id,
        "offset": m.queue_offset,
        "msg_id": m.msg_id,
        "uniq_key": uniq_key(m),
        "tags": m.tags or "",
        "keys": " ".join(m.user_keys),
        "store_time": format_ms(m.store_timestamp),
        "body": _body_text(m.body),
        "properties": dict(m.properties or {}),  # (--json only: the table keeps its columns)
    }


def format_ms(ms: int) -> str:
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
