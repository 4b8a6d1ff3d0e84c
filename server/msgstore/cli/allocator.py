"""glibc's allocator, tuned for a server whose requests and replication chunks are hundreds of
KiB to a few MiB each.

By default glibc serves an allocation above its mmap threshold (128 KiB at first, then the size
of the largest such chunk freed so far) with a fresh ``mmap``, and gives the heap's top back to
the kernel once it exceeds twice that. A 256 KiB request, or a replication chunk of 300 KiB to
1 MiB, then often lands in pages the kernel must fault in and zero again, on every request. On
2026-11-29 a SYNC master and its follower under batched 1 KiB sends took 0.5 page faults per
message and 9.0 us of CPU between them; with the threshold at 4 MiB and trimming above 32 MiB,
0.03 faults and 8.0 us, and 1.07-1.10x the rate (three alternating runs of three rounds each);
an unreplicated node 1.07x (its faults were fewer already). The price is up to 32 MiB of freed
memory kept per allocator arena instead of returned at once: glibc's own dynamic threshold
allows up to 64 MiB.

Values set through glibc's environment variables (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``) win: a deployment that sets either is left alone. Elsewhere (musl,
macOS) nothing is done.
"""

from __future__ import annotations

import ctypes
import os

MMAP_THRESHOLD = 4 << 20
TRIM_THRESHOLD = 32 << 20
_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def tune() -> bool:
    """True when the thresholds were set here."""
    if any(name in os.environ for name in ENVIRONMENT):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
