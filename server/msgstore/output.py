"""How commands print: aligned tables for people, JSON for scripts (``--json``)."""

from __future__ import annotations

import json
from typing import Any


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def emit(args, data: Any, columns: list[str] | None = None) -> None:
    if args.json:
        print(json.dumps(data, indent=None if isinstance(data, list) else 2, default=str))
    elif columns is not None:
        print(table(data, columns))
    elif isinstance(data, dict):
        width = max((len(k) for k in data), default=0)
        for k, v in data.items():
            print(f"{k.ljust(width)}  {v if not isinstance(v, (dict, list)) else json.dumps(v, default=str)}")
    else:
        print(data)


def body_text(body: bytes) -> str:
    try:
        text = body.decode("utf-8")
        if text.isprintable() or all(c.isprintable() or c in "\n\t" for c in text):
            return text
    except UnicodeDecodeError:
        pass
    return repr(body)
