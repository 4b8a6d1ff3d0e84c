"""The ``abort`` file (docs/store-format.md §1, §8): present while the store runs. RocketMQ only
asks whether it exists; here it also names the run that created it, the kernel's boot id and
the store root's device and inode, so that a start after a crash knows whether the crashed
process died on this machine without the machine going down (docs §3.4, issue 21).

Why that matters: when only the process died, every byte it wrote is still in the page cache,
so nothing a consume queue holds can be stale and the saved queue ends need no check of their
files; 100,000 checks are the whole cost of a crash start (17 s warm, a minute cold). Any doubt
(another boot, a copied or restored directory, a file written by an older version, an
unreadable one) means the full check.
"""

from __future__ import annotations

import os

BOOT_ID = "/proc/sys/kernel/random/boot_id"


def boot_id() -> str:
    """The running kernel's boot id ('' where there is none): it changes with every boot."""
    try:
        with open(BOOT_ID) as f:
            return f.read().strip()
    except OSError:
        return ""


def identity(root: str) -> str:
    """This boot and this directory: ``boot=<id> dev=<st_dev> ino=<st_ino>`` ('' without a boot id)."""
    boot = os.environ.get("MSGSTORE_BOOT_ID") or boot_id()  # (tests play a reboot by changing it)
    if not boot:
        return ""
    st = os.stat(root)
    return f"boot={boot} dev={st.st_dev} ino={st.st_ino}"


def create(path: str, root: str) -> None:
    """Write (or rewrite) the abort file naming this run, durably, with its directory."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, (identity(root) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    dfd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def page_cache_survived(path: str, root: str) -> bool:
    """The abort file left by a crashed run names this boot and this directory: only the
    process died, so what it wrote is all there (in the page cache if not on disk)."""
    try:
        with open(path, "rb") as f:
            saved = f.read(512).decode(errors="replace").strip()
    except OSError:
        return False
    mine = identity(root)
    return bool(saved) and bool(mine) and saved == mine
