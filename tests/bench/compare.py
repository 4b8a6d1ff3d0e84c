"""``make bench-compare [BASELINE=<git ref>]``: this checkout's server against a baseline
commit's, the same workloads, alternately, in one run, so that a regression is seen when it is
made (issue 30: batched sends lost 38 % over several changes and nobody saw it).

The baseline (the last tag, or the ref named) is checked out with ``git worktree`` and installed
in a virtualenv of its own under tests/bench/results/tmp/baselines/<commit> (kept: the next run
reuses it). Both servers run with the store's default settings on fresh directories; the client
is this checkout's for both (what is compared is the server). Each workload runs ROUNDS times on
each server, in alternating order, and every value goes into pyperf benchmark files (seconds per
operation, as pyperf expects: lower is better), which ``pyperf compare_to`` then compares, with
its significance test. The files are kept under tests/bench/results/compare/.

Workloads (1 KiB bodies, async flush):

- ``batched-send``: 3 streams of 500-message batches (the issue's measure);
- ``batched-send-delayed-words``: the same, every body a JSON document with "DELAYED" and
  "TRAN_MSG" in it (a body's content must not change the send path);
- ``async-singles``: 64 asyncio tasks each awaiting every send (the per-request cost);
- ``pull``: a consumer reading back one queue's 100,000 messages;
- ``sync-replicated``: a SYNC master and its follower (``inSyncReplicas=2``), 4 threads of
  256-message batches (bench_ha's measure): every answer waits for the follower's copy.

BENCH_WORKLOADS=batched-send,pull picks some; BENCH_ROUNDS (6, rounded up to even) and BENCH_SCALE (1) size them.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

from msgstore.client import AsyncClient, Client, OutMessage
from tests.ha.conftest import Group
from tests.support.servers import ROOT, ServerProcess

from .bench_grpc import batched_send
from .bench_ha import _defaults, send_rate

PYPERF = "pyperf==2.11.0"  # as pyproject.toml's bench extra
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
BASELINES = os.path.join(RESULTS, "tmp", "baselines")
ROUNDS = 2 * ((int(os.environ.get("BENCH_ROUNDS", "6")) + 1) // 2)  # even: each server goes first as often
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
KIB = os.urandom(1024)
SYNC_MASTER = ["brokerRole=SYNC_MASTER", "inSyncReplicas=2"]
WORDY = json.dumps({"status": "DELAYED", "TRAN_MSG": True, "topic": "SCHEDULE_TOPIC_XXXX", "pad": "x" * 940}).encode()[:1024]


def _git(*args: str, cwd: str = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def baseline_ref() -> str:
    named = os.environ.get("BASELINE", "").strip()
    if named:
        return named
    try:
        return _git("describe", "--tags", "--abbrev=0")
    except subprocess.CalledProcessError:
        raise SystemExit("no release tag to compare with: name a baseline, make bench-compare BASELINE=<commit or tag>") from None


def build_baseline(ref: str) -> tuple[str, str, str]:
    """(commit, its tree, its virtualenv's python): checked out and installed once, then reused."""
    commit = _git("rev-parse", "--verify", f"{ref}^{{commit}}")
    tree = os.path.join(BASELINES, commit[:12])
    python = os.path.join(tree, ".venv", "bin", "python")
    stamp = os.path.join(tree, ".venv", ".installed")
    if os.path.exists(stamp):
        return commit, tree, python
    os.makedirs(BASELINES, exist_ok=True)
    if not os.path.isdir(tree):
        _git("worktree", "add", "--detach", tree, commit)
    subprocess.run([sys.executable, "-m", "venv", os.path.join(tree, ".venv")], check=True)
    print(f"installing the baseline {commit[:12]} into {tree}/.venv (once)", flush=True)
    subprocess.run([python, "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", "-e", tree], check=True, cwd=tree)
    pathlib.Path(stamp).touch()
    return commit, tree, python


def _server(tag: str, workdir: str, python: str | None = None, root: str | None = None) -> ServerProcess:
    s = ServerProcess(tempfile.mkdtemp(dir=workdir, prefix=f"{tag}-"), name=tag, python=python, root=root)
    s.settings = []  # the store's defaults, as a user runs it
    return s.start()


def w_batched(client: Client, topic: str, body: bytes) -> float:
    rate, _ = batched_send(client, topic, 3, int(150_000 * SCALE), 500, body, tags=None)
    return 1 / rate  # seconds per message


def w_async_singles(address: str, topic: str) -> float:
    tasks, each = 64, max(10, int(100 * SCALE))

    async def main() -> float:
        async with AsyncClient(address, timeout=30) as c:
            await c.send(topic, KIB)

            async def one() -> None:
                for _ in range(each):
                    assert (await c.send(topic, KIB)).ok

            t = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(tasks)))
            return (time.perf_counter() - t) / (tasks * each)

    return asyncio.run(main())


