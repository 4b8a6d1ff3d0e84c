"""``receive``, ``ack`` and ``dlq``: message-level consumption by a consumer group."""

from __future__ import annotations

import sys

from ..output import body_text as _body_text
from ..output import emit as _emit
from .common import error, open_client, uniq_key

COLUMNS = ["topic", "attempt", "body", "receipt"]


def cmd_receive(args) -> int:
    with open_client(args, send_streams=False) as c:
        got = c.receive(args.group, args.topic, args.max, invisible=args.invisible, wait=args.wait, tags=args.tags, sql=args.sql)
    rows = [
        {
            "topic": r.topic,
            "queue": str(r.queue),
            "offset": r.queue_offset,
            "msg_id": r.msg_id,
            "uniq_key": uniq_key(r),
            "attempt": r.attempt,
            "invisible_until_ms": r.invisible_until_ms,
            "body": _body_text(r.body),
            "receipt": r.receipt,
        }
        for r in got
    ]
    if not rows and not args.json:
        print("no messages", file=sys.stderr)
        return 0
    _emit(args, rows, COLUMNS)
    return 0


def cmd_ack(args) -> int:
    with open_client(args, send_streams=False) as c:
        errors = c.ack(args.group, args.topic, args.receipts)
    rows = [{"receipt": r, "ok": not e, "error": e} for r, e in zip(args.receipts, errors)]
    _emit(args, rows, ["ok", "error", "receipt"])
    return 0 if not any(errors) else 1


def cmd_dlq(args) -> int:
    """List the group's dead letters, or resend them to their original topics (each once: the
    group's position in its DLQ moves past what was resent)."""
    from ..client import OutMessage, QueueRef

    dlq = f"%DLQ%{args.group}"
    with open_client(args, send_streams=False) as c:
        route = c.route(dlq, refresh=True)
        rows, resent = [], 0
        for node in route.nodes:
            q = QueueRef(node.name, node.address, 0)
            # resent below this (the group's position in its DLQ), or retention deleted below it
            lo, _hi = c.queue_offsets(dlq, skip_unavailable=True).get(q, (0, 0))
            done = max(c.committed(args.group, dlq, q), lo, 0)
            got = c.pull(dlq, q, done if args.resend else lo, max_messages=args.max)
            for m in got.messages:
                origin = m.properties.get("DLQ_ORIGIN_TOPIC", "")
                rows.append(
                    {
                        "origin_topic": origin,
                        "origin_msg_id": m.properties.get("DLQ_ORIGIN_MESSAGE_ID", ""),
                        "deliveries": m.reconsume_times,
                        "offset": m.queue_offset,
                        "resent": m.queue_offset < done,
                        "body": _body_text(m.body),
                    }
                )
                if args.resend and origin:
                    drop = ("DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "TAGS", "KEYS", "UNIQ_KEY")
                    props = {k: v for k, v in m.properties.items() if k not in drop}
                    res = c.send_batch(origin, [OutMessage(bytes(m.body), keys=m.user_keys, tags=m.tags, properties=props)])[0]
                    if not res.ok:
                        error(args, f"resending {m.queue_offset} to {origin}: {res.status} {res.error}")
                        return 1
                    c.commit(args.group, dlq, q, m.queue_offset + 1)
                    rows[-1]["resent"] = True
                    resent += 1
    if args.resend and not args.json:
        print(f"resent {resent} message(s) to their original topics", file=sys.stderr)
    if not rows and not args.json:
        print("no dead letters", file=sys.stderr)
        return 0
    _emit(args, rows, ["origin_topic", "deliveries", "offset", "resent", "body", "origin_msg_id"])
    return 0
