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


_INT64 = frozenset({3, 4, 6, 16, 18})  # FieldDescriptor.TYPE_INT64, UINT64, FIXED64, SFIXED64, SINT64


def proto_dict(message: Any) -> dict[str, Any]:
    """A message as ``MessageToDict`` gives it, with 64-bit integers as numbers: proto3's JSON
    mapping writes them as strings ("601"), which a script reading ``--json`` then compares as
    text, beside 32-bit ones that are numbers."""
    from google.protobuf.json_format import MessageToDict

    out = MessageToDict(message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    _numbers(message.DESCRIPTOR, out)
    return out


def _numbers(descriptor: Any, data: dict[str, Any]) -> None:
    for field in descriptor.fields:
        if field.name not in data:
            continue
        value = data[field.name]
        kind = field.message_type
        if kind is not None and kind.GetOptions().map_entry:
            inner = kind.fields_by_name["value"]
            for k, v in list(value.items()):
                if inner.message_type is not None and isinstance(v, dict):
                    _numbers(inner.message_type, v)
                elif inner.type in _INT64 and isinstance(v, str):
                    value[k] = int(v)
        elif kind is not None:
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, dict):  # (well-known types, such as Timestamp, are strings)
                    _numbers(kind, item)
        elif field.type in _INT64:
            data[field.name] = [int(v) for v in value] if isinstance(value, list) else int(value)
