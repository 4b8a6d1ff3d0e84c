"""The gRPC wire format of msgstore.v1 beyond the generated stubs: compiled transcoders of the
Send messages (``native``; None when not built, and the protobuf paths take over) and the text
form of configuration values as UpdateConfigRequest carries them. Shared by the server's API
and the client, neither of which imports the other."""

from __future__ import annotations

import os
from typing import Any

try:  # the record codec's switch applies here too: MSGSTORE_PURE_PYTHON=1 means no compiled code
    if os.environ.get("MSGSTORE_PURE_PYTHON") == "1":
        raise ImportError("pure Python requested")
    from . import _native as native
except ImportError:
    native = None


def config_text(value: Any) -> str:
    """A setting's value as text: what the admin API, a ConfigMap's store.conf and ``--set``
    carry (``true``/``false`` for booleans; the store's validation parses it back)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


__all__ = ["native", "config_text"]
