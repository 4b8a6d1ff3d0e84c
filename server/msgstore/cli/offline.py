"""``inspect`` and ``fsck``: a store directory, offline."""

from __future__ import annotations

import json
import sys

from ..output import table as _table
from .common import error, note, store_settings


def _warn_if_open(root: str) -> None:
    from ..store.offline import open_by

    pid = open_by(root)
    if pid:
        note(f"warning: a running store (pid {pid}) has {root} open: what is read may change while it is read")


def cmd_inspect(args) -> int:
    from ..store.metadata import UnreadableConfig
    from ..store.offline import inspect_dir

    _warn_if_open(args.dir)
    try:
        info = inspect_dir(args.dir, store_settings(args))
    except UnreadableConfig as e:
        error(args, str(e))
        return 1
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
    from ..store.offline import fsck

    def progress(stage: str, done: int, total: int) -> None:
        if args.json or not sys.stderr.isatty() and not args.progress:
            return
        pct = 100 * done / total if total else 100
        bar = "#" * int(pct / 5)
        print(f"\rfsck {stage:15s} [{bar:<20s}] {pct:5.1f}%", end="", file=sys.stderr, flush=True)

    _warn_if_open(args.dir)
    rep = fsck(args.dir, store_settings(args), progress)
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
