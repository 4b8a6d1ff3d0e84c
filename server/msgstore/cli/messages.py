"""``send``, ``pull`` and ``query``: messages in and out."""

from __future__ import annotations

import datetime as dt
import json
import sys
from typing import Any

from ..output import body_text as _body_text
from ..output import emit as _emit
from .common import MessagePrinter, error, format_ms, message_row, note, notice, open_client, partial, uniq_key


def cmd_send(args) -> int:
    from ..client import OutMessage
    from ..client.delays import delay_properties, group_properties

    if args.file:
        with open(args.file, "rb") as f:
            body = f.read()
    elif args.body is None or args.body == "-":
        if sys.stdin.isatty():
            note("reading the message body from stdin (end it with Ctrl-D)")
        body = sys.stdin.buffer.read()
        if not body and not args.allow_empty:
            error(args, "the message body is empty (stdin had nothing); give a BODY, --file, or --allow-empty")
            return 2
    else:
        body = args.body.encode("utf-8", "surrogateescape")
    props: dict[str, str] = {}
    for p in args.property:
        name, sep, value = p.partition("=")
        if not sep or not name:
            error(args, f"--property {p!r}: expected NAME=VALUE")
            return 2
        props[name] = value
    with open_client(args, send_streams=False) as c:  # one request: no stream threads to start and tear down
        queue = None
        if args.queue is not None or args.node is not None:
            found = _queues(c, args.topic, args.queue, args.node)
            if isinstance(found, str):
                error(args, str(found))
                return 2
            queue = found[0]
        res = c.send_batch(
            args.topic,
            [
                OutMessage(
                    body,
                    keys=args.key,
                    tags=args.tags,
                    properties={
                        **props,
                        **delay_properties(args.delay, args.deliver_at, args.delay_level),
                        **group_properties(args.message_group),
                    },
                )
            ],
            key=(args.message_group or (args.key[0] if args.key else None)) if queue is None else None,
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
    if res.topic:  # delayed: where, and under which id, it will be delivered (its offset is known then)
        row.update(topic=res.topic, delivered_as="UNIQ_KEY")
        del row["offset"], row["commitlog_offset"]
    if res.recall_handle:
        row["recall_handle"] = res.recall_handle
    if res.error:
        row["error"] = res.error
    _emit(args, row)
    return 0 if res.ok else 1


def cmd_recall(args) -> int:
    with open_client(args, send_streams=False) as c:
        c.recall(args.handle)
    _emit(args, {"recalled": True})
    return 0


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


def _behind(positions: dict[Any, int], offsets: dict[Any, tuple[int, int]]) -> bool:
    """Some queue's position is below the end it had when the read started."""
    return any(pos < offsets[q][1] for q, pos in positions.items() if q in offsets)


def _start_positions(args, c, topic: str, queues, spec: str, offsets) -> dict:
    """Where each queue starts, with a notice where the asked offset had to be corrected."""
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
                notice(args, "corrected", f"{q}: offsets below {lo} were deleted by retention; reading from {lo}", queue=str(q), offset=lo)
            elif want > hi:
                notice(args, "past the end", f"{q}: offset {want} is past the end ({hi}); nothing to read there", queue=str(q), offset=hi)
        else:
            out[q] = c.offset_by_time(topic, q, _parse_time(spec))
    return out


def bad_topic(args) -> bool:
    """Says so when the topic is not a name any node could hold (as ``send`` does), instead of
    asking every node for it and answering "no topic"."""
    from ..record import codec

    err = codec.topic_error(args.topic)
    if err:
        error(args, f"{err} (got {args.topic[:140]!r})")
    return err is not None


def _refused(c, topic: str) -> str:
    """Why a topic the listing leaves out may not be used by this caller ('' when it is simply
    not there): a store that checks callers lists only the topics the caller may use, and a
    refusal must not read as "no such topic"."""
    import grpc

    from ..client import StoreError

    try:
        c.route(topic, refresh=True)
    except StoreError as e:
        if e.code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
            return f"{e.code.name}: {e.details}"
    return ""


def cmd_pull(args) -> int:
    from ..client import Consumer

    if args.start is not None and args.start not in ("earliest", "latest") and args.start.startswith("-"):
        error(args, f"--from {args.start}: an offset is >= 0 (or earliest, latest, an ISO time)")
        return 2
    if bad_topic(args):
        return 2
    with open_client(args) as c:
        listed_without: list[str] = []
        if args.topic not in c.topics(skipped=listed_without) and not listed_without:
            refused = _refused(c, args.topic)
            if refused:
                error(args, refused)
                return 1
            if not args.follow:
                error(args, f"no topic {args.topic!r} on any node (msgstore topics list shows them)")
                return 1
            notice(args, "no topic yet", f"topic {args.topic!r} does not exist yet; following it from its first message")
        chosen = _queues(c, args.topic, args.queue, args.node)
        if isinstance(chosen, str):
            error(args, str(chosen))
            return 2
        unread: list[str] = []
        offsets = c.queue_offsets(args.topic, skipped=unread)
        wanted = {q.node for q in chosen} | {q.address for q in chosen}
        skipped = [s for s in unread if s.split(" ", 1)[0] in wanted]  # down nodes whose queues were asked for
        queues = [q for q in chosen if q in offsets]
        # a reader for the group, not a member of it: it takes no queue from the group's members
        consumer = Consumer(c, None, args.topic, tag_filter=args.tag_filter, sql=args.sql, max_messages=min(args.max, 1024))
        consumer.positions = _start_positions(args, c, args.topic, queues, args.start or "earliest", offsets)
        if args.group and args.start is None:  # resume where the group left off
            for q in queues:
                done = c.committed(args.group, args.topic, q)
                if done >= 0:
                    consumer.positions[q] = done
        out = MessagePrinter(args.json)
        committed: dict[Any, int] = {}
        try:
            while True:
                before = dict(consumer.positions)
                batch = consumer.poll(timeout=1.0 if args.follow else 0)
                printed: dict[Any, int] = {}  # queue → offset after its last printed message
                left: dict[Any, int] = {}
                for rec in batch:
                    left[rec.queue] = left.get(rec.queue, 0) + 1
                for rec in batch:
                    if not args.follow and out.count >= args.max:
                        break
                    out.print(message_row(rec.queue.node, rec.message))
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
                if not args.follow and not batch and consumer.positions != before and _behind(consumer.positions, offsets):
                    continue  # (a filter passed over messages that did not match: read on to what was there at the start)
                if not args.follow and (not batch or out.count >= args.max):
                    if out.count >= args.max and batch:
                        what = "message" if args.max == 1 else "messages"
                        notice(args, "max", f"stopped after {args.max} {what} (--max); more may follow", max=args.max)
                    break
        except KeyboardInterrupt:
            pass
    if not out.count and not args.follow:
        notice(args, "no messages", "no messages")
    return partial(args, skipped, "its queues were not read")


def cmd_query(args) -> int:
    """A bounded answer (``--max``), so ``--json`` prints one JSON array, ``[]`` when nothing
    matched; ``pull``, which may follow forever, prints one object per line instead."""
    if bad_topic(args):
        return 2
    with open_client(args) as c:
        listed_without: list[str] = []
        if args.topic not in c.topics(skipped=listed_without) and not listed_without:
            refused = _refused(c, args.topic)
            if refused:
                error(args, refused)
                return 1
            if args.json:
                print("[]")
            error(args, f"no topic {args.topic!r} on any node (msgstore topics list shows them)")
            return 1
        skipped: list[str] = []
        found = c.query(args.topic, args.key, args.max, skipped=skipped)
    rows = [
        {
            "node": node,
            "queue": m.queue_id,
            "offset": m.queue_offset,
            "msg_id": m.msg_id,
            "uniq_key": uniq_key(m),
            "tags": m.tags,
            "keys": " ".join(m.keys),
            "store_time": format_ms(m.store_timestamp),
            "body": _body_text(m.body),
            "properties": dict(m.properties or {}),
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
        notice(args, "no messages", f"no messages with key {args.key!r} in topic {args.topic!r}")
    if partial(args, skipped, "it was not searched"):
        return 1
    return 0 if rows else 1
