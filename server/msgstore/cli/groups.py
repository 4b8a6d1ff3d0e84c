"""``groups``: consumer groups, the queues each member holds, committed offsets and lag."""

from __future__ import annotations

from typing import Any

from ..output import emit as _emit
from ..output import table as _table
from .common import error, open_client, partial


def group_report(found) -> list[dict[str, Any]]:
    """``describe_groups`` answers of every node as one record per group: its members (as any
    node knows them) and every queue with holder, committed offset, max offset and lag."""
    groups: dict[str, dict[str, Any]] = {}
    for node, info in found:
        g = groups.setdefault(
            info.name, {"group": info.name, "members": {}, "queues": [], "lag": 0, "inflight": 0, "retrying": 0, "dead_letters": 0}
        )
        if info.HasField("policy") and "policy" not in g:
            g["policy"] = policy_dict(info.policy)
        g["inflight"] += info.inflight
        g["retrying"] += info.retrying
        g["dead_letters"] += info.dead_letters
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


def policy_dict(p) -> dict[str, Any]:
    out: dict[str, Any] = {"fifo": p.fifo, "max_deliveries": p.max_deliveries}
    if p.exponential_initial_ms:
        out["backoff"] = {
            "initial_s": p.exponential_initial_ms / 1000,
            "max_s": p.exponential_max_ms / 1000,
            "multiplier": p.exponential_multiplier,
        }
    else:
        out["backoff_s"] = [ms / 1000 for ms in p.backoff_ms]
    return out


def policy_text(group: str, p: dict[str, Any]) -> str:
    if "backoff" in p:
        b = p["backoff"]
        backoff = f"backoff {b['initial_s']:g}s x{b['multiplier']:g} up to {b['max_s']:g}s"
    else:
        shown = ", ".join(f"{s:g}s" for s in p["backoff_s"][:6]) + (", ..." if len(p["backoff_s"]) > 6 else "")
        backoff = f"backoff {shown} (the last repeating)"
    return f"{group}: {'FIFO' if p['fifo'] else 'not FIFO'}, {p['max_deliveries']} deliveries at most, {backoff} after a nack"


def cmd_groups(args) -> int:
    skipped: list[str] = []
    changes = args.fifo is not None or args.max_deliveries is not None or args.backoff
    if changes and not args.group:
        error(args, "--fifo, --max-deliveries and --backoff change one group: name it")
        return 2
    try:
        backoff = [float(x) for x in args.backoff.split(",") if x.strip()]
    except ValueError:
        error(args, f"--backoff: seconds separated by commas, got {args.backoff!r}")
        return 2
    if any(not s >= 0 for s in backoff):
        error(args, f"--backoff: seconds must be 0 or more, got {args.backoff}")
        return 2
    with open_client(args) as c:
        if changes:
            c.update_group(args.group, max_deliveries=args.max_deliveries or 0, backoff=backoff, fifo=args.fifo)
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
        if not rows and not any(g["inflight"] or g["retrying"] or g["dead_letters"] or "policy" in g for g in report):
            print("no consumer groups" + (f" named {args.group}" if args.group else ""))
        elif rows:
            print(_table(rows, ["group", "topic", "node", "queue", "member", "host", "committed", "max", "lag"]))
        for g in report:
            shown = any(r["group"] == g["group"] for r in rows)
            if "policy" in g and (args.group or changes or not shown):  # (a group set up before anyone consumes)
                print(policy_text(g["group"], g["policy"]))
            if g["inflight"] or g["retrying"] or g["dead_letters"]:
                print(
                    f"{g['group']}: {g['inflight']} in flight, {g['retrying']} waiting to be redelivered, {g['dead_letters']} dead letters"
                )
    return partial(args, skipped, "its queues are not listed")
