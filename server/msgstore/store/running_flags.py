"""Why the store refuses writes right now (the reference's RunningFlags).

Besides its lifecycle (recovering, shutting down), a store refuses puts while its disk is over
``diskSpaceWarningLevelRatio`` or while writing a consume queue or an index file fails; the
disk monitor and the dispatcher set and clear these flags, every put reads them.
"""

from __future__ import annotations

import logging
import threading

from .results import Unavailable

log = logging.getLogger(__name__)


class RunningFlags:
    def __init__(self) -> None:
        self._reasons: set[Unavailable] = set()
        self._details: dict[Unavailable, str] = {}
        self._lock = threading.Lock()

    def mark(self, reason: Unavailable, detail: str = "") -> None:
        """``detail``: what failed and why (which consume queue, which errno), said with every
        refused write instead of only in the log."""
        with self._lock:
            if reason not in self._reasons or self._details.get(reason) != detail:
                log.error("store refuses writes: %s%s", reason.value, f" ({detail})" if detail else "")
            self._reasons.add(reason)
            self._details[reason] = detail

    def text(self, reason: Unavailable) -> str:
        detail = self._details.get(reason, "")
        return f"{reason.value}: {detail}" if detail else reason.value

    def clear(self, reason: Unavailable) -> None:
        with self._lock:
            if reason in self._reasons:
                log.info("store accepts writes again: %s cleared", reason.name)
            self._reasons.discard(reason)
            self._details.pop(reason, None)

    @property
    def disk_full(self) -> bool:
        return Unavailable.DISK_FULL in self._reasons

    def refusal(self) -> Unavailable | None:
        """The reason to refuse a put (a full disk first: it maps to RESOURCE_EXHAUSTED)."""
        if not self._reasons:  # the common case, without the lock
            return None
        with self._lock:
            if Unavailable.DISK_FULL in self._reasons:
                return Unavailable.DISK_FULL
            return min(self._reasons, key=lambda u: u.name) if self._reasons else None

    def names(self) -> list[str]:
        with self._lock:
            return sorted(u.name for u in self._reasons)
