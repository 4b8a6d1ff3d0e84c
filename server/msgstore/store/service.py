"""A background loop that can be woken early and stopped (the reference's ServiceThread)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class ServiceThread:
    name = "service"

    def __init__(self) -> None:
        self._stopped = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"msgstore-{self.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self.cycle()
            except Exception:  # a bug in one cycle must not kill the service
                log.exception("%s cycle failed", self.name)
                self._stopped.wait(0.1)
        try:
            self.on_stop()
        except Exception:
            log.exception("%s stop failed", self.name)

    def cycle(self) -> None:
        raise NotImplementedError

    def on_stop(self) -> None:
        """Last work after the loop ends (e.g. a final flush)."""

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; returns early on :meth:`wakeup` or :meth:`stop`. Whether
        it was woken (False: the time ran out)."""
        woken = self._wake.wait(seconds)
        if woken:
            self._wake.clear()
        return woken

    def wakeup(self) -> None:
        self._wake.set()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopped.set()
        self._wake.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)
            if t.is_alive():
                log.error("%s did not stop within %.0f s", self.name, timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


class PeriodicService(ServiceThread):
    """Runs ``work`` every ``interval()`` seconds, the first time after ``delay()`` (both read
    on every cycle, so a configuration change applies to the next wait)."""

    def __init__(self, name: str, work: Callable[[], object], interval: Callable[[], float], delay: Callable[[], float] | None = None):
        super().__init__()
        self.name = name
        self.work = work
        self.interval = interval
        self.delay = delay or interval
        self._first = True

    def cycle(self) -> None:
        wait = self.delay() if self._first else self.interval()
        self._first = False
        self._stopped.wait(wait)
        if not self.stopped:
            self.work()


class PacedService(ServiceThread):
    """The loop the commit-log flusher, the write-buffer committer and the consume-queue
    flusher share: every ``interval`` ms, work if at least ``least pages`` are dirty, and on
    everything once ``thorough`` ms have passed since the last full pass; a last full pass at
    stop. ``pacing()`` returns the three settings (re-read each cycle: they are hot)."""

    def __init__(self, name: str, work: Callable[[int], object], pacing: Callable[[], tuple[int, int, int]]):
        super().__init__()
        self.name = name
        self.work = work
        self.pacing = pacing
        self._last_thorough = time.monotonic()
        self._hurried = False

    def hurry(self) -> None:
        """A full pass now, whatever the pacing (set before the wake-up: the pass that follows sees it)."""
        self._hurried = True
        self.wakeup()

    def cycle(self) -> None:
        interval_ms, least_pages, thorough_ms = self.pacing()
        self.wait(interval_ms / 1000)
        now = time.monotonic()
        if self._hurried or now - self._last_thorough >= thorough_ms / 1000:
            self._hurried = False
            self._last_thorough = now
            least_pages = 0
        self.work(least_pages)

    def on_stop(self) -> None:
        self.work(0)
