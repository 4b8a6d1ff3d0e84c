"""A follower's stop waits for its work in worker threads (server/msgstore/ha/follower.py): a
promotion must not find the log cut back, or the metadata rewritten, under it."""

from __future__ import annotations

import asyncio
import threading

from msgstore.ha.follower import Follower


def test_stop_returns_only_once_work_in_a_worker_thread_has_finished():
    """The task awaiting the work (a cut of the log at the handshake, say) is cancelled by
    stop, but the thread goes on: stop waits for it. Before, only appends were waited for."""
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def cut_back() -> str:
        started.set()
        release.wait(30)
        finished.set()
        return "cut"

    async def scenario() -> tuple[bool, bool, bool]:
        follower = Follower(None, "127.0.0.1:1")
        task = asyncio.ensure_future(follower._in_thread(cut_back))
        follower._tasks = [task]
        assert await asyncio.get_running_loop().run_in_executor(None, started.wait, 30)
        stopping = asyncio.ensure_future(follower.stop())
        done, _ = await asyncio.wait([stopping], timeout=0.5)  # it must still be waiting
        returned_early = bool(done)
        release.set()
        await asyncio.wait_for(stopping, 30)
        return returned_early, finished.is_set(), task.cancelled()

    returned_early, finished_when_stopped, cancelled = asyncio.run(scenario())
    assert not returned_early
    assert finished_when_stopped
    assert cancelled


def test_an_error_in_a_worker_thread_reaches_its_caller():
    def fail() -> None:
        raise OSError(28, "No space left on device")

    async def scenario() -> BaseException | None:
        follower = Follower(None, "127.0.0.1:1")
        try:
            await follower._in_thread(fail)
        except OSError as e:
            await follower.stop()
            return e
        return None

    err = asyncio.run(scenario())
    assert isinstance(err, OSError) and err.errno == 28
