"""Statuses and results of puts and gets (docs/store-format.md §4 and §7)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from ..record import codec


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"

    @property
    def stored(self) -> bool:
        """The data is in the commit log (an unconfirmed flush or replication is never rolled back)."""
        return self in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT, PutStatus.SLAVE_NOT_AVAILABLE)


class Unavailable(enum.Enum):
    """Why the store refuses writes; the API maps DISK_FULL and RESOURCE_LIMIT to RESOURCE_EXHAUSTED."""

    SHUTDOWN = "store is shut down"
    RECOVERING = "store is recovering"
    DISK_FULL = "disk usage is over diskSpaceWarningLevelRatio"
    NOT_WRITEABLE = "store is not writeable"
    LOGICS_QUEUE_ERROR = "writing a consume queue failed"
    INDEX_FILE_ERROR = "writing an index file failed"
    SLAVE = "this node is a follower (slave) of its group's master: send to the master"
    RESOURCE_LIMIT = "a node-wide limit is near: no new topic or queue"


@dataclass(slots=True)
class PutResult:
    """Outcome of one put (a single message or a batch for one queue)."""

    status: PutStatus
    reason: str = ""
    phy_offset: int = -1
    queue_offset: int = -1
    sizes: list[int] = field(default_factory=list)
    store_timestamp: int = 0
    store_host: bytes = b""
    takes_offset: list[bool] | None = None
    unavailable: Unavailable | None = None

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK

    @property
    def count(self) -> int:
        return len(self.sizes)

    @property
    def wrote_bytes(self) -> int:
        return sum(self.sizes)

    def entries(self) -> list[tuple[str, int, int]]:
        """(message id, queue offset, phy offset) per message of the batch."""
        out = []
        phy = self.phy_offset
        qoff = self.queue_offset
        for i, size in enumerate(self.sizes):
            takes = self.takes_offset[i] if self.takes_offset else True
            out.append((codec.message_id(self.store_host, phy), qoff if takes else 0, phy))
            phy += size
            if takes:
                qoff += 1
        return out


def failed(status: PutStatus, reason: str, unavailable: Unavailable | None = None) -> PutResult:
    return PutResult(status, reason, unavailable=unavailable)


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


class GetResult:
    """Messages of one pull as zero-copy views into the commit log.

    The views stay valid until :meth:`release` (or the end of a ``with`` block); callers copy
    what they keep. Segments cannot be unmapped while a result holds them.
    """

    __slots__ = ("status", "next_offset", "min_offset", "max_offset", "buffers", "queue_offsets", "_release", "buffer_total")

    def __init__(self, status: GetStatus, next_offset: int, min_offset: int, max_offset: int):
        self.status = status
        self.next_offset = next_offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.buffers: list[memoryview] = []
        self.queue_offsets: list[int] = []
        self.buffer_total = 0
        self._release: list[Callable[[], None]] = []

    def add(self, view: memoryview, queue_offset: int) -> None:
        self.buffers.append(view)
        self.queue_offsets.append(queue_offset)
        self.buffer_total += len(view)

    def hold(self, release: Callable[[], None], view: memoryview | None = None) -> None:
        """Keep a segment referenced (and the view its records are sliced from) until release."""
        self._release.append(release)
        if view is not None:
            self._release.append(view.release)

    def messages(self) -> list[codec.StoredMessage]:
        return [codec.decode(b) for b in self.buffers]

    def raw(self) -> bytes:
        """All records concatenated (the wire form of a raw pull)."""
        return b"".join(self.buffers)

    def release(self) -> None:
        for b in self.buffers:
            b.release()
        self.buffers = []
        rel, self._release = self._release, []
        for r in reversed(rel):  # views before the segment they came from
            r()

    def __enter__(self) -> GetResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __len__(self) -> int:
        return len(self.buffers)

    def __repr__(self) -> str:
        return (
            f"GetResult({self.status.name}, next={self.next_offset}, n={len(self.buffers)}, min={self.min_offset}, max={self.max_offset})"
        )


@dataclass(frozen=True)
class QueueProgress:
    """A consumer group's progress on one queue of this store."""

    queue_id: int
    committed: int  # -1: never committed
    min_offset: int
    max_offset: int
    lag: int
