"""Whether a master may acknowledge a write now (fencing), and if not, why.

A failover is only safe when the old master can no longer acknowledge: otherwise a client that
still reaches it is told PUT_OK for messages the new master never sees, and the old master
cuts them when it rejoins. A master therefore acknowledges only while none of these holds:

- *deposed*: it knows a newer epoch of its group exists (a controller's Fence, a follower or
  peer that has seen it, the Lease naming another holder). Kafka's leader-epoch fencing. Final
  until it follows the new master or is promoted again.
- *learning*: it has just started (or been left without its followers) and has not yet heard
  from enough of its group to know no newer epoch exists (a restarted old master must not take
  a single write before it learns it was replaced).
- *lease*: on Kubernetes, it has not renewed its group's Lease within the renew deadline
  (client-go leader election's rule: the holder stops before the lease can expire, and the
  operator elects only after it expired).
- *quorum*: in a group of three or more, it has not heard from a majority of its group within
  ``haKeepaliveTimeout`` (Raft's check-quorum): a partitioned master stops on its own.

The put path asks twice: before appending (nothing is stored when refused) and again just
before answering PUT_OK (a master fenced while a put waited for its flush or its followers does
not acknowledge it).
"""

from __future__ import annotations

from collections.abc import Callable


class WriteGate:
    def __init__(self) -> None:
        self.deposed = ""
        self.learning = ""
        self.lease: Callable[[], str] | None = None
        self.quorum: Callable[[], str] | None = None

    def refusal(self) -> str:
        """'' when this master may acknowledge now, else why not (one line)."""
        if self.deposed:
            return self.deposed
        if self.learning:
            return self.learning
        if self.lease is not None:
            why = self.lease()
            if why:
                return why
        if self.quorum is not None:
            return self.quorum()
        return ""

    def reset(self) -> None:
        """A new term (promoted) or a follower again: what fenced the old term is over."""
        self.deposed = ""
        self.learning = ""
