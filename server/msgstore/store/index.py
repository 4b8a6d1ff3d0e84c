"""Hash index files (docs/store-format.md §3.2): find records by key without scanning the commit log.

Layout ``[40 B header][slots × 4 B][entries × 20 B]``; a slot holds the newest entry of its
chain, each entry the previous one. Keys are put a batch at a time with numpy: hashing, chain
links and slot updates are array operations, because the dispatcher indexes every key of every
record and per-key Python would cap the store's throughput.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Callable, Sequence

import numpy as np

from ..record import codec
from .clock import Clock
from .layout import INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE, index_file_name, index_file_size, segment_files
from .segment import Segment, Syncer, msync

log = logging.getLogger(__name__)

HEADER_SIZE = INDEX_HEADER_SIZE
ENTRY_SIZE = INDEX_ENTRY_SIZE
_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")
ENTRY_DTYPE = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("tdiff", ">i4"), ("prev", ">i4")])
INT_MAX = 0x7FFFFFFF
_NO_SLOTS = np.empty(0, dtype=">i4")


class IndexFile:
    def __init__(
        self,
        path: str,
        slots: int,
        entries: int,
        *,
        create: bool,
        syncer: Syncer = msync,
        end_phy: int = 0,
        end_ts: int = 0,
        readonly: bool = False,
    ):
        self.path = path
        self.slots = slots
        self.entries = entries
        self.file_size = index_file_size(slots, entries)
        # Header and slot table are preallocated, so the stores into the mapping can never hit
        # SIGBUS on a full disk; entries are appended with pwrite, which fails with ENOSPC.
        self.seg = Segment(
            path, 0, self.file_size, create=create, syncer=syncer, preallocate=HEADER_SIZE + slots * 4 if create else 0, readonly=readonly
        )
        self._slot_view = np.frombuffer(self.seg.mm, dtype=">i4", count=slots, offset=HEADER_SIZE)
        if create:
            self.begin_ts = self.end_ts = end_ts if end_ts > 0 else 0
            self.begin_phy = self.end_phy = end_phy if end_phy > 0 else 0
            self.slot_count = 0
            self.index_count = 1
            self._write_header()
        else:
            (self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count, self.index_count) = _HEADER.unpack(
                self.seg.read(0, HEADER_SIZE)
            )
            if self.index_count < 1:
                self.index_count = 1
        self.seg.set_positions(HEADER_SIZE + slots * 4 + self.index_count * ENTRY_SIZE)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    def _write_header(self) -> None:
        self.seg.write_mapped(0, _HEADER.pack(self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count, self.index_count))

    @property
    def full(self) -> bool:
        return self.index_count >= self.entries

    @property
    def room(self) -> int:
        return max(0, self.entries - self.index_count)

    def put_key(self, key: str, phy: int, store_ts: int) -> bool:
        """One key (the reference's putKey); False when the file is full."""
        if self.full:
            return False
        h = codec.index_hash(key)
        return self.put_hashes(np.array([h], dtype=np.int64), np.array([phy], np.int64), np.array([store_ts], np.int64)) == 1

    def put_hashes(self, hashes: np.ndarray, phys: np.ndarray, tss: np.ndarray) -> int:
        """Put as many (hash, phy, store time) as fit; returns how many were put."""
        n = min(len(hashes), self.room)
        if n <= 0:
            return 0
        hashes, phys, tss = hashes[:n], phys[:n], tss[:n]
        count = self.index_count
        idx = count + np.arange(n, dtype=np.int64)
        slot = (hashes % self.slots).astype(np.int64)
        table = self._slot_view
        cur = table[slot].astype(np.int64)
        invalid = (cur <= 0) | (cur > count)
        cur[invalid] = 0
        prev = cur.copy()
        if n > 1:
            order = np.argsort(slot, kind="stable")
            s_sorted = slot[order]
            same = s_sorted[1:] == s_sorted[:-1]
            prev[order[1:][same]] = idx[order[:-1][same]]
        # time differences in seconds from the file's begin time (the first key sets it)
        tdiff = np.zeros(n, dtype=np.int64)
        begin_ts = self.begin_ts
        first = 0
        if count <= 1:
            if begin_ts > 0:
                tdiff[0] = min(max((int(tss[0]) - begin_ts) // 1000, 0), INT_MAX)
            self.begin_ts = begin_ts = int(tss[0])
            self.begin_phy = int(phys[0])
            first = 1
        if n > first:
            d = tss[first:].astype(np.int64) - begin_ts
            d = np.where(d < 0, 0, d // 1000)
            tdiff[first:] = np.minimum(d, INT_MAX)
        entries = np.empty(n, dtype=ENTRY_DTYPE)
        entries["hash"] = hashes
        entries["phy"] = phys
        entries["tdiff"] = tdiff
        entries["prev"] = prev
        self.seg.write_at(HEADER_SIZE + self.slots * 4 + count * ENTRY_SIZE, entries.tobytes())
        # newest entry of each slot wins
        uniq_slots, first_in_rev = np.unique(slot[::-1], return_index=True)
        last_pos = n - 1 - first_in_rev
        # a slot counts once, when its chain starts (its table value was empty before)
        fresh = int(np.count_nonzero(invalid[last_pos]))
        table[uniq_slots] = idx[last_pos]
        self.slot_count += fresh
        self.index_count = count + n
        self.end_phy = int(phys[-1])
        self.end_ts = int(tss[-1])
        self._write_header()
        return n

    def select(self, key_hash: int, max_num: int, begin: int, end: int) -> list[int]:
        """Walk the chain of ``key_hash`` newest first; phy offsets whose hash and time match."""
        out: list[int] = []
        slot_value = int(self._slot_view[key_hash % self.slots])
        count = self.index_count
        if slot_value <= 0 or slot_value > count or count <= 1:
            return out
        base = HEADER_SIZE + self.slots * 4
        nxt = slot_value
        seen = 0
        while len(out) < max_num and seen < count:
            seen += 1
            h, phy, tdiff, prev = _ENTRY.unpack(self.seg.read(base + nxt * ENTRY_SIZE, ENTRY_SIZE))
            if tdiff < 0:
                break
            t = self.begin_ts + tdiff * 1000
            if h == key_hash and begin <= t <= end:
                out.append(phy)
            if prev <= 0 or prev > count or prev == nxt or t < begin:
                break
            nxt = prev
        return out

    def entries_array(self) -> np.ndarray:
        """Every entry written (entry 0 is unused), for offline checks."""
        base = HEADER_SIZE + self.slots * 4 + ENTRY_SIZE
        n = max(0, self.index_count - 1)
        return np.frombuffer(self.seg.read(base, n * ENTRY_SIZE), dtype=ENTRY_DTYPE)

    def time_matched(self, begin: int, end: int) -> bool:
        return (
            (begin < self.begin_ts and end > self.end_ts)
            or (self.begin_ts <= begin <= self.end_ts)
            or (self.begin_ts <= end <= self.end_ts)
        )

    def flush(self) -> None:
        self.seg.mm.flush()

    def close(self) -> None:
        self._slot_view = _NO_SLOTS  # drop the view of the mapping, or it cannot be unmapped
        self.seg.close()

    def destroy(self) -> None:
        self._slot_view = _NO_SLOTS
        self.seg.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class IndexService:
    """All index files of a store: the newest takes keys, lookups go newest to oldest."""

    def __init__(
        self,
        directory: str,
        slots: int,
        entries: int,
        *,
        clock: Clock,
        syncer: Syncer = msync,
        on_file_full: Callable[[int], None] | None = None,
    ):
        self.directory = directory
        self.slots = slots
        self.entries = entries
        self.clock = clock
        self.syncer = syncer
        self.on_file_full = on_file_full
        self.files: list[IndexFile] = []
        self.damage: list[str] = []  # what load found wrong (said in the recovery report)
        self._lock = threading.RLock()

    def load(self, last_exit_ok: bool, index_msg_timestamp: int) -> int:
        """Map existing files; after a crash destroy those newer than the checkpoint's index
        time (they may be half written). Returns how many were destroyed."""
        destroyed = 0
        names = segment_files(self.directory)
        expected = index_file_size(self.slots, self.entries)
        wrong = [n for n in names if os.path.getsize(os.path.join(self.directory, n)) not in (expected, 0)]
        if wrong:
            # a file cut short or grown (damage, or geometry changed by hand): the index is derived
            # from the commit log, so it is set aside and the whole index built again from the log
            for name in wrong:
                os.replace(os.path.join(self.directory, name), os.path.join(self.directory, name + ".damaged"))
            msg = (
                f"index files {', '.join(wrong)} are not {expected} bytes long: set aside as *.damaged; "
                "the index is rebuilt from the commit log"
            )
            log.error(msg)
            self.damage.append(msg)
            for name in names:
                if name not in wrong:
                    os.unlink(os.path.join(self.directory, name))
                    destroyed += 1
            return destroyed
        for name in names:
            path = os.path.join(self.directory, name)
            size = os.path.getsize(path)
            if size != expected:  # empty: a file created and never written
                os.unlink(path)
                continue
            f = IndexFile(path, self.slots, self.entries, create=False, syncer=self.syncer)
            if not last_exit_ok and f.end_ts > index_msg_timestamp:
                log.info("destroying index file %s written after the last checkpoint", name)
                f.destroy()
                destroyed += 1
                continue
            self.files.append(f)
        return destroyed

    @property
    def end_phy(self) -> int:
        """Records below this phy offset are already indexed."""
        return self.files[-1].end_phy if self.files else 0

    def _writable(self) -> IndexFile:
        last = self.files[-1] if self.files else None
        if last is not None and not last.full:
            return last
        os.makedirs(self.directory, exist_ok=True)
        ms = self.clock.now_ms()
        while os.path.exists(os.path.join(self.directory, index_file_name(ms))):
            ms += 1
        path = os.path.join(self.directory, index_file_name(ms))
        f = IndexFile(
            path,
            self.slots,
            self.entries,
            create=True,
            syncer=self.syncer,
            end_phy=last.end_phy if last else 0,
            end_ts=last.end_ts if last else 0,
        )
        self.files.append(f)
        if last is not None:
            self._retire(last)
        return f

    def _retire(self, full: IndexFile) -> None:
        """Flush a full file in the background and record its end time in the checkpoint."""

        def work() -> None:
            try:
                full.flush()
            except ValueError:  # closed meanwhile (shutdown or deleted)
                return
            if self.on_file_full is not None:
                self.on_file_full(full.end_ts)

        threading.Thread(target=work, name="index-flush", daemon=True).start()

    def add(self, hashes: np.ndarray, phys: np.ndarray, tss: np.ndarray, sys_flags: np.ndarray) -> int:
        """Index keys given as hashes (in commit-log order); returns how many were put.

        Records below the last indexed phy offset are skipped, so re-dispatch is idempotent;
        rollback records are not indexed.
        """
        with self._lock:
            keep = (phys >= self.end_phy) & ((sys_flags & codec.TRANSACTION_MASK) != codec.TRANSACTION_ROLLBACK)
            if not keep.all():
                hashes, phys, tss = hashes[keep], phys[keep], tss[keep]
            done = 0
            while done < len(hashes):
                f = self._writable()
                done += f.put_hashes(hashes[done:], phys[done:], tss[done:])
            return done

    def build(
        self, topics: Sequence[str], keys: Sequence[list[str] | None], phys: Sequence[int], tss: Sequence[int], sys_flags: Sequence[int]
    ) -> int:
        """Index records given with their key strings (tools and tests)."""
        flat = [(f"{t}#{k}", p, ts, sf) for t, ks, p, ts, sf in zip(topics, keys, phys, tss, sys_flags) if ks for k in ks]
        if not flat:
            return 0
        h = codec.jhash_many([f[0] for f in flat]).astype(np.int64)
        h = np.where(h == -0x80000000, 0, np.abs(h))
        return self.add(
            h, np.array([f[1] for f in flat], np.int64), np.array([f[2] for f in flat], np.int64), np.array([f[3] for f in flat], np.int64)
        )

    def query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Candidate phy offsets (hash matches, newest first); the caller checks the key."""
        key_hash = codec.index_hash(f"{topic}#{key}")
        out: list[int] = []
        with self._lock:
            files = list(self.files)
        for f in reversed(files):
            if f.time_matched(begin, end):
                try:
                    out.extend(f.select(key_hash, max_num - len(out), begin, end))
                except (ValueError, TypeError):  # closed while we looked
                    continue
            if f.begin_ts < begin or len(out) >= max_num:
                break
        return out

    def truncate(self, end: int) -> None:
        """After recovery cut the commit log at ``end``: entries past it are stale. Files that
        hold only such entries go; the newest file's end is lowered so new records at those
        offsets are indexed again (lookups check every hit against the record, §12.6)."""
        with self._lock:
            while len(self.files) > 1 and self.files[-1].begin_phy >= end:
                self.files.pop().destroy()
            if self.files and self.files[-1].end_phy > end:
                last = self.files[-1]
                last.end_phy = end
                last._write_header()

    def delete_expired(self, cl_min: int) -> int:
        """Delete files (never the newest) whose records all precede the commit-log min."""
        with self._lock:
            stop = 0
            for f in self.files[:-1]:
                if f.end_phy < cl_min:
                    stop += 1
                else:
                    break
            doomed = self.files[:stop]
            self.files = self.files[stop:]
        for f in doomed:
            f.destroy()
        return len(doomed)

    def flush(self) -> None:
        with self._lock:
            files = list(self.files)
        for f in files:
            try:
                f.flush()
            except ValueError:
                pass

    def destroy_all(self) -> None:
        with self._lock:
            for f in self.files:
                f.destroy()
            self.files = []

    def close(self) -> None:
        with self._lock:
            for f in self.files:
                f.close()
            self.files = []
