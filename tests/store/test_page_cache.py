"""The commit log gives the page cache of its flushed bytes back once they are more than
``cachedCommitLogBytes`` behind the flushed and dispatched end (flush.drop_cached; 0, the
default, never): on a VM whose host takes back the memory its guest frees, page-cache growth
was half of a batched send's server CPU, and appends that reuse given-back pages went 1.9x as
fast. Residency is read with mincore(2), as the kernel sees it; every message must still read
back whole from the file."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os

import pytest

from msgstore.store import GetStatus, Message, MessageStore
from msgstore.store.segment import Segment
from msgstore.store.segment_queue import DROP_STEP
from tests.support.servers import wait_until

MiB = 1024 * 1024
SEGMENT = 4 * MiB
BODY = 1000
TOPIC = "cache"

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]


def resident_pages(path: str) -> int:
    """Pages of ``path`` in the page cache (a mapping of our own, never touched, asks mincore)."""
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")
        try:
            vec = (ctypes.c_ubyte * ((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE))()
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
            return sum(b & 1 for b in vec)
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def fill(store: MessageStore, total_bytes: int, start: int = 0) -> int:
    """Messages numbered from ``start`` (queue offset = number) until ``total_bytes`` of bodies."""
    n = 0
    while n * BODY < total_bytes:
        r = store.put_messages(TOPIC, 0, [Message(TOPIC, b"%08d" % (start + n + k) + b"x" * (BODY - 8), queue_id=0) for k in range(64)])
        assert r.ok, r
        n += 64
    return n


def read_back(store: MessageStore, n: int) -> None:
    offset = 0
    while offset < n:
        res = store.get_message(None, TOPIC, 0, offset, max_msgs=256)
        try:
            assert res.status is GetStatus.FOUND, (res.status, offset)
            for m in res.messages():
                assert m.body == b"%08d" % offset + b"x" * (BODY - 8), f"offset {offset}"
                offset += 1
        finally:
            res.release()


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_flushed_pages_far_behind_are_given_back_and_read_again_from_the_file(tmp_path, flush):
    keep = 2 * MiB
    settings = {"mappedFileSizeCommitLog": SEGMENT, "flushDiskType": flush, "flushIntervalCommitLog": 10, "cachedCommitLogBytes": keep}
    with MessageStore(str(tmp_path / "store"), settings).start() as store:
        n = fill(store, 3 * DROP_STEP)
        assert store.dispatcher.wait_dispatched(store.commitlog.max_offset, 10)
        n += fill(store, 1, start=n)  # (a flush after the dispatch: what was given back waits for both)
        end = store.commitlog.max_offset
        wait_until(lambda: store.commitlog.flushed_offset >= end, timeout=10, what="the flush")
        cl = os.path.join(store.root, "commitlog")
        segments = sorted(os.listdir(cl))
        assert len(segments) >= 6
        # what lies wholly more than keep and a step behind the end is given back (a read of a
        # segment's head may bring its first pages back: one read-around, at most 32), the tail is not
        behind = [name for name in segments if int(name) + SEGMENT <= end - keep - DROP_STEP]
        assert len(behind) >= 3
        wait_until(
            lambda: all(resident_pages(os.path.join(cl, name)) <= 32 for name in behind),
            timeout=10,
            what=lambda: f"the page cache given back: {[(name, resident_pages(os.path.join(cl, name))) for name in segments]}",
        )
        assert resident_pages(os.path.join(cl, segments[-1])) > 32
        read_back(store, n)
        assert resident_pages(os.path.join(cl, segments[1])) > 32  # read again from the file


def test_by_default_the_page_cache_is_the_kernel_s_as_in_the_reference(tmp_path):
    settings = {"mappedFileSizeCommitLog": SEGMENT, "flushIntervalCommitLog": 10}  # cachedCommitLogBytes=0
    with MessageStore(str(tmp_path / "store"), settings).start() as store:
        fill(store, 3 * DROP_STEP)
        end = store.commitlog.max_offset
        wait_until(lambda: store.commitlog.flushed_offset >= end, timeout=10, what="the flush")
        cl = os.path.join(store.root, "commitlog")
        first = os.path.join(cl, sorted(os.listdir(cl))[0])
        assert resident_pages(first) >= 0.5 * SEGMENT // mmap.PAGESIZE


def test_a_truncation_to_a_record_boundary_leaves_the_next_give_back_page_aligned(tmp_path):
    """A follower cut back (truncate_dirty -> set_positions) to a record boundary inside what
    was given back; madvise wants a page-aligned start, and an unaligned one failed every flush
    after (the cold review)."""
    path = str(tmp_path / "00000000000000000000")
    seg = Segment(path, 0, SEGMENT, create=True, preallocate=SEGMENT)
    try:
        seg.append(b"x" * (3 * MiB))
        seg.flush(0)
        assert seg.drop_cached(2 * MiB) == 2 * MiB
        seg.set_positions(MiB + 1000)  # (a record boundary, not a page's)
        assert seg.uncached % mmap.PAGESIZE == 0 and seg.uncached <= MiB + 1000
        seg.append(b"y" * (2 * MiB))
        seg.flush(0)
        assert seg.drop_cached(SEGMENT) == MiB and seg.uncached == 2 * MiB  # (to a 2 MiB folio's edge: not all of it is flushed)
        assert seg.read(MiB + 1000, 4) == b"yyyy" and seg.read(MiB, 4) == b"xxxx"
    finally:
        seg.close()
