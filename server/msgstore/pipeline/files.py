"""Offline views of a store's consume queues, index files and record keys (``kind`` option),
which ``msgstore pipeline verify`` joins against the records."""

from __future__ import annotations

import mmap
import os
from typing import Iterator

import numpy as np
import pyarrow as pa

from ..record import codec
from ..store.consume_queue import FILLER_SIZE, UNIT_DTYPE
from ..store.index import ENTRY_DTYPE, HEADER_SIZE, _HEADER
from . import schema


def read_kind(kind: str, root: str) -> Iterator[pa.RecordBatch]:
    if kind == "consumequeue":
        yield from consume_queue_units(root)
    elif kind == "index":
        yield from index_entries(root)
    elif kind == "keyhashes":
        yield from record_key_hashes(root)


def consume_queue_units(root: str) -> Iterator[pa.RecordBatch]:
    base = os.path.join(root, "consumequeue")
    if not os.path.isdir(base):
        return
    for topic in sorted(os.listdir(base)):
        for q in sorted(os.listdir(os.path.join(base, topic))):
            qdir = os.path.join(base, topic, q)
            if not q.isdigit() or not os.path.isdir(qdir):
                continue
            for name in sorted(n for n in os.listdir(qdir) if n.isdigit()):
                with open(os.path.join(qdir, name), "rb") as f:
                    data = f.read()
                units = np.frombuffer(data[: len(data) - len(data) % 20], dtype=UNIT_DTYPE)
                valid = (units["phy"] >= 0) & (units["size"] > 0)
                n = len(units) if valid.all() else int(np.argmin(valid))
                units = units[:n]
                offsets = int(name) // 20 + np.arange(n, dtype=np.int64)
                real = ~((units["phy"] == 0) & (units["size"] == FILLER_SIZE))
                if not real.any():
                    continue
                units, offsets = units[real], offsets[real]
                yield pa.RecordBatch.from_arrays([
                    pa.array([topic] * len(units), pa.string()), pa.array(np.full(len(units), int(q), np.int32)),
                    pa.array(offsets), pa.array(units["phy"].astype(np.int64)), pa.array(units["size"].astype(np.int32)),
                    pa.array(units["tag"].astype(np.int64))], schema=schema.CONSUMEQUEUE_ARROW)


def index_entries(root: str) -> Iterator[pa.RecordBatch]:
    base = os.path.join(root, "index")
    if not os.path.isdir(base):
        return
    for name in sorted(n for n in os.listdir(base) if n.isdigit()):
        path = os.path.join(base, name)
        with open(path, "rb") as f:
            header = f.read(HEADER_SIZE)
            if len(header) < HEADER_SIZE:
                continue
            _bt, _et, begin_phy, _ep, _slots_used, count = _HEADER.unpack(header)
            size = os.fstat(f.fileno()).st_size
            slots = _slot_count(size)
            if slots is None or count <= 1:
                continue
            mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
        try:
            start = HEADER_SIZE + slots * 4 + 20
            entries = np.frombuffer(mm[start:start + (count - 1) * 20], dtype=ENTRY_DTYPE)
        finally:
            mm.close()
        n = len(entries)
        yield pa.RecordBatch.from_arrays([
            pa.array([name] * n, pa.string()), pa.array(entries["hash"].astype(np.int32)),
            pa.array(entries["phy"].astype(np.int64)), pa.array(np.full(n, begin_phy, np.int64))], schema=schema.INDEX_ARROW)


def _slot_count(size: int) -> int | None:
    """Index geometry from the file size (the reference's 4 entries per slot, or config)."""
    from ..store.config import StoreConfig

    cfg = StoreConfig()
    if HEADER_SIZE + cfg.maxHashSlotNum * 4 + cfg.maxIndexNum * 20 == size:
        return cfg.maxHashSlotNum
    if (size - HEADER_SIZE) % 84 == 0:
        return (size - HEADER_SIZE) // 84
    return None


def record_key_hashes(root: str) -> Iterator[pa.RecordBatch]:
    """(commit-log offset, topic, key, index hash) for every key of every record."""
    from .source import mapped, segment_files

    for part in segment_files(root):
        with mapped(part.path) as (mm, size):
            pos = 0
            while pos < size:
                cols, end, stop, _bad = codec.scan_records(mm, pos, size, False, part.start, 8192)
                if len(cols.key_hashes):
                    owners = cols.key_owner.tolist()
                    phys = cols.phys[cols.key_owner]
                    keys, topics = [], []
                    last = None
                    for o in owners:  # the keys in the order their hashes were produced
                        if o != last:
                            rec = codec.decode(mm, int(cols.phys[o]) - part.start, with_body=False)
                            ks = iter(rec.keys)
                            last = o
                        keys.append(next(ks))
                        topics.append(cols.topic(o))
                    yield pa.RecordBatch.from_arrays([
                        pa.array(phys), pa.array(topics, pa.string()), pa.array(keys, pa.string()),
                        pa.array(cols.key_hashes.astype(np.int32))], schema=schema.KEYHASH_ARROW)
                pos = end
                if stop != "limit":
                    break
