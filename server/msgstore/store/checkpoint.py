"""The checkpoint file (docs/store-format.md §3.3): how far commit log, consume queues and index are
known to be on disk, which tells abnormal recovery where to start."""

from __future__ import annotations

import os
import struct

SIZE = 4096
_LAYOUT = struct.Struct(">qqqqq")


class Checkpoint:
    def __init__(self, path: str):
        self.path = path
        exists = os.path.exists(path)
        self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if not exists or os.fstat(self._fd).st_size < SIZE:
            os.ftruncate(self._fd, SIZE)
        raw = os.pread(self._fd, _LAYOUT.size, 0)
        self.physic_msg_timestamp: int
        self.logics_msg_timestamp: int
        self.index_msg_timestamp: int
        self.master_flushed_offset: int
        self.confirm_phy_offset: int
        (
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        ) = _LAYOUT.unpack(raw)

    def min_timestamp(self) -> int:
        """Store time from which abnormal recovery must re-dispatch (3 s of slack)."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp(), self.index_msg_timestamp)

    def flush(self) -> None:
        data = _LAYOUT.pack(
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        )
        if self._fd is None:
            return
        os.pwrite(self._fd, data, 0)
        os.fdatasync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            self.flush()
            os.close(self._fd)
            self._fd = None

    def as_dict(self) -> dict[str, int]:
        return {
            "physicMsgTimestamp": self.physic_msg_timestamp,
            "logicsMsgTimestamp": self.logics_msg_timestamp,
            "indexMsgTimestamp": self.index_msg_timestamp,
            "masterFlushedOffset": self.master_flushed_offset,
            "confirmPhyOffset": self.confirm_phy_offset,
        }
