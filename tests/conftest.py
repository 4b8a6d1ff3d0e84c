"""Shared fixtures: real store directories under pytest's tmp_path."""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.join(ROOT, "server") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "server"))

from msgstore.store import MessageStore  # noqa: E402

# Small files so tests create many segments without writing gigabytes.
SMALL = {
    "mappedFileSizeCommitLog": 64 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 200,
    "maxHashSlotNum": 1024,
    "maxIndexNum": 4096,
    "flushIntervalCommitLog": 20,
    "flushIntervalConsumeQueue": 20,
    "cleanResourceInitialDelay": 3_600_000,  # tests run cleaners by hand
}


@pytest.fixture
def make_store(tmp_path):
    """Factory: ``make_store(root=None, **settings)`` starts a store; all are shut down after."""
    opened: list[MessageStore] = []

    def factory(root=None, *, clock=None, disk_probe=None, syncer=None, start=True, **settings):
        cfg = dict(SMALL)
        cfg.update(settings)
        kw = {}
        if syncer is not None:
            kw["syncer"] = syncer
        store = MessageStore(str(root or tmp_path / "store"), cfg, clock=clock, disk_probe=disk_probe, **kw)
        opened.append(store)
        if start:
            store.start()
        return store

    yield factory
    for s in opened:
        try:
            s.shutdown()
        except Exception:
            pass
