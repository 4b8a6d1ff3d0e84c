"""Shared fixtures: real store directories under pytest's tmp_path; and, under ``make test``
(``MSGSTORE_NO_SKIPS=1``), a run with a skipped test fails: every test the suite holds is one CI
is expected to run (a missing tool, privilege or compiled extension must not turn into a green
"N passed"). ``MSGSTORE_ALLOWED_SKIPS`` names node-id prefixes that may skip anyway (comma-separated)."""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.join(ROOT, "server") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "server"))

from msgstore.store import FixedDiskProbe, MessageStore  # noqa: E402

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
        # the host's disk is not the test's: a CI disk at 86 % once made a cleaner delete by force
        probe = disk_probe if disk_probe is not None else FixedDiskProbe(0.1)
        store = MessageStore(str(root or tmp_path / "store"), cfg, clock=clock, disk_probe=probe, **kw)
        opened.append(store)
        if start:
            store.start()
        return store

    yield factory
    errors = []
    for s in opened:
        try:
            s.shutdown()
        except Exception as e:  # every store is shut down; then the first failure fails the test
            errors.append(e)
    if errors:
        raise errors[0]


# The longest files (minutes each, from a run's --durations), started first: ``make test`` runs
# whole files on two workers (pytest-xdist, --dist loadfile), and a long one started last would
# leave the other worker idle at the end.
LONGEST_FIRST = (
    "tests/e2e/test_chart.py",
    "tests/deploy/test_image.py",
    "tests/ha/test_nemesis.py",
    "tests/pipeline/test_jobs.py",
    "tests/operator/test_replication.py",
    "tests/pipeline/test_source.py",
    "tests/operator/test_operator.py",
    "tests/reliability/test_crash_campaign.py",
)


def _rank(item) -> int:
    path = item.nodeid.split("::", 1)[0]
    return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config, items):
    """Variants marked ``soak`` run under ``make soak`` (MSGSTORE_SOAK=1) only: left out of the
    run (deselected, not skipped), so make test stays within its time."""
    items.sort(key=_rank)  # (stable: the rest keep their order)
    if os.environ.get("MSGSTORE_SOAK") == "1":
        return
    kept = [i for i in items if i.get_closest_marker("soak") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i.get_closest_marker("soak") is not None])
        items[:] = kept


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if os.environ.get("MSGSTORE_NO_SKIPS") != "1":
        return
    allowed = [p.strip() for p in os.environ.get("MSGSTORE_ALLOWED_SKIPS", "").split(",") if p.strip()]
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if not any(r.nodeid.startswith(p) for p in allowed)]
    if not skipped:
        return
    terminalreporter.section("skips that make test does not allow", sep="=", red=True, bold=True)
    for r in skipped:
        reason = r.longrepr[2] if isinstance(r.longrepr, tuple) else str(r.longrepr)
        terminalreporter.write_line(f"{r.nodeid}: {reason}")
    terminalreporter.write_line(f"{len(skipped)} tests skipped: this run does not show the suite passing (MSGSTORE_ALLOWED_SKIPS to allow)")
    config._msgstore_bad_skips = len(skipped)


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("MSGSTORE_NO_SKIPS") == "1" and exitstatus == 0:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        allowed = [p.strip() for p in os.environ.get("MSGSTORE_ALLOWED_SKIPS", "").split(",") if p.strip()]
        skipped = [r for r in (reporter.stats.get("skipped", []) if reporter else []) if not any(r.nodeid.startswith(p) for p in allowed)]
        if skipped:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
