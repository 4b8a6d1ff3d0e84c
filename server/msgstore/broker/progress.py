"""Which offsets of a queue are done, when they finish out of order (a timer queue's messages
come due by time, not by offset): everything below ``below`` is done, and a bitmap says which
of the offsets from ``below`` on are. Compact enough to persist every second with a million
pending messages (one bit each), and it never forgets a finished one above a pending one,
so a restart redelivers nothing that was recorded as done."""

from __future__ import annotations

import base64
import zlib
from typing import Any


class DoneOffsets:
    """``below`` is kept a multiple of 8 (whole bytes of the bitmap are dropped as they fill)."""

    def __init__(self, below: int = 0, bits: bytes = b""):
        self.below = below - below % 8
        self._bits = bytearray(bits)
        self._advance()

    def __contains__(self, offset: int) -> bool:
        if offset < self.below:
            return True
        i = offset - self.below
        return i // 8 < len(self._bits) and bool(self._bits[i // 8] >> (i % 8) & 1)

    def add(self, offset: int) -> None:
        if offset < self.below:
            return
        i = offset - self.below
        if i // 8 >= len(self._bits):
            self._bits.extend(bytes(i // 8 - len(self._bits) + 1))
        self._bits[i // 8] |= 1 << (i % 8)
        if i < 8:
            self._advance()

    def first_pending(self) -> int:
        """The lowest offset not done."""
        for j, b in enumerate(self._bits):
            if b != 0xFF:
                return self.below + 8 * j + next(k for k in range(8) if not b >> k & 1)
        return self.below + 8 * len(self._bits)

    def _advance(self) -> None:
        full = 0
        while full < len(self._bits) and self._bits[full] == 0xFF:
            full += 1
        if full:
            del self._bits[:full]
            self.below += 8 * full

    def encode(self) -> dict[str, object]:
        return {"below": self.below, "done": base64.b64encode(zlib.compress(bytes(self._bits))).decode()}

    @classmethod
    def decode(cls, doc: dict[str, Any]) -> DoneOffsets:
        raw = doc.get("done") or ""
        return cls(int(doc.get("below", 0)), zlib.decompress(base64.b64decode(raw)) if raw else b"")
