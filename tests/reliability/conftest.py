"""Campaign sizes: small enough for CI (the whole directory in a few minutes), larger under
``make soak`` (MSGSTORE_SOAK=1)."""

from __future__ import annotations

import os

SOAK = os.environ.get("MSGSTORE_SOAK") == "1"


def scale(ci: int, soak: int) -> int:
    return soak if SOAK else ci