def w_pull(client: Client, topic: str) -> float:
    total = int(100_000 * SCALE)
    q = client.route(topic, refresh=True).queues[0]
    msgs = [OutMessage(KIB) for _ in range(500)]
    for _ in range(total // 500):
        assert client.send_batch(topic, msgs, queue=q)[-1].ok
    t = time.perf_counter()
    offset, got = 0, 0
    while got < total:
        res = client.pull(topic, q, offset, max_messages=512)
        got += len(res.messages)
        offset = res.next_offset
    return (time.perf_counter() - t) / total


def w_sync_replicated(group: Group, topic: str) -> float:
    client = group.client(timeout=60)
    try:
        client.create_topic(topic, 8)
        return 1 / send_rate(client, topic, int(150_000 * SCALE))
    finally:
        client.close()


ALL_WORKLOADS = ("batched-send", "batched-send-delayed-words", "async-singles", "pull", "sync-replicated")
WORKLOADS = tuple(w for w in ALL_WORKLOADS if w in os.environ.get("BENCH_WORKLOADS", ",".join(ALL_WORKLOADS)).split(","))


def run_on(name: str, which: str, work: str, n: int, python: str | None, tree: str | None) -> float:
    """One round of one workload on a fresh server (or replica group) of ``which``'s checkout;
    its files deleted and written back afterwards."""
    if name == "sync-replicated":
        where = tempfile.mkdtemp(dir=work, prefix=f"{which}-")
        group = _defaults(Group(pathlib.Path(where), 2, SYNC_MASTER, [], python=python, root=tree))
        try:
            return w_sync_replicated(group.start(), f"{name}-{n}")
        finally:
            for m in group.members:
                try:
                    m.kill()
                except Exception as e:  # the other member is still to be killed
                    print(f"  could not kill {m.name}: {e!r}", flush=True)
            shutil.rmtree(where, ignore_errors=True)  # both members' files and logs
            os.sync()
    server = _server(which, work, python, tree)
    try:
        return run_one(name, server, n)
    finally:
        server.kill()
        settle(server)


def run_one(name: str, server: ServerProcess, n: int) -> float:
    client = Client(server.address, timeout=60)
    try:
        topic = f"{name}-{n}"
        client.create_topic(topic, 8)
        if name == "batched-send":
            return w_batched(client, topic, KIB)
        if name == "batched-send-delayed-words":
            return w_batched(client, topic, WORDY)
        if name == "async-singles":
            return w_async_singles(server.address, topic)
        return w_pull(client, topic)
    finally:
        client.close()


def settle(server: ServerProcess) -> None:
    """Its files deleted and the disk written back before the next server starts: measured
    without this, whichever server ran second in a round was 20-25 % slower (the first one's
    page cache and dirty pages were still being written back under it)."""
    shutil.rmtree(server.data_dir, ignore_errors=True)
    os.sync()


def ensure_pyperf() -> None:
    if importlib.util.find_spec("pyperf") is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", PYPERF], check=True)


def main() -> int:
    ensure_pyperf()
    import pyperf

    ref = baseline_ref()
    commit, tree, python = build_baseline(ref)
    head = _git("rev-parse", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    out_dir = os.path.join(RESULTS, "compare")
    os.makedirs(out_dir, exist_ok=True)
    values: dict[str, dict[str, list[float]]] = {"baseline": {}, "current": {}}
    base = os.path.join(RESULTS, "tmp")
    os.makedirs(base, exist_ok=True)
    print(f"baseline {ref} ({commit[:12]}) against this checkout ({head[:12]}{', with changes' if dirty else ''}); {ROUNDS} rounds")
    with tempfile.TemporaryDirectory(dir=base) as work:
        for name in WORKLOADS:
            try:
                for r in range(ROUNDS):
                    order = ("baseline", "current") if r % 2 == 0 else ("current", "baseline")
                    for which in order:
                        theirs = (python, tree) if which == "baseline" else (None, None)  # None: this checkout
                        values[which].setdefault(name, []).append(run_on(name, which, work, r, *theirs))
                    b, c = values["baseline"][name][-1], values["current"][name][-1]
                    print(f"  {name} round {r + 1}: baseline {1 / b:,.0f}/s, current {1 / c:,.0f}/s ({b / c:.2f}x)", flush=True)
            except Exception as e:  # (a baseline older than replication cannot run sync-replicated): the others still count
                print(f"  {name} left out: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
                for per in values.values():
                    per.pop(name, None)
    measured = [name for name in WORKLOADS if name in values["current"]]
    if not measured:
        print("no workload could be measured")
        return 1
    files = {}
    for which, per in values.items():
        suite = pyperf.BenchmarkSuite(
            [
                pyperf.Benchmark(
                    [pyperf.Run([v], metadata={"name": name, "unit": "second", "loops": 1}, collect_metadata=False) for v in vs]
                )
                for name, vs in per.items()
            ]
        )
        files[which] = os.path.join(out_dir, f"{which}.json")
        if os.path.exists(files[which]):
            os.unlink(files[which])
        suite.dump(files[which])
    print(f"\nseconds per message; baseline = {ref} ({commit[:12]}), current = {head[:12]}{' + changes' if dirty else ''}")
    subprocess.run([sys.executable, "-m", "pyperf", "compare_to", files["baseline"], files["current"], "--table"], check=False)
    for name in measured:
        b = sorted(values["baseline"][name])[len(values["baseline"][name]) // 2]
        c = sorted(values["current"][name])[len(values["current"][name]) // 2]
        print(f"{name:<28} median: baseline {1 / b:>10,.0f}/s  current {1 / c:>10,.0f}/s  current/baseline {b / c:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
