"""The broker services of one node, on one thread: delay levels and the timer deliver what is
due while the node is its group's master (a follower's copies of their progress files come
from its master, and are taken up when it is promoted).

The thread sleeps until the next message is due, and wakes when one is stored in a system
topic, when the node's role changes, or at least every ``PERSIST_S`` to save progress.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..record.codec import StoredMessage
from ..record.recall_handle import RecallHandle
from ..store import MessageStore, PutResult
from ..store.layout import BROKER_STATE_END
from .delay_levels import FILE as DELAY_OFFSET_FILE
from .delay_levels import DelayLevelService
from .delivery import ensure_topic
from .pop import FILE as POP_FILE
from .pop import PopService
from .scheduling import Scheduler
from .system_topics import SCHEDULE_TOPIC, TIMER_TOPIC
from .timer import FILE as TIMER_CHECK_FILE
from .timer import TimerService
from .transactions import FILE as TRANSACTION_FILE
from .transactions import HALF_TOPIC, Half, TransactionService

log = logging.getLogger(__name__)

PERSIST_S = 1.0


class BrokerServices:
    def __init__(
        self,
        store: MessageStore,
        is_master: Callable[[], bool] = lambda: True,
        node: Callable[[], str] = lambda: "",
        may_write: Callable[[], bool] = lambda: True,
    ):
        """``is_master``: the state is loaded while true; ``may_write``: due messages are put
        only while true (a master that may not acknowledge client writes puts none either);
        ``node``: the replica group (or lone node) that receipts and recall handles name."""
        self.may_write = may_write
        self.store = store
        self.is_master = is_master
        self.scheduler = Scheduler(lambda: store.config, store.clock.now_ms)
        self.levels = DelayLevelService(store, lambda: store.config)
        self.timer = TimerService(store)
        self.pop = PopService(store, self.scheduler, node, may_write, self.wakeup)
        self.transactions = TransactionService(store, lambda: store.config, may_write)
        self.check_back: Callable[[str, Half, StoredMessage], None] = lambda group, half, message: None
        self._persisted_at = 0.0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._active = False  # delivering (master); loaded from the files when it became so
        self.errors = 0

    # ------------------------------------------------------------------ life cycle

    def start(self) -> BrokerServices:
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
        """The role may have changed, or a delivery's invisibility was cut short."""
        self._wake.set()

    @property
    def active(self) -> bool:
        """Delivering and bringing back messages: the group's master, its state loaded."""
        return self._active

    def ensure_topic_for(self, topic: str) -> None:
        """Before a delayed message is stored in ``topic`` (a system topic made on first use)."""
        if topic == SCHEDULE_TOPIC:
            ensure_topic(self.store, SCHEDULE_TOPIC, len(self.store.config.delay_levels_ms))
        elif topic == TIMER_TOPIC:
            ensure_topic(self.store, TIMER_TOPIC, 1)

    def _arrived(self, topic: str, queue_id: int, _max_offset: int) -> None:
        """Wake the loop when a message may come due before it would wake anyway: a delay
        level's message only when its level had none pending (else one before it is due
        first: 30,000 pending made each timer send 11x slower, issue 33)."""
        if topic == SCHEDULE_TOPIC:
            if not self.levels.waits_on(queue_id + 1):
                self._wake.set()
        elif topic in (TIMER_TOPIC, HALF_TOPIC):  # (the revive log's deadlines are known when written)
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
                        self.pop.load()
                        self.transactions.load()
                        self.transactions.take_new()  # (a commit a crash interrupted is completed here)
                        self.pop.take_new()  # in flight again, positions repaired: before any receive or ack is served
                        self._active = True
                        log.info("delay levels and timer deliver on this node (its group's master)")
                    if self.may_write():
                        now = clock.now_ms()
                        checks, check_wait = self.transactions.due_checks(now)
                        for half, message in checks:
                            self.check_back(half.group, half, message)
                        due = (self.levels.run_due(now), self.timer.run_due(now), self.pop.run_due(now), check_wait)
                        waits = [w for w in due if w is not None]
                        if waits:
                            wait_s = min(wait_s, max(0.0, min(waits) / 1000))
                    else:
                        wait_s = 0.2  # fenced, learning, without quorum or lease: look again soon
                    if time.monotonic() - self._persisted_at >= PERSIST_S:
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
        self._persisted_at = time.monotonic()
        try:
            self.levels.persist()
            self.timer.persist()
            self.transactions.persist()
            # pop's progress as it is now, then the receive positions (every checkpoint it counts
            # done had moved its position before), then the progress: never one past its positions
            pop_state = self.pop.state_if_dirty()
            self.store.offsets.persist_if_dirty()
            if pop_state is not None:
                self.pop.write_state(pop_state)
        except OSError as e:
            log.warning("could not save delay progress: %s", e)

    # ------------------------------------------------------------------ for the API

    def recall(self, handle: RecallHandle) -> PutResult:
        return self.timer.recall(handle, self.store.clock.now_ms)

    def lowest_pending_phy(self) -> int | None:
        """What the cleaner keeps: the oldest delayed (or in-flight) message. A follower, whose
        services are idle, keeps what its copies of the master's progress files say is pending,
        so that a promotion finds every message still due."""
        if not self._active:
            return self._held_by_files()
        held = (
            self.levels.lowest_pending_phy(),
            self.timer.lowest_pending_phy(),
            self.pop.lowest_pending_phy(),
            self.transactions.lowest_pending_phy(),
        )
        lows = [p for p in held if p is not None]
        return min(lows) if lows else None

    def _held_by_files(self) -> int | None:
        levels = DelayLevelService(self.store, lambda: self.store.config)
        timer = TimerService(self.store)
        transactions = TransactionService(self.store, lambda: self.store.config)
        try:
            levels.load()
            timer.load()
            transactions.load()
        except (OSError, ValueError) as e:
            log.warning("cannot read the copied delay progress (%s): nothing held for it", e)
            return None
        held = (levels.lowest_pending_phy(), timer.lowest_pending_phy(), transactions.lowest_pending_phy())
        lows = [p for p in held if p is not None]
        return min(lows) if lows else None

    def followed_state(self) -> dict[str, str]:
        """What a follower copies: the progress files as they are now in memory."""
        if not self._active:
            return {}
        files = {
            DELAY_OFFSET_FILE: self.levels.state_json(),
            TIMER_CHECK_FILE: self.timer.state_json(),
            POP_FILE: self.pop.state_json(),
            TRANSACTION_FILE: self.transactions.state_json(),
        }
        # taken after the files: every message the progress counts as put is below it, and a
        # follower takes the files only once its copy of the log reaches it (else a failover
        # would find progress past messages it never received)
        files[BROKER_STATE_END] = str(self.store.commitlog.max_offset)
        return files

    def stats(self) -> dict[str, int]:
        return {
            "delay_pending": self.levels.pending(),
            "timer_pending": self.timer.pending(),
            "delay_delivered": self.levels.delivered,
            "timer_delivered": self.timer.delivered,
            "pop_inflight": sum(self.pop.inflight_counts().values()),
            "pop_revived": self.pop.revived,
            "pop_dead_lettered": self.pop.dead_lettered,
            "transactions_open": len(self.transactions.open),
            "transactions_committed": self.transactions.committed,
            "transactions_rolled_back": self.transactions.rolled_back,
            "transactions_set_aside": self.transactions.set_aside,
        }
