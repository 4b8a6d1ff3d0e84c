"""Offline views of a store's consume queues, index files and record keys (``kind`` option),
which ``msgstore pipeline verify`` joins against the records."""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ..record import codec
from ..store.consume_queue import FILLER_SIZE, UNIT_DTYPE
from ..store.index import _HEADER, ENTRY_DTYPE, HEADER_SIZE
from ..store.layout import CQ_UNIT_SIZE, index_geometry
from ..store.layout import segment_files as segment_names
from ..store.offline import store_layout
from ..store.queue_file import read_extent
from . import schema


@dataclass
class SegmentFile(InputPartition):
    path: str
    start: int


def segment_files(path: str) -> list[SegmentFile]:
    """The commit-log segments of a store root (wherever its settings put them), or of a
    directory of archived segment files named by start offset; empty files are left out."""
    from .options import OptionError

    if not os.path.isdir(path):
        raise OptionError("path", f"{path} is not a directory")
    _cfg, layout = store_layout(path)
    directory = layout.commitlog_dir if os.path.isdir(layout.commitlog_dir) else path
    return [
        SegmentFile(os.path.join(directory, n), int(n)) for n in segment_names(directory) if os.path.getsize(os.path.join(directory, n)) > 0
    ]


@contextlib.contextmanager
def mapped(path: str) -> Iterator[tuple[mmap.mmap | None, int]]:
    """A segment file mapped read-only, with its size (None for an empty file). Closing
    tolerates Arrow buffers still viewing the map: they keep it alive until they go."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) if size else None
    try:
        yield mm, size
    finally:
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                pass


def read_kind(kind: str, root: str) -> Iterator[pa.RecordBatch]:
    if kind == "consumequeue":
        yield from consume_queue_units(root)
    elif kind == "index":
        yield from index_entries(root)
    elif kind == "keyhashes":
        yield from record_key_hashes(root)


def consume_queue_units(root: str) -> Iterator[pa.RecordBatch]:
    _cfg, layout = store_layout(root)
    for topic, q, qdir in layout.queue_dirs():
        for name in segment_names(qdir):
            data, _size = read_extent(os.path.join(qdir, name), CQ_UNIT_SIZE)  # a sparse file's holes are not read
            units = np.frombuffer(data[: len(data) - len(data) % CQ_UNIT_SIZE], dtype=UNIT_DTYPE)
            valid = (units["phy"] >= 0) & (units["size"] > 0)
            n = len(units) if valid.all() else int(np.argmin(valid))
            units = units[:n]
            offsets = int(name) // CQ_UNIT_SIZE + np.arange(n, dtype=np.int64)
            real = ~((units["phy"] == 0) & (units["size"] == FILLER_SIZE))
            if not real.any():
                continue
            units, offsets = units[real], offsets[real]
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([topic] * len(units), pa.string()),
                    pa.array(np.full(len(units), q, np.int32)),
                    pa.array(offsets),
                    pa.array(units["phy"].astype(np.int64)),
                    pa.array(units["size"].astype(np.int32)),
                    pa.array(units["tag"].astype(np.int64)),
                ],
                schema=schema.CONSUMEQUEUE_ARROW,
            )


def index_entries(root: str) -> Iterator[pa.RecordBatch]:
    cfg, layout = store_layout(root)
    for path in layout.index_files():
        name = os.path.basename(path)
        with open(path, "rb") as f:
            header = f.read(HEADER_SIZE)
            if len(header) < HEADER_SIZE:
                continue
            _bt, _et, begin_phy, _ep, _slots_used, count = _HEADER.unpack(header)
            size = os.fstat(f.fileno()).st_size
            geometry = index_geometry(size, cfg.maxHashSlotNum, cfg.maxIndexNum)
            if geometry is None or count <= 1:
                continue
            mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
        try:
            start = HEADER_SIZE + geometry[0] * 4 + 20
            entries = np.frombuffer(mm[start : start + (count - 1) * 20], dtype=ENTRY_DTYPE)
        finally:
            mm.close()
        n = len(entries)
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([name] * n, pa.string()),
                pa.array(entries["hash"].astype(np.int32)),
                pa.array(entries["phy"].astype(np.int64)),
                pa.array(np.full(n, begin_phy, np.int64)),
            ],
            schema=schema.INDEX_ARROW,
        )


def record_key_hashes(root: str) -> Iterator[pa.RecordBatch]:
    """(commit-log offset, topic, key, index hash) for every key of every record."""
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
                    yield pa.RecordBatch.from_arrays(
                        [
                            pa.array(phys),
                            pa.array(topics, pa.string()),
                            pa.array(keys, pa.string()),
                            pa.array(cols.key_hashes.astype(np.int32)),
                        ],
                        schema=schema.KEYHASH_ARROW,
                    )
                pos = end
                if stop != "limit":
                    break
