"""One member of a replica group: its role (master or follower), its epochs, and the changes of
role a controller (the operator, or ``msgstore admin promote``/``role``) asks for.

A master opens an epoch when it takes office (epoch, its commit-log end), takes writes, streams
its log to followers and, in SYNC mode, acknowledges a put once enough members hold it. A
follower refuses producers, copies its master's log and metadata, and may serve reads
(``slaveReadEnable``). The server's event loop drives all of this.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import grpc

from ..store import MessageStore, PutStatus
from .epochs import EpochFile
from .follower import Follower
from .signal import AppendSignal
from .tracker import ReplicaTracker

log = logging.getLogger(__name__)

MASTER, SLAVE = "MASTER", "SLAVE"
MAX_EPOCH = 2**32 - 1  # epochs travel as uint32
ROLES = {"ASYNC_MASTER": (MASTER, "ASYNC"), "SYNC_MASTER": (MASTER, "SYNC"), "SLAVE": (SLAVE, "ASYNC")}


class RoleError(ValueError):
    pass


class Replica:
    def __init__(
        self,
        store: MessageStore,
        node: str,
        group: str,
        *,
        broker_role: str,
        master_address: str,
        channel: Callable[[str], grpc.aio.Channel],
        call_metadata: Callable[[], tuple],
    ):
        if broker_role not in ROLES:
            raise RoleError(f"brokerRole must be one of {', '.join(ROLES)}, got {broker_role!r}")
        self.store = store
        self.node = node
        self.group = group
        self.role, self.mode = ROLES[broker_role]
        self.master_address = master_address if self.role == SLAVE else ""
        self.channel = channel
        self.call_metadata = call_metadata
        self.epochs = EpochFile(store.root)
        self.tracker = ReplicaTracker()
        self.signal = AppendSignal()
        self.follower: Follower | None = None
        # retention deleted the log below min_offset: terms that ended there go (truncateEpochFilePrefix(minPhyOffset - 1))
        store.cleaner.on_deleted.append(lambda min_offset: self.epochs.truncate_prefix(min_offset - 1))

    @property
    def is_master(self) -> bool:
        return self.role == MASTER

    @property
    def epoch(self) -> int:
        return self.epochs.epoch

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Take the configured role (the store has recovered)."""
        if self.is_master:
            self.store.follower = False
            if self.epochs.last is None:
                self.epochs.append(1, self.store.commitlog.max_offset)
            log.info("%s is the master of %s (%s), epoch %d", self.node, self.group, self.mode, self.epoch)
        elif self.master_address:
            self._follow(self.master_address)
        else:  # the operator names the master once it has an address (the roles file, or SetRole)
            self.store.follower = True
            log.info("%s is a follower in %s, waiting to be told its master's address", self.node, self.group)

    async def stop(self) -> None:
        if self.follower is not None:
            await self.follower.stop()
            self.follower = None

    def _follow(self, address: str) -> None:
        self.store.follower = True
        self.role = SLAVE
        self.master_address = address
        self.follower = Follower(self, address)
        self.follower.start()
        log.info("%s follows %s in %s", self.node, address, self.group)

    # ------------------------------------------------------------------ changes of role

    async def promote(self, epoch: int = 0, mode: str = "") -> None:
        if mode and mode not in ("SYNC", "ASYNC"):
            raise RoleError(f"mode must be SYNC or ASYNC, got {mode!r}")
        new = epoch or self.epoch + 1
        if new > MAX_EPOCH:
            raise RoleError(f"epoch {new} is past the largest epoch ({MAX_EPOCH})")
        if new <= self.epoch:
            if self.is_master and epoch == self.epoch:
                return  # asked again (a controller retrying): already done
            raise RoleError(f"epoch {new} is not newer than this member's epoch {self.epoch}")
        await self.stop()

        def take_office(end: int) -> None:
            # before the store takes its first put: a put must find the master (and its mode) in place
            self.epochs.append(new, end)
            self.role, self.master_address = MASTER, ""
            if mode:
                self.mode = mode

        if self.store.follower:
            await asyncio.get_running_loop().run_in_executor(None, self.store.take_writes, take_office)
        else:  # a master moving to a new term (a controller bumping the epoch)
            take_office(self.store.commitlog.max_offset)
        log.warning("%s promoted: master of %s at epoch %d from offset %d", self.node, self.group, new, self.store.commitlog.max_offset)

    async def follow(self, address: str) -> None:
        if not address:
            raise RoleError("master_address: give the host:port of the master to follow")
        if self.role == SLAVE and self.master_address == address and self.follower is not None:
            return
        await self.stop()
        self._follow(address)

    # ------------------------------------------------------------------ the put path (a master's)

    def needed_followers(self) -> int:
        """Followers a SYNC put waits for: inSyncReplicas minus the master, at least one."""
        return max(1, int(self.store.config.inSyncReplicas) - 1)

    def refuse_put(self) -> PutStatus | None:
        """Before appending: IN_SYNC_REPLICAS_NOT_ENOUGH when followers are connected but too
        few of them are in sync to ever acknowledge (nothing is stored then)."""
        if not (self.is_master and self.mode == "SYNC"):
            return None
        links = self.tracker.links
        if links and len(self.tracker.in_sync(self.store.commitlog.max_offset)) < self.needed_followers():
            return PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
        return None

    @property
    def waits_for_followers(self) -> bool:
        return self.is_master and self.mode == "SYNC"

    async def await_followers(self, end: int) -> PutStatus:
        """A SYNC put's status once stored on the master up to ``end``."""
        if not self.tracker.links:
            return PutStatus.SLAVE_NOT_AVAILABLE
        ok = await self.tracker.wait(end, self.needed_followers(), self.store.config.slaveTimeout / 1000)
        return PutStatus.PUT_OK if ok else PutStatus.FLUSH_SLAVE_TIMEOUT

    # ------------------------------------------------------------------ figures

    def lag(self) -> tuple[int, float]:
        return self.follower.lag() if self.follower is not None else (0, 0.0)
