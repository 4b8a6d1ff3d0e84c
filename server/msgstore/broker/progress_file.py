"""Saving a broker service's progress file (``config/delayOffset.json``, ``timercheck``,
``popCheckpoint``, ``transactionCheckpoint``): only when it changed, atomically, and marked
changed again when the write failed so that the next round tries again."""

from __future__ import annotations

import threading

from ..store.metadata import write_atomic


class ProgressFile:
    """Mixed into a service with ``lock``, ``dirty``, ``path`` and ``state_json()``."""

    lock: threading.RLock | threading.Lock
    dirty: bool
    path: str

    def state_json(self) -> str:
        raise NotImplementedError

    def state_if_dirty(self) -> str | None:
        """The state to save, taken now (None: nothing changed since the last save). Taken
        after the mark is cleared and outside the lock (``state_json`` takes it, and a service's
        lock need not be reentrant): a change meanwhile is in it, or marks it changed again."""
        with self.lock:
            if not self.dirty:
                return None
            self.dirty = False
        return self.state_json()

    def write_state(self, state: str) -> None:
        try:
            write_atomic(self.path, state.encode())
        except OSError:
            with self.lock:
                self.dirty = True
            raise

    def persist(self) -> None:
        state = self.state_if_dirty()
        if state is not None:
            self.write_state(state)
