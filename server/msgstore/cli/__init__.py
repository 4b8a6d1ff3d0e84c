"""The ``msgstore`` command: run a store, talk to one, or look at a directory offline.

Human-readable tables by default; ``--json`` prints JSON (one object per line for messages
that may stream, one document otherwise). One module per command group; ``parser.py`` holds
the flags.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable

from .groups import group_report
from .parser import build_parser

__all__ = ["build_parser", "group_report", "main"]


def _negative_values(argv: list[str]) -> list[str]:
    """``--delay -5s`` as ``--delay=-5s``: argparse takes ``-5s`` for an option and says
    'expected one argument'; the flag's own check then names what is wrong with it."""
    out: list[str] = []
    for tok in argv:
        if out and re.match(r"^-\d", tok) and out[-1].startswith("--") and "=" not in out[-1] and out[-1] != "--":
            out[-1] = f"{out[-1]}={tok}"
        else:
            out.append(tok)
    return out


def main(argv: Iterable[str] | None = None) -> int:
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `msgstore pull ... | head` ends quietly
    from .parser import _Parser

    argv = _negative_values(list(argv) if argv is not None else sys.argv[1:])
    _Parser.json_errors = "--json" in argv  # (a usage error comes before --json is parsed)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "topics" and args.action == "create" and not args.name:
        parser.error("topics create needs a NAME")
    if args.command == "admin" and args.action == "config" and args.config_action == "set" and not args.assignments:
        parser.error("admin config set needs KEY=VALUE")
    if args.command == "admin" and args.action == "config" and args.config_action == "get":
        from ..store.config import KEYS

        for key in args.assignments:
            if "=" in key:
                parser.error(f"admin config get takes KEY names, not {key!r} (to change it: admin config set)")
            if key not in KEYS:
                parser.error(f"{key}: unknown configuration key")
    from ..client import StoreError
    from .common import error

    try:
        return args.fn(args)
    except StoreError as e:
        error(args, str(e), e.code.name)
        return 1
    except ValueError as e:
        error(args, str(e))
        return 2
    except OSError as e:  # a file flag naming a directory, a path through a file, no permission
        if args.command == "serve" and not e.filename:  # (a running store's I/O failure keeps its traceback)
            raise
        error(args, f"{e.filename}: {e.strerror}" if e.filename and e.strerror else str(e))
        return 2
