"""A bounded pool of open descriptors for consume-queue files.

A node with 100,000 queues cannot keep a descriptor (let alone a mapping) per queue file open:
the process limit is reached near a thousand topics and every write stops. The queue files are
small and read in small pieces, so they are reached through ``pread``/``pwrite`` on a
descriptor borrowed from this pool, opened on first use and closed when it has been idle
longest and the pool is over its bound (least recently used first). A descriptor in use is never
closed under its user: one whose number got reused by another file would read or, worse, sync
and write the wrong file.

Durability does not depend on the descriptor staying open: ``fdatasync`` on any descriptor of
a file flushes that file's dirty pages, so a flush reopens the file if it must.
"""

from __future__ import annotations

import collections
import errno
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _Entry:
    __slots__ = ("fd", "users", "doomed")

    def __init__(self, fd: int):
        self.fd = fd
        self.users = 0
        self.doomed = False  # closed by its last user (the file was forgotten meanwhile)


class FilePool:
    def __init__(self, capacity: int, readonly: bool = False):
        self.capacity = max(1, capacity)
        self.readonly = readonly
        self._open: collections.OrderedDict[str, _Entry] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._closed = False  # after close_all, a late user gets a descriptor of its own, closed after it
        self.opened = 0  # how many times a descriptor was opened (a pool too small reopens often)

    def __len__(self) -> int:
        return len(self._open)

    @contextmanager
    def use(self, path: str, create: bool = False) -> Iterator[int]:
        """A descriptor of ``path`` for the duration of the block (FileNotFoundError when the
        file is gone and ``create`` is false)."""
        entry = self.borrow(path, create)
        try:
            yield entry.fd
        finally:
            self.give_back(entry)

    def borrow(self, path: str, create: bool = False) -> _Entry:
        """The entry of ``path``, its ``fd`` usable until :meth:`give_back` (``use`` without
        the context manager's cost, for the hot paths)."""
        with self._lock:
            entry = self._open.get(path)
            if entry is not None:
                self._open.move_to_end(path)
                entry.users += 1
                return entry
        flags = os.O_RDONLY if self.readonly else os.O_RDWR | (os.O_CREAT if create else 0)
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as e:
            if e.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            # the process is out of descriptors (connections took them): give back our idle
            # ones and try once more, so that writes to existing queues go on
            self._shrink()
            fd = os.open(path, flags, 0o644)
        spare: int | None = None
        with self._lock:
            entry = self._open.get(path)
            if entry is not None:  # another thread opened it meanwhile
                spare = fd
                self._open.move_to_end(path)
            elif self._closed:
                entry = _Entry(fd)
                entry.doomed = True
            else:
                entry = self._open[path] = _Entry(fd)
                self.opened += 1
            entry.users += 1
            closing = self._evict()
        for extra in closing + ([spare] if spare is not None else []):
            os.close(extra)
        return entry

    def give_back(self, entry: _Entry) -> None:
        close = False
        with self._lock:
            entry.users -= 1
            if entry.users == 0 and entry.doomed:
                close = True
        if close:
            os.close(entry.fd)

    def _evict(self) -> list[int]:
        """Idle descriptors over the bound, oldest first (call with the lock held)."""
        closing: list[int] = []
        while len(self._open) > self.capacity:
            path, entry = next(iter(self._open.items()))
            if entry.users:  # the oldest is in use: look further (rare), else stay over until given back
                path = next((p for p, e in self._open.items() if e.users == 0), "")
                if not path:
                    break
                entry = self._open[path]
            del self._open[path]
            closing.append(entry.fd)
        return closing

    def _shrink(self) -> None:
        with self._lock:
            idle = [p for p, entry in self._open.items() if entry.users == 0]
            closing = [self._open.pop(p).fd for p in idle[: max(1, len(idle) // 2)]]
        for fd in closing:
            os.close(fd)

    def forget(self, path: str) -> None:
        """The file is being deleted (or the store closed): close its descriptor, now or
        when its last user gives it back."""
        with self._lock:
            entry = self._open.pop(path, None)
            if entry is None:
                return
            if entry.users:
                entry.doomed = True
                return
        os.close(entry.fd)

    def close_all(self) -> None:
        closing = []
        with self._lock:
            for entry in self._open.values():
                if entry.users:
                    entry.doomed = True
                else:
                    closing.append(entry.fd)
            self._open.clear()
            self._closed = True
        for fd in closing:
            os.close(fd)
