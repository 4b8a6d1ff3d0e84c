"""``consumequeue/state.json``: every consume queue's segments and ends, so that a restart need
not open, list or read 100,000 queue directories (docs/store-format.md §3.4; a deviation:
RocketMQ walks and scans them all, which is what made a node of 10,000 queues take 93 s).

Written at a clean stop after the queues are flushed, with a ``state.clean`` marker beside it
(then trusted whole; a start removes the marker before it changes anything), and while
running by the consume-queue flusher, each time the queues changed, at most every
``queueStateInterval`` ms: first the dispatch position, then the ends (so the ends hold at least
everything dispatched before that position), then a flush of the queues, then this file. After a
crash the store re-dispatches the commit log from ``dispatched`` on and trusts each saved end
only once the unit before it is found on disk; a missing or unreadable file means the old way,
a walk of the directories and a scan of each queue's last files (bounded by their extents).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

NAME = "state.json"
CLEAN = "state.clean"
VERSION = 1

# one queue: topic, queue id, segment starts, min logic offset, end, max phy, first phy
QueueRecord = tuple[str, int, list[int], int, int, int, int]


@dataclass
class QueueState:
    clean: bool = False  # the marker was there: written by a clean stop, nothing changed since
    dispatched: int = 0  # the commit-log offset dispatched when the ends were taken
    flushed: int = 0  # the commit log's flushed end then (on disk: a crash start scans from the lower of the two)
    file_size: int = 0
    queues: list[QueueRecord] = field(default_factory=list)


def path_in(consumequeue_dir: str) -> str:
    return os.path.join(consumequeue_dir, NAME)


def save(consumequeue_dir: str, state: QueueState) -> None:
    """Atomically (new file, fsync, rename, fsync of the directory); the clean marker after."""
    doc = {
        "version": VERSION,
        "dispatched": state.dispatched,
        "flushed": state.flushed,
        "fileSize": state.file_size,
        "queues": [list(q) for q in state.queues],
    }
    os.makedirs(consumequeue_dir, exist_ok=True)
    path = path_in(consumequeue_dir)
    _write_synced(path + ".tmp", json.dumps(doc, separators=(",", ":")).encode())
    os.replace(path + ".tmp", path)
    if state.clean:
        _write_synced(os.path.join(consumequeue_dir, CLEAN), b"clean\n")
    _sync_dir(consumequeue_dir)


def mark_running(consumequeue_dir: str) -> None:
    """From now on the saved ends may be stale: a crash must verify them, even if the stop
    that follows fails to save them again."""
    try:
        os.unlink(os.path.join(consumequeue_dir, CLEAN))
    except FileNotFoundError:
        return
    _sync_dir(consumequeue_dir)


def _write_synced(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _sync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load(consumequeue_dir: str, file_size: int) -> QueueState | None:
    """The saved state, or None when there is none usable (another file size, another
    version, unreadable): the caller then walks the directories."""
    path = path_in(consumequeue_dir)
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        log.warning("%s is unreadable (%s); the consume queues are scanned instead", path, e)
        return None
    if not isinstance(doc, dict) or doc.get("version") != VERSION or doc.get("fileSize") != file_size:
        log.warning("%s is of another version or file size; the consume queues are scanned instead", path)
        return None
    try:
        queues = [
            (str(t), int(q), [int(s) for s in starts], int(lo), int(end), int(mp), int(fp))
            for t, q, starts, lo, end, mp, fp in doc["queues"]
        ]
    except (KeyError, TypeError, ValueError) as e:
        log.warning("%s is malformed (%s); the consume queues are scanned instead", path, e)
        return None
    clean = os.path.exists(os.path.join(consumequeue_dir, CLEAN))
    return QueueState(clean, int(doc.get("dispatched", 0)), int(doc.get("flushed", 0)), file_size, queues)


def discard(consumequeue_dir: str) -> None:
    """A start that found the file stale or the queues changed without it: remove it so that a
    crash before the next save scans instead of trusting it."""
    gone = False
    for p in (os.path.join(consumequeue_dir, CLEAN), path_in(consumequeue_dir)):
        try:
            os.unlink(p)
            gone = True
        except FileNotFoundError:
            pass
    if gone:
        _sync_dir(consumequeue_dir)
