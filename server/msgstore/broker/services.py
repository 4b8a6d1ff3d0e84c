"""The broker services of one node, on one thread: delay levels and the timer deliver what is
due while the node is its group's master (a follower's copies of their progress files come
from its master, and are taken up when it is promoted).

The thread sleeps until the next message is due, and wakes when one is stored in a system
topic, when the node's role changes, or at least every ``PERSIST_S`` to save progress.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..record.recall_handle import RecallHandle
from ..store import MessageStore
from .delay_levels import FILE as DELAY_OFFSET_FILE
from .delay_levels import DelayLevelService
from .scheduling import Scheduler
from .system_topics import SCHEDULE_TOPIC, SYSTEM_TOPICS, TIMER_TOPIC
from .timer import FILE as TIMER_CHECK_FILE
from .timer import TimerService

log = logging.getLogger(__name__)

PERSIST_S = 1.0


class BrokerServices:
    def __init__(self, store: MessageStore, is_master: Callable[[], bool] = lambda: True):
        self.store = store
        self.is_master = is_master
        self.scheduler = Scheduler(lambda: store.config, store.clock.now_ms)
        self.levels = DelayLevelService(store, lambda: store.config)
        self.timer = TimerService(store)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._active = False  # delivering (master); loaded from the files when it became so
        self.errors = 0

    # ------------------------------------------------------------------ life cycle

    def start(self) -> BrokerServices:
        self._ensure_topics()
        self.store.add_arrival_listener(self._arrived)
        self.store.add_retention_holder(self.lowest_pending_phy)
        self._thread = threading.Thread(target=self._run, name="broker-services", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(30)
        if self._active:
            self._persist()

    def wakeup(self) -> None:
        """The role may have changed."""
        self._wake.set()

    def _ensure_topics(self) -> None:
        levels = len(self.store.config.delay_levels_ms)
        for topic, queues in ((SCHEDULE_TOPIC, levels), (TIMER_TOPIC, 1)):
            tc = self.store.topics.get(topic)
            if tc is None or tc.write_queue_nums < queues:
                self.store.create_topic(topic, queues)

    def _arrived(self, topic: str, _queue_id: int, _max_offset: int) -> None:
        if topic in SYSTEM_TOPICS:
            self._wake.set()

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        clock = self.store.clock
        while not self._stop.is_set():
            wait_s = PERSIST_S
            try:
                if self.is_master():
                    if not self._active:
                        self.levels.load()
                        self.timer.load()
                        self._active = True
                        log.info("delay levels and timer deliver on this node (its group's master)")
                    now = clock.now_ms()
                    waits = [w for w in (self.levels.run_due(now), self.timer.run_due(now)) if w is not None]
                    if waits:
                        wait_s = min(wait_s, max(0.0, min(waits) / 1000))
                    self._persist()
                elif self._active:
                    self._persist()
                    self._active = False
                    log.info("delay levels and timer stop delivering here (no longer the master)")
            except Exception:
                self.errors += 1
                log.exception("broker services failed a round; trying again")
                wait_s = PERSIST_S
            self._wake.wait(wait_s)
            self._wake.clear()

    def _persist(self) -> None:
        try:
            self.levels.persist()
            self.timer.persist()
        except OSError as e:
            log.warning("could not save delay progress: %s", e)

    # ------------------------------------------------------------------ for the API

    def recall(self, handle: RecallHandle) -> None:
        self.timer.recall(handle, self.store.clock.now_ms())

    def lowest_pending_phy(self) -> int | None:
        if not self._active:
            return None
        lows = [p for p in (self.levels.lowest_pending_phy(), self.timer.lowest_pending_phy()) if p is not None]
        return min(lows) if lows else None

    def followed_state(self) -> dict[str, str]:
        """What a follower copies: the progress files as they are now in memory."""
        if not self._active:
            return {}
        return {DELAY_OFFSET_FILE: self.levels.state_json(), TIMER_CHECK_FILE: self.timer.state_json()}

    def stats(self) -> dict[str, int]:
        return {
            "delay_pending": self.levels.pending(),
            "timer_pending": self.timer.pending(),
            "delay_delivered": self.levels.delivered,
            "timer_delivered": self.timer.delivered,
        }
