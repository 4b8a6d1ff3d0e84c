"""The epoch file (``epochFileCheckpoint``, docs/store-format.md §14): every master term's epoch
number and the commit-log offset it started at, as RocketMQ 5's EpochFileCache keeps them.

Two members that hold the same (epoch, start offset) wrote the same bytes from that start on for
as long as both had that epoch: so comparing epoch lists tells a rejoining member where its
history and the master's part, and it cuts its log back to there before following.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from ..store.metadata import write_atomic

NAME = "epochFileCheckpoint"


class EpochFileError(ValueError):
    pass


@dataclass(frozen=True)
class Epoch:
    epoch: int
    start: int  # commit-log offset of the term's first byte


def parse(text: str) -> list[Epoch]:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    try:
        count = int(lines[0])
    except ValueError:
        raise EpochFileError(f"{NAME}: the first line must be the number of entries, got {lines[0]!r}") from None
    if count != len(lines) - 1:
        raise EpochFileError(f"{NAME}: says {count} entries but holds {len(lines) - 1}")
    out = []
    for line in lines[1:]:
        epoch, sep, start = line.partition("-")
        if not sep or not epoch.isdigit() or not start.isdigit():
            raise EpochFileError(f"{NAME}: bad entry {line!r} (want <epoch>-<startOffset>)")
        out.append(Epoch(int(epoch), int(start)))
    return out


def render(entries: list[Epoch]) -> str:
    return "\n".join([str(len(entries)), *(f"{e.epoch}-{e.start}" for e in entries)]) + "\n"


def consistent_offset(local: list[Epoch], local_end: int, master: list[Epoch], master_end: int) -> int:
    """Where a member's log stops agreeing with the master's (§14): from the member's highest
    epoch down, the first epoch the master has with the same start gives min(both ends of that
    epoch). -1 when they share no epoch (the member must start over from the master's log)."""
    theirs = {e.epoch: (i, e) for i, e in enumerate(master)}
    for i in range(len(local) - 1, -1, -1):
        e = local[i]
        found = theirs.get(e.epoch)
        if found is None or found[1].start != e.start:
            continue
        j = found[0]
        mine_end = local[i + 1].start if i + 1 < len(local) else local_end
        their_end = master[j + 1].start if j + 1 < len(master) else master_end
        return min(mine_end, their_end)
    return -1


class EpochFile:
    def __init__(self, root: str):
        self.path = os.path.join(root, NAME)
        self.lock = threading.Lock()
        self.entries: list[Epoch] = []
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                self.entries = parse(f.read())

    @staticmethod
    def exists(root: str) -> bool:
        return os.path.exists(os.path.join(root, NAME))

    def _save(self) -> None:
        write_atomic(self.path, render(self.entries).encode())

    @property
    def last(self) -> Epoch | None:
        return self.entries[-1] if self.entries else None

    @property
    def epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    def snapshot(self) -> list[Epoch]:
        with self.lock:
            return list(self.entries)

    def append(self, epoch: int, start: int) -> None:
        """A new term: larger epoch, and a start not before the last term's. Deviation from
        RocketMQ (which refuses an equal start): a term that wrote nothing is replaced by the new
        one, so back-to-back promotions without writes (a failover during a failover) work."""
        with self.lock:
            last = self.last
            if last is not None and (epoch <= last.epoch or start < last.start):
                raise EpochFileError(f"epoch {epoch} at {start} does not follow epoch {last.epoch} at {last.start}")
            if last is not None and start == last.start:
                self.entries[-1] = Epoch(epoch, start)  # the last term wrote nothing: replace it
            else:
                self.entries.append(Epoch(epoch, start))
            self._save()

    def replace(self, entries: list[Epoch]) -> None:
        """A follower adopts its master's terms (those it holds bytes of)."""
        with self.lock:
            if entries != self.entries:
                self.entries = list(entries)
                self._save()

    def truncate_suffix(self, offset: int) -> None:
        """Drop terms that start at or after ``offset`` (the log was cut back to it)."""
        with self.lock:
            kept = [e for e in self.entries if e.start < offset]
            if kept != self.entries:
                self.entries = kept
                self._save()

    def reconcile(self, end: int) -> list[Epoch]:
        """At start: terms that begin past the log's end (a crash between cutting the log and
        this file, an epoch opened at an end that was never flushed) become one term, the
        newest of them, starting at the end; returns the entries changed. Promotion would
        otherwise fail for good (a new term must not start before the last one)."""
        with self.lock:
            beyond = [e for e in self.entries if e.start > end]
            if not beyond:
                return []
            kept = [e for e in self.entries if e.start <= end]
            top = Epoch(beyond[-1].epoch, end)
            if kept and kept[-1].start == end:
                kept[-1] = top  # that term wrote nothing: the newer one replaces it
            else:
                kept.append(top)
            self.entries = kept
            self._save()
            return beyond

    def truncate_prefix(self, offset: int) -> None:
        """Drop the first terms while they end at or before ``offset`` (RocketMQ's
        ``truncatePrefixByOffset``; cleanup passes the log's new first offset minus one): a term
        ends where the next starts; the last term is open and always kept."""
        with self.lock:
            entries = self.entries
            keep_from = 0
            while keep_from + 1 < len(entries) and entries[keep_from + 1].start <= offset:
                keep_from += 1
            if keep_from:
                self.entries = entries[keep_from:]
                self._save()
