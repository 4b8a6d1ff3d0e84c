"""The records' body CRC-32 (zlib's), for Python callers and for the compiled loops.

zlib-ng computes the same CRC-32 about 3x faster than CPython's zlib on 1 KiB bodies. The
compiled transcoder and record scanner call it once per record; through its Python wrapper
that call cost a memoryview, a call and an int per record, a third of the transcoder's time
on 1 KiB bodies (0.27 against 0.18 us per message, 2026-11-29). So they are handed the C
function itself: ``FOR_NATIVE`` is the address of zlib-ng's exported ``zng_crc32`` (zlib's
signature), or the Python callable where that cannot be had (the compiled code takes both).
The address is used only after it computed the same CRCs as the callable at import.
"""

from __future__ import annotations

import ctypes
import logging
import zlib
from collections.abc import Callable
from types import ModuleType

log = logging.getLogger(__name__)

crc32: Callable[[bytes | bytearray | memoryview], int]
_zlib_ng: ModuleType | None
try:
    from zlib_ng import zlib_ng

    _zlib_ng, crc32 = zlib_ng, zlib_ng.crc32
except ImportError:  # pragma: no cover - the dependency is pinned, this is only a safety net
    _zlib_ng = None
    crc32 = zlib.crc32

_SAMPLES = (b"", b"a", b"123456789", bytes(range(256)) * 5)


def c_function_address() -> int | None:
    """The address of zlib-ng's ``zng_crc32`` when it agrees with :data:`crc32`, else None."""
    if _zlib_ng is None:
        return None
    try:
        fn = ctypes.CDLL(_zlib_ng.__file__).zng_crc32
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_uint32, ctypes.c_char_p, ctypes.c_uint32)
    fn.restype = ctypes.c_uint32
    if any(fn(0, s, len(s)) != crc32(s) for s in _SAMPLES):
        log.warning("zlib-ng's zng_crc32 disagrees with its Python wrapper: the compiled code calls the wrapper")
        return None
    return ctypes.cast(fn, ctypes.c_void_p).value


FOR_NATIVE: int | Callable[[bytes | bytearray | memoryview], int] = c_function_address() or crc32
