"""The server's allocator tuning (cli/allocator.py), checked by what it is for: a large buffer
freed and allocated again reuses its pages instead of the kernel faulting in fresh ones. Each
case runs in a fresh interpreter (mallopt's settings are the process's)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import resource, sys
from msgstore.cli import allocator
tuned = allocator.tune() if sys.argv[1] == "tune" else False
size = 3 << 20  # above glibc's first mmap threshold (128 KiB): mmapped unless tuned
buf = b"x" * size  # every page written
del buf
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
buf = b"x" * size
print(tuned, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _probe(mode: str, **env: str) -> tuple[bool, int]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k not in ("GLIBC_TUNABLES", "LD_PRELOAD")}
    out = subprocess.run([sys.executable, "-c", PROBE, mode], env={**environ, **env}, capture_output=True, text=True, check=True).stdout
    tuned, faults = out.split()
    return tuned == "True", int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_large_buffer_allocated_again_reuses_its_pages():
    tuned, faults = _probe("tune")
    assert tuned
    assert faults < 100, f"{faults} page faults for a 3 MiB buffer allocated a second time"
    untuned, faults = _probe("leave")
    assert not untuned
    assert faults > 500, f"glibc's default already reuses the pages ({faults} faults): the probe shows nothing"


@pytest.mark.parametrize(
    "env",
    [
        {"MALLOC_TRIM_THRESHOLD_": "1048576"},
        {"MALLOC_MMAP_THRESHOLD_": "131072"},
        {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1048576"},
    ],
)
def test_a_deployment_s_own_malloc_settings_win(env):
    tuned, _ = _probe("tune", **env)
    assert not tuned


def test_other_glibc_tunables_do_not_stop_the_tuning():
    tuned, _ = _probe("tune", GLIBC_TUNABLES="glibc.pthread.rseq=1")
    assert tuned == sys.platform.startswith("linux")
