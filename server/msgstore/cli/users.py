"""``admin user`` and ``admin acl``: users and their permission entries (docs/store-format.md
§20), kept on every replica group's master with the admin token."""

from __future__ import annotations

import json
import secrets
from typing import Any

from ..acl.policy import ACTIONS, PolicyError, parse_actions, parse_entry, parse_resource
from ..output import table as _table
from .common import error, note, open_client, read_token

USER_COLUMNS = ["user", "type", "entries"]


def _entry(e) -> dict[str, Any]:
    out: dict[str, Any] = {"resource": e.resource, "actions": list(e.actions), "decision": e.decision}
    if e.source_ips:
        out["sourceIps"] = list(e.source_ips)
    return out


def _user(u) -> dict[str, Any]:
    return {"access_key": u.access_key, "user_type": u.user_type, "entries": [_entry(e) for e in u.entries]}


def _described(e: dict[str, Any]) -> str:
    return parse_entry(e, "entry").describe()


def _normalised(e: dict[str, Any]) -> tuple:
    entry = parse_entry(e, "entry")
    return (str(entry.resource), entry.actions, entry.allow, frozenset(entry.sources))


def _revoked(entries: list[dict[str, Any]], resource: str, decision: str | None, actions: set[str] | None) -> tuple[list, bool]:
    """The entries without ``actions`` (all of them when None) on ``resource``; an entry left
    with no action goes. ``all`` granted and one action revoked leaves the others."""
    out, removed = [], False
    for e in entries:
        if e["resource"] != resource or (decision is not None and e["decision"] != decision):
            out.append(e)
            continue
        if actions is None:
            removed = True
            continue
        held = set(ACTIONS) - {"all"} if "all" in e["actions"] else set(e["actions"])
        left = set() if "all" in actions else held - actions
        if left != held:
            removed = True
        if left:
            out.append({**e, "actions": [a for a in ACTIONS if a in left]})
    return out, removed


def cmd_users(args) -> int:
    from ..client import StoreError

    if not read_token(args.admin_token_file, args.admin_token_env):
        error(args, "users are managed with the admin token: --admin-token-file FILE or MSGSTORE_ADMIN_TOKEN", "UNAUTHENTICATED")
        return 2
    if getattr(args, "user_action", None) == "create" and args.secret_file and not args.new_secret_file:
        error(args, "--secret-file is the secret of the caller's own --access-key; the new user's is --secret-key-file FILE")
        return 2
    try:
        with open_client(args) as c:
            return _run(c, args)
    except StoreError as e:
        error(args, e.details, e.code.name)
        return 1


def _run(c, args) -> int:
    if args.action == "user":
        return _user_action(c, args)
    return _acl_action(c, args)


def _user_action(c, args) -> int:
    what = args.user_action
    if what == "list":
        users = [_user(u) for u in c.users()]
        if args.json:
            print(json.dumps(users, indent=2))
        else:
            rows = [
                {"user": u["access_key"], "type": u["user_type"], "entries": "; ".join(map(_described, u["entries"])) or "-"} for u in users
            ]
            print(_table(rows, USER_COLUMNS))
        return 0
    if what == "delete":
        if not c.delete_user(args.name):
            error(args, f"no user {args.name}", "NOT_FOUND")
            return 1
        if args.json:
            print(json.dumps({"deleted": args.name}))
        else:
            note(f"deleted user {args.name}")
        return 0
    # create
    if any(u.access_key == args.name for u in c.users()):
        error(args, f"user {args.name} exists: delete it first, or change its entries with `admin acl`", "ALREADY_EXISTS")
        return 1
    secret = read_token(args.new_secret_file, None) if args.new_secret_file else None
    generated = secret is None
    secret = secret or secrets.token_urlsafe(24)
    u = c.put_user(args.name, secret, super_user=args.super)
    if args.json:
        print(json.dumps({**_user(u), **({"secret_key": secret} if generated else {})}, indent=2))
    else:
        print(f"created user {u.access_key} ({u.user_type})")
        if generated:
            print(f"secret key: {secret}")
            note("the secret key is shown once: keep it (the store does not show it again)")
    return 0


def _acl_action(c, args) -> int:
    users = {u.access_key: u for u in c.users()}
    user = users.get(args.name)
    if user is None:
        error(args, f"no user {args.name}: create it first (admin user create {args.name})", "NOT_FOUND")
        return 1
    entries = [_entry(e) for e in user.entries]
    if args.acl_action == "show":
        if args.json:
            print(json.dumps(_user(user), indent=2))
        else:
            for i, e in enumerate(entries):
                print(f"entries[{i}]: {_described(e)}")
            if not entries:
                print(
                    f"{args.name} has no entries"
                    + (" (a Super user may do everything)" if user.user_type == "Super" else ": it may do nothing")
                )
        return 0
    decision = "deny" if args.deny else "allow"
    if args.acl_action == "grant":
        entry: dict[str, Any] = {"resource": args.resource, "actions": args.actions.split(","), "decision": decision}
        if args.source:
            entry["sourceIps"] = args.source
        try:
            same = _normalised(entry)
        except PolicyError as e:
            error(args, str(e), "INVALID_ARGUMENT")
            return 1
        if any(_normalised(e) == same for e in entries):
            note(f"{args.name} already has that entry")
            return 0
        entries.append(entry)
    else:  # revoke
        try:
            resource = str(parse_resource(args.resource, "resource"))  # as the store keeps it (Topic:x is topic:x)
            actions = set(parse_actions(args.actions, "actions")) if args.actions else None
        except PolicyError as e:
            error(args, str(e), "INVALID_ARGUMENT")
            return 1
        entries, removed = _revoked(entries, resource, None if args.deny is None else ("deny" if args.deny else "allow"), actions)
        if not removed:
            which = {None: "", True: "deny ", False: "allow "}[args.deny]
            error(args, f"{args.name} has no {which}entry on {resource}" + (f" naming {args.actions}" if actions else ""), "NOT_FOUND")
            return 1
    u = c.put_user(args.name, "", super_user=user.user_type == "Super", entries=entries)
    if args.json:
        print(json.dumps(_user(u), indent=2))
    else:
        for i, e in enumerate(_user(u)["entries"]):
            print(f"entries[{i}]: {_described(e)}")
    return 0
