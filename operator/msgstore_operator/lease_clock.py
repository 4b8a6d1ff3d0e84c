"""When this operator first saw each group Lease's current renewal, on its own clock.

A Lease has expired once its renewTime has stayed the same for its whole duration as seen by
whoever judges it (client-go's rule: never by the holder's timestamps, whose clock may differ).
The reconcile passes and the observer's Lease checks both look at Leases; sharing what they saw
means a renewal counts from the first look of either, so a master that stopped renewing just
after one look is replaced one duration later, not two.
"""

from __future__ import annotations

import threading


class LeaseClock:
    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], tuple[str, float]] = {}
        self._lock = threading.Lock()  # Kopf's handler threads and the observer's thread

    def seen(self, namespace: str, name: str, renew_time: str, now: float) -> float:
        """When ``renew_time`` was first seen on this Lease (``now``, at the first look)."""
        with self._lock:
            known = self._seen.get((namespace, name))
            if known is not None and known[0] == renew_time:
                return min(known[1], now)
            self._seen[(namespace, name)] = (renew_time, now)
            return now


CLOCK = LeaseClock()
