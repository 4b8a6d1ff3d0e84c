"""``topics`` and ``route``: what the nodes hold and where."""

from __future__ import annotations

import sys
from typing import Any

from ..output import emit as _emit
from .common import open_client, partial


def cmd_topics(args) -> int:
    skipped: list[str] = []
    with open_client(args) as c:
        if args.action in ("create", "delete") and not args.name:
            print(f"error: topics {args.action} needs a topic name", file=sys.stderr)
            return 2
        if args.action == "create":
            perm = {"rw": 6, "r": 4, "w": 2}.get(args.perm or "", 0)
            infos = c.create_topic(args.name, args.queues, perm=perm, message_type=args.message_type or "", skipped=skipped)
            rows = [{"topic": i.name, "queues": i.write_queue_nums, "perm": i.perm, "type": i.message_type or "-"} for i in infos]
            _emit(args, rows, ["topic", "queues", "perm", "type"])
            return partial(args, skipped, "the topic was not created there: run the command again when it is back")
        if args.action == "delete":
            done = c.delete_topic(args.name, force=args.force)
            _emit(
                args, [{"topic": args.name, "deleted": r.deleted, "messages": r.messages} for r in done], ["topic", "deleted", "messages"]
            )
            return partial(args, skipped, "the topic was not deleted there: run the command again when it is back")
        topics = c.topics(skipped=skipped)
    _emit(
        args,
        [{"topic": t, "queues": " ".join(f"{n}:{q}" for n, q in per.items())} for t, per in sorted(topics.items())],
        ["topic", "queues"],
    )
    return partial(args, skipped, "its topics are not listed")


def cmd_route(args) -> int:
    with open_client(args) as c:
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
