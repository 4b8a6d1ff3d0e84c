"""The ``abort`` file (docs/store-format.md §1, §8): present while the store runs. RocketMQ only
asks whether it exists; here it also names the run that wrote it: the kernel's boot id and the
device and inode of the store's directories (root, commit log, consume queues), so that a start
after a crash knows whether the crashed process died without the machine going down (§3.4,
issue 21). A run writes that line only after its first save of the queues' state, so a start
that failed or died before leaves nothing a later start would trust.

Why that matters: when only the process died, every byte it wrote is still in the page cache,
so nothing a consume queue holds can be stale and the saved queue ends need no check of their
files; 100,000 checks are the whole cost of a crash start (17 s warm, a minute cold). Any doubt
(another boot, a copied directory, an empty or unreadable file) means the full check. What it
cannot see: a copy of a running store restored into the same directories on the same boot, or
a snapshot of the volume mounted back under the same device number; empty the abort file
(``: > abort``) before starting such a copy.
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


def identity(dirs: list[str]) -> str:
    """This boot and these directories: ``boot=<id> <st_dev>:<st_ino> ...`` ('' without a boot id)."""
    boot = boot_id()
    if not boot:
        return ""
    parts = [f"boot={boot}"]
    for d in dirs:
        try:
            st = os.stat(d)
        except OSError:  # (not made yet: nothing of a run to trust)
            return ""
        parts.append(f"{st.st_dev}:{st.st_ino}")
    return " ".join(parts)


def _write(path: str, text: str, directory: str | None) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if text:
            os.write(fd, (text + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    if directory is not None:
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def create(path: str, root: str) -> None:
    """The abort file of a run that is starting: empty (RocketMQ's), so that a start that
    fails or dies before its first queue-state save leaves nothing a later start would trust."""
    _write(path, "", root)


def stamp(path: str, dirs: list[str]) -> None:
    """Name this run in the abort file: its queue state is saved, so from now on a crash of
    the process alone leaves ends a start may take without checking."""
    _write(path, identity(dirs), None)


def page_cache_survived(path: str, dirs: list[str]) -> bool:
    """The abort file left by a crashed run names this boot and these directories: only the
    process died, so what it wrote is all there (in the page cache if not on disk)."""
    try:
        with open(path, "rb") as f:
            saved = f.read(1024).decode(errors="replace").strip()
    except OSError:
        return False
    mine = identity(dirs)
    return bool(saved) and bool(mine) and saved == mine
