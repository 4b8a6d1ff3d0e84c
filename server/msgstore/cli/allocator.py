"""glibc's allocator, tuned for a server whose requests and replication chunks are hundreds of
KiB to a few MiB each.

By default glibc serves an allocation above its mmap threshold (128 KiB at first, then the size
of the largest such chunk freed so far) with a fresh ``mmap``, and gives the heap's top back to
the kernel once it exceeds twice that. A 256 KiB request, or a replication chunk of 300 KiB to
1 MiB, then often lands in pages the kernel must fault in and zero again, on every request. On
2026-11-29 a SYNC master and its follower under batched 1 KiB sends took 0.5 page faults per
message and 9.0 us of CPU between them; with the threshold at 4 MiB and trimming above 32 MiB,
0.03 faults and 8.0 us, and 1.07-1.10x the rate (three alternating runs of three rounds each);
an unreplicated node 1.07x (its faults were fewer already).

The price is memory kept rather than given back: up to 32 MiB of free space at the top of each
allocator arena (glibc's own dynamic threshold lets that reach 64 MiB), and blocks of 128 KiB to
4 MiB now come from the arenas' heaps, where a live block above a freed one holds it too. glibc
makes up to 8 arenas per CPU it sees (the node's, not the pod's limit); a deployment short of
memory can set ``MALLOC_ARENA_MAX``.

Where a deployment sets glibc's thresholds itself (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``, or ``glibc.malloc.*`` in ``GLIBC_TUNABLES``), nothing is changed.
Elsewhere (musl, macOS) nothing is done either.
"""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger(__name__)

MMAP_THRESHOLD = 4 << 20
TRIM_THRESHOLD = 32 << 20
_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def deployment_sets_it() -> bool:
    return any(name in os.environ for name in ENVIRONMENT) or "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", "")


def tune() -> bool:
    """True when both thresholds were set here."""
    if deployment_sets_it():
        log.debug("glibc's malloc thresholds are the deployment's (environment): left as they are")
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    tuned = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if tuned:
        log.debug("malloc: mmap threshold %d MiB, heap trimmed above %d MiB", MMAP_THRESHOLD >> 20, TRIM_THRESHOLD >> 20)
    else:  # (musl's mallopt does nothing; a half-applied glibc one is left as it is)
        log.debug("malloc: this C library did not take the thresholds")
    return tuned
