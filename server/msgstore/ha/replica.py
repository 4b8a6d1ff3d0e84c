"""One member of a replica group: its role (master or follower), its epochs, whether it may
acknowledge writes (``gate.py``), and the changes of role a controller (the operator, or
``msgstore admin promote``/``role``) asks for.

A master opens an epoch when it takes office (epoch, its commit-log end), takes writes, streams
its log to followers and keeps their in-sync set; in SYNC mode it acknowledges a put once every
member of that set holds it. A follower refuses producers, copies its master's log and
metadata, and may serve reads (``slaveReadEnable``). The server's event loop drives all of this.

With an arbiter (``arbiter.py``: the group's Lease on Kubernetes, a key in etcd elsewhere) the
arbiter's record says who is master: a master acknowledges only while it holds the record
fresh, and publishes its in-sync set there; with etcd the members also follow the record (a
member it names takes office, the others follow it) and elect through it (``election.py``).

Without one, a master that knows other members first asks every one of them for the group's
epoch before it acknowledges anything, and keeps asking while it runs; one that learns of a
newer epoch (a Fence, a follower's handshake, a member's answer) stops for good and follows the
newer master when it knows where that is; and in a group of three or more a master that hears
from no majority stops until it does again (check-quorum). Such a group can be switched over
while every member answers; replacing a master that cannot be reached takes ``--unclean``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import grpc

from ..store import MessageStore, PutStatus
from ..v1 import admin_pb2 as apb
from ..v1 import admin_pb2_grpc as apbg
from .arbiter import ArbiterKeeper, Record
from .election import Election, ElectionRefused
from .epochs import EpochFile
from .follower import Follower
from .gate import WriteGate
from .members import GroupMembers
from .signal import AppendSignal
from .tracker import ReplicaTracker

log = logging.getLogger(__name__)

MASTER, SLAVE = "MASTER", "SLAVE"
MAX_EPOCH = 2**32 - 1  # epochs travel as uint32
ROLES = {"ASYNC_MASTER": (MASTER, "ASYNC"), "SYNC_MASTER": (MASTER, "SYNC"), "SLAVE": (SLAVE, "ASYNC")}
HOUSEKEEPING_S = 0.25
PROBE_EVERY_S = 0.5  # a master that may not acknowledge asks its members this often
PROBE_ALWAYS_S = 2.0  # and one that may, this often (a healed old master learns of its successor)
PROBE_TIMEOUT_S = 1.0


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
        address: str = "",
        command_role: bool = False,
    ):
        """``command_role``: the role comes from the command line or config (not the operator's
        roles file); it then applies to this member's first start only (see _resume_role)."""
        if broker_role not in ROLES:
            raise RoleError(f"brokerRole must be one of {', '.join(ROLES)}, got {broker_role!r}")
        self.store = store
        self.node = node
        self.group = group
        self.fatal: Callable[[str], None] | None = None  # the server stops, saying why (a second process with this name)
        self.address = address
        self.role, self.mode = ROLES[broker_role]
        self.master_address = master_address if self.role == SLAVE else ""
        self.channel = channel
        self.call_metadata = call_metadata
        self.epochs = EpochFile(store.root)
        dropped = self.epochs.reconcile(store.commitlog.max_offset)
        if dropped:
            log.warning("the epoch file named terms starting past the log's end (%d): %s; reconciled", store.commitlog.max_offset, dropped)
        self.members = GroupMembers(store.config_dir, group, node, address)
        if command_role:
            self._resume_role()
        self.tracker = ReplicaTracker()
        self.tracker.changed.append(self._state_changed)
        self.tracker.progressed = self._progressed
        self.signal = AppendSignal()
        self._listen()
        self.gate = WriteGate()
        self.follower: Follower | None = None
        self.group_epoch = self.epoch  # the newest epoch of the group this member knows of
        self.group_mode = self.mode if self.role == MASTER else ""  # a follower: its master's, as last heard
        self.state_version = 0  # bumped when what followers are told (mode, in-sync set, members) changes
        self.confirmed = 0  # a SYNC master's confirm offset (what every in-sync member holds)
        self._limit: int | None = None  # the dispatch bound that follows from it (None: none)
        self.keeper: ArbiterKeeper | None = None  # with an arbiter (use_arbiter)
        self.failover_after: float | None = None  # with an arbiter that members elect through: elect after this (None: never)
        self._electing: asyncio.Task | None = None
        self._housekeeping: asyncio.Task | None = None
        self._last_probe = 0.0
        self.apply_settings()
        # retention deleted the log below min_offset: terms that ended there go (truncateEpochFilePrefix(minPhyOffset - 1))
        store.cleaner.on_deleted.append(lambda min_offset: self.epochs.truncate_prefix(min_offset - 1))

    def _resume_role(self) -> None:
        """A member takes up the role it had when it stopped, not the one its command names: after
        a failover a demoted master restarted with ``brokerRole=*_MASTER`` would otherwise claim
        the epoch its successor holds, and a promoted follower restarted with ``--replica-of``
        would leave its group without a master. (``msgstore admin promote`` / ``admin role``
        change a member's role; the epoch check at start still applies.)"""
        last = self.members.last_role
        epoch = int(last.get("epoch") or 0)
        if not last or epoch < self.epoch:
            return
        if self.role == MASTER and last.get("role") == SLAVE and last.get("master"):
            log.warning(
                "%s was following %s (epoch %d) when it stopped: it follows it again, whatever its command's brokerRole says "
                "(msgstore admin promote makes it master)",
                self.node,
                last["master"],
                epoch,
            )
            self.role, self.master_address = SLAVE, str(last["master"])
        elif self.role == SLAVE and last.get("role") == MASTER and self.epoch and self.members.others():
            log.warning(
                "%s was the master of %s (epoch %d) when it stopped: it asks its group whether it still is before taking "
                "writes, whatever its command's --replica-of says",
                self.node,
                self.group,
                epoch,
            )
            # (it knows members to ask; one that knows nobody follows its command)
            self.role, self.master_address, self.mode = MASTER, "", str(last.get("mode") or self.mode or "ASYNC")

    @property
    def is_master(self) -> bool:
        return self.role == MASTER

    @property
    def epoch(self) -> int:
        return self.epochs.epoch

    def use_arbiter(self, keeper: ArbiterKeeper, failover_after: float | None = None) -> None:
        """The arbiter decides who may acknowledge (before :meth:`start`); ``failover_after``:
        with etcd, elect this member once its master has been silent that long and its lease
        has run out (None: only when ``msgstore admin promote`` asks)."""
        self.keeper = keeper
        self.failover_after = failover_after
        keeper.epoch = lambda: self.epoch
        keeper.mode = lambda: self.mode
        keeper.is_master = lambda: self.is_master and not self.gate.deposed  # a fenced master renews nothing
        keeper.on_deposed = self.depose
        keeper.end_offset = lambda: self.store.commitlog.max_offset
        keeper.on_published = self.tracker.published
        keeper.on_record = self._on_record
        self.tracker.publish = keeper.publish

    @property
    def lease(self) -> ArbiterKeeper | None:
        """(the Kubernetes name of the arbiter's keeper)"""
        return self.keeper

    def apply_settings(self) -> None:
        cfg = self.store.config
        self.tracker.max_not_catchup_s = cfg.haMaxTimeSlaveNotCatchup / 1000
        self.tracker.keepalive_s = cfg.haKeepaliveTimeout / 1000

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Take the configured role (the store has recovered)."""
        if _loop_running():  # before the broker services' thread can announce an append
            self.signal.bind(asyncio.get_running_loop())
        self._listen()  # (again, after a stop)
        if self.is_master:
            self.store.follower = False
            if self.epochs.last is None:
                self.epochs.append(1, self.store.commitlog.max_offset)
            self.group_epoch = max(self.group_epoch, self.epoch)
            self._take_office_gates(started=True)
            self.members.note_role(MASTER, self.epoch, mode=self.mode)
            log.info("%s is the master of %s (%s), epoch %d", self.node, self.group, self.mode, self.epoch)
        elif self.master_address:
            self._follow(self.master_address)
        else:  # the operator names the master once it has an address (the roles file, or SetRole)
            self.store.follower = True
            log.info("%s is a follower in %s, waiting to be told its master's address", self.node, self.group)

    async def stop(self) -> None:
        if self.signal.notify in self.store.append_listeners:
            self.store.append_listeners.remove(self.signal.notify)
        if self._housekeeping is not None:
            self._housekeeping.cancel()
            try:
                await self._housekeeping
            except (asyncio.CancelledError, Exception):
                pass
            self._housekeeping = None
        await self._stop_following()

    def _listen(self) -> None:
        """Every append, whoever makes it (a client's put, the broker services' deliveries, pop
        checkpoints, transactions), is announced to the followers' streams where it is stored,
        not by each caller. Once per replica, however often it is started."""
        if self.signal.notify not in self.store.append_listeners:
            self.store.append_listeners.append(self.signal.notify)

    async def _stop_following(self) -> None:
        if self.follower is not None:
            await self.follower.stop()
            self.follower = None

    def _follow(self, address: str) -> None:
        self.store.follower = True
        self.store.dispatcher.limit = None
        self.role = SLAVE
        self.master_address = address
        self.gate.reset()
        self.tracker.fail_waiters()
        self.follower = Follower(self, address)
        self.follower.start()
        self.signal.notify()  # streams this member served as master end now, not at their next wake
        self.members.note_role(SLAVE, max(self.epoch, self.group_epoch), master=address)
        log.info("%s follows %s in %s", self.node, address, self.group)

    def _take_office_gates(self, started: bool) -> None:
        """What this master must hear before it acknowledges (fencing without a Lease)."""
        self.gate.reset()
        self.store.dispatcher.limit = self._dispatch_limit
        if self.keeper is not None:  # its first renewal reads the record: nothing is taken before
            self.gate.lease = self.keeper.refusal
            self.keeper.taken_office(self.tracker.sync_state_set())
        else:
            others = self.members.others()
            if started and others:
                self.gate.learning = (
                    f"{self.node} has just started as master of {self.group} and is asking every member "
                    f"({', '.join(sorted(others))}) whether a newer epoch exists before it takes writes "
                    "(one that is gone for good: msgstore admin role --forget NAME)"
                )
            self.gate.quorum = self._quorum_refusal
        if (self._housekeeping is None or self._housekeeping.done()) and _loop_running():
            self._housekeeping = asyncio.ensure_future(self._keep_house())

    # ------------------------------------------------------------------ fencing

    def depose(self, reason: str, epoch: int) -> None:
        """A newer epoch exists: acknowledge nothing more, whatever is waiting included."""
        self.group_epoch = max(self.group_epoch, epoch)
        if not self.is_master or self.gate.deposed:
            return
        self.gate.deposed = reason
        self.tracker.fail_waiters()
        self._state_changed()  # its followers are told (they count it as its silence)
        log.warning("%s stops acknowledging writes: %s", self.node, reason)

    def fence(self, epoch: int, reason: str = "") -> None:
        if epoch <= self.epoch:
            raise RoleError(f"epoch {epoch} is not newer than {self.node}'s epoch {self.epoch}: a fence must name the epoch being elected")
        if epoch > MAX_EPOCH:
            raise RoleError(f"epoch {epoch} is past the largest epoch ({MAX_EPOCH})")
        self.depose(f"fenced: epoch {epoch} of {self.group} is being elected" + (f" ({reason})" if reason else ""), epoch)

    def ack_refusal(self) -> str:
        """'' while this member may acknowledge a write, else why not."""
        if not self.is_master:
            follows = f" (it follows {self.master_address})" if self.master_address else ""
            return f"{self.node} is no longer the master of {self.group}{follows}"
        return self.gate.refusal()

    def _quorum_refusal(self) -> str:
        n = self.members.size
        if n < 3:
            return ""
        need = n // 2  # followers heard from: with this master, a majority
        heard = self.tracker.heard_from(self.tracker.keepalive_s)
        if heard >= need:
            return ""
        return (
            f"{self.node} has heard from {heard} of the {n - 1} other members of {self.group} within "
            f"{self.tracker.keepalive_s * 1000:.0f} ms, not a majority: it acknowledges nothing until it does (check-quorum)"
        )

    async def _keep_house(self) -> None:
        """A master's loop: the in-sync set ages, and while it may not acknowledge (just started,
        no majority, no follower at all) it asks its members whether a newer epoch exists."""
        while self.is_master:
            self.apply_settings()
            self.tracker.refresh()
            alone = not self.tracker.live() and self.members.others()
            if self.keeper is None and self.members.others():
                every = PROBE_EVERY_S if (self.gate.learning or self.gate.deposed or self.gate.refusal() or alone) else PROBE_ALWAYS_S
                if time.monotonic() - self._last_probe >= every:
                    self._last_probe = time.monotonic()
                    try:
                        await self._probe()
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        log.exception("asking the members of %s for their epochs failed", self.group)
            await asyncio.sleep(HOUSEKEEPING_S)

    async def _ask_roles(self, members: dict[str, str]) -> dict[str, apb.RoleStatus | None]:
        async def ask(address: str) -> apb.RoleStatus | None:
            try:
                stub = apbg.AdminStub(self.channel(address))
                return await stub.GetRole(apb.GetRoleRequest(), timeout=PROBE_TIMEOUT_S, metadata=self.call_metadata() or None)
            except grpc.aio.AioRpcError:
                return None

        return dict(zip(members, await asyncio.gather(*(ask(a) for a in members.values()))))

    async def seek_master(self) -> None:
        """A follower whose master refuses it (no longer a master) or stays out of reach: follow
        the member that answers as its group's master at an epoch no older than any this one
        knows (a follower restarted with its original ``--replica-of`` after a failover)."""
        if self.is_master:
            return
        others = {n: a for n, a in self.members.others().items() if a != self.master_address}
        if not others:
            return
        answers = await self._ask_roles(others)
        known = max(self.epoch, self.group_epoch)
        masters = [
            a
            for a in answers.values()
            if a is not None and a.group == self.group and a.role == MASTER and not a.fenced and a.epoch >= known
        ]
        if not masters or self.is_master:
            return
        best = max(masters, key=lambda a: a.epoch)
        if best.address and best.address != self.master_address:
            log.warning(
                "%s follows %s, its group's master at epoch %d (%s does not lead it)",
                self.node,
                best.address,
                best.epoch,
                self.master_address,
            )
            asyncio.ensure_future(self.follow(best.address, best.epoch))  # not awaited: it stops the follower that called

    # ------------------------------------------------------------------ the arbiter's record (etcd)

    def _on_record(self, record: Record | None) -> None:
        """Every read of the record (about once a second): a member it names takes office at
        its epoch (an election that was interrupted before), the others follow the member it
        names, and a follower whose master went silent and lost its lease stands for election."""
        if record is None or not record.holder or self.keeper is None or not self.keeper.arbiter.can_elect:
            return
        if self._electing is not None and not self._electing.done():
            return
        if record.holder == self.node:
            if record.epoch > self.epoch:
                end = self.store.commitlog.max_offset
                if end < record.end_offset:
                    # a replaced or emptied disk: taking office would serve (and make followers cut
                    # to) less than the group acknowledged; the members of the recorded in-sync set
                    # stand instead once this member's lease has run out
                    why = (
                        f"{self.keeper.where} names {self.node} master at epoch {record.epoch} with its log at "
                        f"{record.end_offset}, but this member's log ends at {end} (a replaced disk?): not taking office"
                    )
                    if self.keeper.last_error != why:
                        log.error("%s", why)
                    self.keeper.last_error = why
                    return
                log.warning("%s names %s master of %s at epoch %d: taking office", self.keeper.where, self.node, self.group, record.epoch)
                self._electing = asyncio.ensure_future(self._quietly(self.promote(record.epoch, record.mode)))
            return
        if record.epoch < self.epoch:
            return  # an older term than ours: never followed
        self.group_epoch = max(self.group_epoch, record.epoch)
        if record.address and (self.is_master or record.address != self.master_address):
            log.warning(
                "%s names %s (%s) master of %s at epoch %d: following it",
                self.keeper.where,
                record.holder,
                record.address,
                self.group,
                record.epoch,
            )
            self._electing = asyncio.ensure_future(self._quietly(self.follow(record.address, record.epoch)))
            return
        silent = self._master_silent_for()
        if self.failover_after is not None and silent is not None and silent >= self.failover_after:
            self._electing = asyncio.ensure_future(self._stand(record))

    def _master_silent_for(self) -> float | None:
        """How long this follower has been without its master (None: it hears from it; a
        master whose lease ran out while the arbiter was away is not replaced by members that
        still hear from it)."""
        f = self.follower
        if f is None:
            return None
        if f.connected:  # a master that says it is fenced is as good as silent
            return time.monotonic() - f.master_fenced_since if f.master_fenced_since else None
        last = f.last_contact or f.started_at
        return time.monotonic() - last

    async def _quietly(self, change) -> None:
        try:
            await change
        except RoleError as e:
            log.warning("%s: %s", self.node, e)
        except Exception:
            log.exception("%s: following the arbiter's record failed", self.node)

    async def _stand(self, record: Record) -> None:
        """An automatic election: only once the master's lease has run out (a master that
        still holds it is never replaced on a follower's say-so)."""
        assert self.keeper is not None
        try:
            if await self.keeper.arbiter.holder_alive(record):
                return
            result = await Election(self, self.keeper.arbiter, reason=f"{record.holder} silent and its lease ran out").run(auto=True)
            for note in result.notes:
                log.info("election: %s", note)
        except ElectionRefused as e:
            log.info("%s does not stand for election: %s", self.node, e)
        except Exception as e:
            log.warning("%s: an election failed: %s: %s", self.node, type(e).__name__, e)

    async def elect(self, *, unclean: bool = False, reason: str = "", catch_up_s: float = 10.0):
        """``msgstore admin promote`` with an arbiter members elect through (etcd)."""
        if self.keeper is None or not self.keeper.arbiter.can_elect:
            raise RoleError(f"{self.node} has no arbiter it may elect through (on Kubernetes the operator elects)")
        if self._electing is not None and not self._electing.done():
            await asyncio.wait([self._electing])
        self._electing = asyncio.ensure_future(
            Election(self, self.keeper.arbiter, unclean=unclean, reason=reason, catch_up_s=catch_up_s).run()
        )
        return await self._electing

    async def _probe(self) -> None:
        others = self.members.others()
        if not others:
            return

        answers = await self._ask_roles(others)
        if not self.is_master:
            return
        heard = {n: a for n, a in answers.items() if a is not None and a.group == self.group}
        newest = max([0, *(max(a.epoch, a.group_epoch) for a in heard.values())])
        if newest > self.epoch:
            who = max(heard, key=lambda n: max(heard[n].epoch, heard[n].group_epoch))
            self.depose(f"{who} knows epoch {newest} of {self.group}, newer than this member's {self.epoch}", newest)
            master = next(
                (a.address or others[n] for n, a in heard.items() if a.role == MASTER and a.epoch == newest and not a.fenced), None
            )
            if master:
                log.warning("%s follows %s, the master of epoch %d", self.node, master, newest)
                await self.follow(master, newest)
            return
        if self.gate.learning:
            missing = sorted(set(others) - set(heard))
            if not missing:
                log.info("%s heard from %s: no newer epoch than %d; taking writes", self.node, ", ".join(sorted(heard)), self.epoch)
                self.gate.learning = ""

    # ------------------------------------------------------------------ changes of role

    async def promote(self, epoch: int = 0, mode: str = "") -> None:
        if mode and mode not in ("SYNC", "ASYNC"):
            raise RoleError(f"mode must be SYNC or ASYNC, got {mode!r}")
        if self.is_master and epoch and epoch == self.epoch and not self.gate.deposed:
            return  # asked again (a controller retrying a Promote that timed out): already done
        new = epoch or max(self.epoch, self.group_epoch) + 1
        if new > MAX_EPOCH:
            raise RoleError(f"epoch {new} is past the largest epoch ({MAX_EPOCH})")
        if new <= self.epoch:
            raise RoleError(f"epoch {new} is not newer than this member's epoch {self.epoch}")
        if new < self.group_epoch:
            raise RoleError(f"epoch {new} is older than epoch {self.group_epoch}, which {self.group} already has")
        await self._stop_following()
        mode = mode or self.group_mode or self.mode  # a promoted follower keeps its group's mode

        def take_office(end: int) -> None:
            # before the store takes its first put: a put must find the master (and its mode) in place
            self.epochs.append(new, end)
            self.role, self.master_address, self.mode, self.group_mode = MASTER, "", mode, mode
            self.group_epoch = max(self.group_epoch, new)

        if self.store.follower:
            await asyncio.get_running_loop().run_in_executor(None, self.store.take_writes, take_office)
        else:  # a master moving to a new term (a controller bumping the epoch)
            take_office(self.store.commitlog.max_offset)
        self._take_office_gates(started=False)
        self.members.note_role(MASTER, new, mode=mode)
        self._progressed()
        self._state_changed()
        end = self.store.commitlog.max_offset
        log.warning("%s promoted: master of %s (%s) at epoch %d from offset %d", self.node, self.group, mode, new, end)

    async def follow(self, address: str, epoch: int = 0) -> None:
        if not address:
            raise RoleError("master_address: give the host:port of the master to follow")
        if epoch and epoch < self.epoch:
            raise RoleError(f"{address} is named master of epoch {epoch}, older than this member's epoch {self.epoch}")
        self.group_epoch = max(self.group_epoch, epoch)
        if self.role == SLAVE and self.master_address == address and self.follower is not None:
            return
        if self._housekeeping is not None and self._housekeeping is not asyncio.current_task():
            self._housekeeping.cancel()  # (when it is the caller, it ends by itself: no longer master)
        self._housekeeping = None
        await self._stop_following()
        self._follow(address)
        self._progressed()

    # ------------------------------------------------------------------ the put path (a master's)

    def needed_followers(self) -> int:
        """Followers a SYNC put waits for at least: inSyncReplicas minus the master, at least one."""
        return max(1, int(self.store.config.inSyncReplicas) - 1)

    def refuse_put(self) -> tuple[PutStatus, str] | None:
        """Before appending (nothing is stored when refused): a master that may not acknowledge;
        IN_SYNC_REPLICAS_NOT_ENOUGH when followers are connected but too few are in sync."""
        if not self.is_master:
            return None  # the store itself refuses (a follower)
        why = self.gate.refusal()
        if why:
            return PutStatus.SERVICE_NOT_AVAILABLE, why
        if self.mode == "SYNC" and self.tracker.links and len(self.tracker.waited_for()) < self.needed_followers():
            return (
                PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH,
                f"{len(self.tracker.in_sync) + 1} members of {self.group} are in sync, "
                f"fewer than inSyncReplicas={self.store.config.inSyncReplicas}",
            )
        return None

    @property
    def waits_for_followers(self) -> bool:
        return self.is_master and self.mode == "SYNC"

    async def await_followers(self, end: int) -> PutStatus:
        """A SYNC put's status once stored on the master up to ``end``."""
        if not self.tracker.links:
            return PutStatus.SLAVE_NOT_AVAILABLE
        self.store.commit_soon(end)  # (in a write buffer, followers see it once committed)
        ok = await self.tracker.wait(end, self.needed_followers(), self.store.config.slaveTimeout / 1000)
        return PutStatus.PUT_OK if ok else PutStatus.FLUSH_SLAVE_TIMEOUT

    @property
    def bounds_dispatch(self) -> bool:
        """Whether this master's dispatch waits for its followers' reports (each that moves
        the bound wakes the dispatcher)."""
        return self._limit is not None

    def _dispatch_limit(self) -> int | None:
        """A SYNC master's consumers see only what every in-sync member holds (RocketMQ 5's
        reput bound, Kafka's high watermark): nothing a failover could take back. Read by the
        dispatcher's thread: a value computed on the loop, never the sets themselves."""
        return self._limit

    def _progressed(self) -> None:
        self.confirmed = self.tracker.confirm_offset(self.store.commitlog.max_offset)
        bounded = self.is_master and self.mode == "SYNC" and bool(self.tracker.waited_for())
        limit = self.confirmed if bounded else None
        if limit != self._limit:
            moved = self._limit is not None and (limit is None or limit > self._limit)  # (lifted, or further)
            self._limit = limit
            self.signal.notify()  # followers' streams pass the new confirm offset on
            if moved:  # consumers see what the followers now hold without waiting for the dispatcher's poll
                self.store.dispatcher.wakeup()

    def confirm_offset(self) -> int:
        """What followers may dispatch up to (0: no bound)."""
        return self._limit if self._limit is not None else 0

    def _state_changed(self) -> None:
        self.state_version += 1
        self.signal.notify()

    def forget_member(self, name: str) -> None:
        try:
            forgotten = self.members.forget(name)
        except ValueError as e:
            raise RoleError(str(e)) from None
        if not forgotten:
            raise RoleError(f"{name} is not a known member of {self.group} (members: {', '.join(sorted(self.members.snapshot()))})")
        log.warning("%s forgot %s: no longer a member of %s", self.node, name, self.group)
        self._state_changed()

    def note_member(self, name: str, address: str) -> None:
        if self.members.add(name, address):
            log.info("%s knows %s at %s as a member of %s", self.node, name, address, self.group)
            self._state_changed()

    # ------------------------------------------------------------------ figures

    def lag(self) -> tuple[int, float]:
        return self.follower.lag() if self.follower is not None else (0, 0.0)


def _loop_running() -> bool:
    """On the server's loop (a store driven directly, as tools and tests do, has none)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
