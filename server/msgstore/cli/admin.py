"""``admin``: status, configuration, roles and maintenance of every node (the admin token)."""

from __future__ import annotations

import json
from typing import Any

from ..output import proto_dict
from ..output import table as _table
from .common import note, open_client


def _typed_config(values: dict[str, str]) -> dict[str, Any]:
    """Config values as their types (the API carries text): numbers as numbers in --json."""
    from ..store.config import KEYS, ConfigError, _coerce

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
    from ..client import StoreError

    failed = 0
    with open_client(args) as c:
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
            if "error" in r:
                continue  # (said once, below)
            print(
                f"{r['node']}: "
                + ", ".join(f"{k}={json.dumps(v) if isinstance(v, (dict, list)) else v}" for k, v in r.items() if k != "node")
            )
    for r in results:
        if "error" in r:
            note(f"{r['node']}: {r['error']}")
    return 1 if failed else 0


def _admin_one(admin, node: str, args) -> dict[str, Any]:
    if args.action == "status":
        return proto_dict(admin.status_pb())  # (64-bit numbers as numbers in --json)
    if args.action == "config":
        if args.config_action == "get":
            values = admin.config()
            if args.assignments:  # the keys asked for (checked in main)
                values = {k: values[k] for k in args.assignments if k in values}
            return {"node": node, "config": _typed_config(values)}
        from ..store.config import parse_assignments

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
    import grpc

    from ..client import StoreError
    from ..client.failover import PromotionRefused, promote

    if args.force:
        raise StoreError(
            grpc.StatusCode.INVALID_ARGUMENT,
            "--force is gone: it replaced a master nobody could fence on the word of whatever members answered, and lost "
            "acknowledged messages. Run the group with --arbiter etcd://HOST:2379 (elections are then proved safe), or pass "
            "--unclean to accept the loss (it says how much)",
            node,
        )
    try:
        p = promote(admin.client, admin.address, mode=args.mode or "", epoch=args.epoch, unclean=args.unclean, say=note)
    except PromotionRefused as e:
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
        if r.fenced:
            row["fenced"] = r.fenced
    else:
        row.update(master=r.master_address, connected=r.connected, lag_bytes=r.lag_bytes, lag_seconds=round(r.lag_seconds, 3))
    if r.HasField("arbiter") and r.arbiter.where:
        a = r.arbiter
        row["arbiter"] = {
            "where": a.where,
            "master": a.holder,
            "epoch": a.epoch,
            "in_sync": list(a.in_sync),
            "read_s_ago": round(a.age_s, 1),
            **({"error": a.error} if a.error else {}),
            **({"elects": "the members (serve --failover-after), or msgstore admin promote"} if a.elects else {"elects": "the operator"}),
        }
    elif len(r.members) > 1:
        row["arbiter"] = (
            "none: the group switches over while every member answers; replacing a master that does not answer takes "
            "admin promote --unclean (serve --arbiter etcd://HOST:2379 makes failovers safe)"
        )
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
