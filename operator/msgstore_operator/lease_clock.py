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
        self._seen: dict[tuple[str, str], tuple[tuple[str, str], float]] = {}
        self._lock = threading.Lock()  # Kopf's handler threads and the observer's thread

    def seen(self, namespace: str, name: str, uid: str, renew_time: str, at: float) -> float:
        """When ``renew_time`` was first seen on this Lease (``uid``: a Lease deleted and made
        again under the same name starts afresh), ``at`` at the latest: a sighting recorded
        earlier (the store's status, after this operator restarted) counts from then."""
        with self._lock:
            key, identity = (namespace, name), (uid, renew_time)
            known = self._seen.get(key)
            if known is not None and known[0] == identity and known[1] <= at:
                return known[1]
            self._seen[key] = (identity, at)
            return at


CLOCK = LeaseClock()
