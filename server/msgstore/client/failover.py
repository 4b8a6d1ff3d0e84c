"""A manual failover or switchover (``msgstore admin promote``): the member named on the command
line becomes its group's master.

**With an arbiter** (etcd, ``serve --arbiter``) the member elects itself through it
(``Admin.Elect``, msgstore.ha.election): only from the in-sync set the arbiter holds, only once
the old master is fenced or its lease has run out, ranked by (last epoch, end offset), the record
taken by compare-and-swap. What it cannot prove safe it refuses, and ``--unclean`` is the only way
to lose acknowledged messages (it says how much). On Kubernetes the operator elects instead.

**Without one** nothing can prove that a master that does not answer has stopped acknowledging,
nor which members hold what it acknowledged (a follower's own view of the in-sync set may be
stale), so:

1. Ask every member (the candidate knows them) for its role and epochs; the new epoch is one
   past the newest any of them knows (a retried promotion cannot make two masters of one epoch).
2. Fence the old master (``Admin.Fence``): from that moment it acknowledges nothing. Its answer
   says its final end, mode and in-sync set.
3. Elect only from that in-sync set, and wait until the candidate holds everything the fenced
   master has (a switchover loses nothing, in ASYNC mode too).
4. Promote it at the new epoch, in the group's mode, and point every other member at it.

A master that cannot be reached is replaced only with ``--unclean``, which says how much may be
lost: the other members are pointed at the candidate first, and the promotion waits until none
of them has heard from the old master for ``haKeepaliveTimeout`` (in a group of three or more it
has then lost its majority and acknowledges nothing: check-quorum).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..v1 import admin_pb2 as apb
from ..v1 import admin_pb2_grpc
from .admin import AdminClient
from .connection import Security
from .errors import StoreError

PROBE_TIMEOUT_S = 1.0  # a member that does not answer GetRole within this is treated as unreachable


class PromotionRefused(Exception):
    """The promotion would risk acknowledged messages; the message says why and what to do."""


@dataclass
class Promotion:
    candidate: str
    epoch: int = 0
    mode: str = ""
    old_master: str = ""
    fenced: bool = False
    repointed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    status: apb.RoleStatus | None = None


class _Admins:
    """Admin calls with a deadline of their own (an unreachable member must not hold things up)."""

    def __init__(self, client, timeout: float):
        self.client = client
        self.timeout = timeout
        self.security: Security = client.security

    def admin_stub(self, address: str) -> admin_pb2_grpc.AdminStub:
        return self.client.admin_stub(address)  # type: ignore[no-any-return]

    def on(self, address: str) -> AdminClient:
        return AdminClient(self, address)


def _role(admins: _Admins, address: str) -> apb.RoleStatus | None:
    try:
        return admins.on(address).role_pb()
    except StoreError:
        return None


def _newest(r: apb.RoleStatus) -> int:
    return max(r.epoch, r.group_epoch)


def promote(
    client,
    candidate: str,
    *,
    mode: str = "",
    epoch: int = 0,
    unclean: bool = False,
    catch_up_s: float = 10.0,
    say: Callable[[str], None] = lambda _: None,
) -> Promotion:
    """Make the member at ``candidate`` (host:port) its group's master, as the module says."""
    quick = _Admins(client, PROBE_TIMEOUT_S)
    slow = _Admins(client, max(client.timeout, 30.0) + catch_up_s)  # a promotion dispatches what the candidate copied
    cand = quick.on(candidate).role_pb()
    if cand.HasField("arbiter") and cand.arbiter.where:
        return _elect(slow, candidate, cand, mode=mode, epoch=epoch, unclean=unclean, catch_up_s=catch_up_s, say=say)
    out = Promotion(candidate=cand.node or candidate)
    if cand.role == "MASTER" and not cand.fenced and (not epoch or cand.epoch == epoch):
        out.epoch, out.mode, out.status = cand.epoch, cand.mode, cand
        out.notes.append(f"{out.candidate} already is the master of {cand.group} at epoch {cand.epoch}")
        _repoint_strays(quick, cand, candidate, out, unclean)  # a promotion interrupted after its Promote
        return out
    members = {m.name: m.address for m in cand.members if m.name != cand.node}
    if cand.master_address and cand.master_address not in members.values():
        members.setdefault("(its master)", cand.master_address)
    roles = {name: _role(quick, addr) for name, addr in members.items()}
    heard = {n: r for n, r in roles.items() if r is not None}
    newest = max([_newest(cand), *(_newest(r) for r in heard.values())])
    if epoch and epoch <= newest:
        raise PromotionRefused(f"--epoch {epoch} is not newer than epoch {newest}, which {cand.group} already has")
    out.epoch = epoch or newest + 1
    masters = sorted(((n, r) for n, r in heard.items() if r.role == "MASTER"), key=lambda nr: -nr[1].epoch)
    old = masters[0] if masters else None
    reclaim = False
    if cand.role == "MASTER":  # a fenced master taking writes again (a switchover abandoned): a new term of its own
        live = [n for n, r in masters if not r.fenced and r.epoch >= cand.epoch]
        if live:
            raise PromotionRefused(f"{live[0]} is the master of {cand.group} (epoch {heard[live[0]].epoch}): promote a follower of it")
        old = None
        reclaim = True
        mode = mode or cand.mode
    if old is not None:
        out.old_master = old[0]
        old_addr = members[old[0]]
        if not unclean and cand.node not in old[1].sync_state_set:
            raise PromotionRefused(
                f"{out.candidate} is not in the in-sync set of {cand.group} ({', '.join(old[1].sync_state_set)}): it may lack "
                f"acknowledged messages. Promote one of those, or pass --unclean to elect it anyway"
            )
        fenced = quick.on(old_addr).fence(out.epoch, f"msgstore admin promote {out.candidate}")
        out.fenced = True
        say(f"fenced {old[0]} at {old_addr}: it acknowledges nothing from now on (its log ends at {fenced.end_offset})")
        mode = mode or fenced.mode
        if not unclean and cand.node not in fenced.sync_state_set:
            raise PromotionRefused(
                f"{old[0]} is fenced, but {out.candidate} left its in-sync set meanwhile ({', '.join(fenced.sync_state_set)}): "
                f"promote one of those (or {old[0]} itself, to take writes again), or pass --unclean"
            )
        _catch_up(quick, candidate, fenced.end_offset, catch_up_s, unclean, out, say)
    else:
        missing = sorted(n for n, r in roles.items() if r is None)
        at_risk = _at_risk(cand, heard)
        if not reclaim and not unclean:
            raise PromotionRefused(
                f"the master of {cand.group} ({cand.master_address or 'unknown'}) cannot be reached to fence it"
                + (f" (no answer from {', '.join(missing)})" if missing else "")
                + ". Without an arbiter nothing proves that it stopped acknowledging writes, nor which members hold what it "
                "acknowledged (a follower's own view of the in-sync set may be stale). Run the group with --arbiter "
                f"etcd://HOST:2379 (members then fail over by themselves), or pass --unclean to promote {out.candidate} anyway: "
                + (f"up to {at_risk} bytes the others reported holding beyond its end may be lost, and " if at_risk else "")
                + "whatever the old master acknowledges until it learns of the new epoch is cut when it rejoins"
            )
        if cand.role != "MASTER":
            out.notes.append(
                f"unclean: the master of {cand.group} was not reached ({', '.join(missing) or 'nobody answered'})"
                + (f"; up to {at_risk} bytes reported beyond {out.candidate}'s end may be lost" if at_risk else "")
            )
            mode = mode or cand.group_mode
            for name in heard:  # take the old master's majority away before there are two masters
                quick.on(members[name]).set_role(candidate, out.epoch)
                out.repointed.append(name)
            _wait_unheard(quick, candidate, time.monotonic(), say, [cand, *heard.values()])
    out.mode = mode or ""
    out.status = slow.on(candidate).promote(out.epoch, out.mode)
    say(f"promoted {out.candidate} to master of {cand.group} at epoch {out.epoch} ({out.status.mode})")
    for name, addr in members.items():
        if name in out.repointed:
            continue
        try:
            quick.on(addr).set_role(candidate, out.epoch)
            out.repointed.append(name)
        except StoreError as e:
            out.notes.append(f"{name} ({addr}) was not repointed ({e.code.name}): it learns of epoch {out.epoch} when it is back")
    return out


def _repoint_strays(admins: _Admins, cand: apb.RoleStatus, candidate: str, out: Promotion, unclean: bool = False) -> None:
    """Point at the candidate every member that answers and neither follows it nor knows a newer
    epoch: what a promotion stopped between its Promote and its repointing left undone. A live
    master of an older epoch (an old master that never learned it was replaced) is fenced, not
    repointed: what it acknowledged since would be cut, which only ``--unclean`` may do."""
    live: list[str] = []
    for m in cand.members:
        if m.name == cand.node:
            continue
        r = _role(admins, m.address)
        if r is None or r.epoch > cand.epoch or (r.role == "SLAVE" and r.master_address == candidate and r.epoch == cand.epoch):
            continue
        if r.role == "MASTER" and not r.fenced and not unclean:
            try:
                admins.on(m.address).fence(cand.epoch, f"{cand.node} is the master of epoch {cand.epoch}")
            except StoreError as e:
                out.notes.append(f"fencing {m.name} failed ({e.code.name})")
            fork = cand.epochs[-1].start_offset if cand.epochs else 0
            live.append(
                f"{m.name} ({m.address}) was still taking writes as master of epoch {r.epoch}; it holds {max(0, r.end_offset - fork)} "
                f"bytes from offset {fork}, where epoch {cand.epoch} began on {cand.node}"
            )
            continue
        try:
            admins.on(m.address).set_role(candidate, cand.epoch)
            out.repointed.append(m.name)
        except StoreError as e:
            out.notes.append(f"{m.name} ({m.address}) was not repointed ({e.code.name}): it learns of epoch {cand.epoch} when it is back")
    if live:
        raise PromotionRefused(
            "; ".join(live)
            + ". It is fenced now (it acknowledges nothing more). Making it follow would cut what it acknowledged after the fork: "
            "read those messages off it first if they matter, then run this again with --unclean"
        )


def _at_risk(cand: apb.RoleStatus, heard: dict[str, apb.RoleStatus]) -> int:
    """Bytes some member (or the old master, as the candidate last heard of it) reported holding
    beyond the candidate's end: what an unclean promotion may lose, as far as anyone can tell."""
    ends = [cand.master_end, *(r.end_offset for r in heard.values())]
    return max(0, max(ends) - cand.end_offset)


def _elect(
    admins: _Admins,
    candidate: str,
    cand: apb.RoleStatus,
    *,
    mode: str,
    epoch: int,
    unclean: bool,
    catch_up_s: float,
    say: Callable[[str], None],
) -> Promotion:
    """An election through the group's arbiter, run by the candidate itself (``Admin.Elect``)."""
    if not cand.arbiter.elects:
        raise PromotionRefused(
            f"{cand.group}'s master is decided in {cand.arbiter.where}, where the operator elects (it fails over by itself; "
            "annotate the MessageStore to move mastership): not by msgstore admin promote"
        )
    if epoch:
        raise PromotionRefused("--epoch: with an arbiter the election takes the epoch after the newest its record and the members know")
    if mode and cand.group_mode and mode != cand.group_mode:
        raise PromotionRefused(f"--mode: with an arbiter the group keeps its mode ({cand.group_mode}); change brokerRole to change it")
    try:
        resp = admins.on(candidate).elect(unclean=unclean, reason="msgstore admin promote", catch_up_s=catch_up_s)
    except StoreError as e:
        if e.code.name == "FAILED_PRECONDITION":
            raise PromotionRefused(e.details) from None
        raise
    out = Promotion(
        candidate=resp.status.node or cand.node,
        epoch=resp.epoch,
        mode=resp.status.mode,
        old_master=resp.old_master,
        fenced=resp.fenced,
        notes=list(resp.notes),
        status=resp.status,
        repointed=list(resp.repointed),
    )
    for n in out.notes:
        say(n)
    if not resp.already:
        say(f"{out.candidate} was elected master of {cand.group} at epoch {resp.epoch} through {cand.arbiter.where}")
    return out


def _catch_up(
    admins: _Admins, candidate: str, end: int, within_s: float, unclean: bool, out: Promotion, say: Callable[[str], None]
) -> None:
    """Until the candidate holds all the fenced master has (nothing lost, in ASYNC mode too)."""
    deadline = time.monotonic() + within_s
    held = 0
    while time.monotonic() < deadline:
        r = _role(admins, candidate)
        held = r.end_offset if r is not None else held
        if held >= end:
            say(f"{out.candidate} holds everything the fenced master has (to {end})")
            return
        time.sleep(0.05)
    if not unclean:
        raise PromotionRefused(
            f"{out.candidate} holds {end - held} bytes less than the fenced master after {within_s:.0f} s (it ends at {held}, "
            f"the master at {end}): promoting it would lose them. Bring it back in touch with the master and retry, promote "
            "another member, or pass --unclean"
        )
    out.notes.append(f"unclean: {end - held} bytes the fenced master held are not on {out.candidate}")


def _wait_unheard(
    admins: _Admins, candidate: str, repointed_at: float, say: Callable[[str], None], seen: list[apb.RoleStatus] | None = None
) -> None:
    """Until the old master has been without its majority for haKeepaliveTimeout: the members
    repointed at ``repointed_at`` stopped answering it then, and the candidate (still following
    it until promoted) must not have heard from it for that long either.

    No wait when every member (``seen``, their roles read before the repointing) had already
    gone that long without a chunk from it: a report echoes the send time of the last chunk its
    member received, so the old master (check-quorum) counted none of them for that long, and
    repointed they send it nothing more (a master that was paused, or cut off both ways)."""
    try:
        keepalive = int(admins.on(candidate).config().get("haKeepaliveTimeout", "3000")) / 1000
    except (StoreError, ValueError):
        keepalive = 3.0
    if seen and all(r.master_contact_age_s >= keepalive for r in seen):
        r = _role(admins, candidate)
        if r is not None and r.master_contact_age_s >= keepalive:
            say(f"no member has heard from the old master for {keepalive:.1f} s (haKeepaliveTimeout): it has no majority left")
            return
    deadline = repointed_at + keepalive * 3 + 5
    while time.monotonic() < deadline:
        r = _role(admins, candidate)
        age = r.master_contact_age_s if r is not None else -1.0
        if time.monotonic() - repointed_at >= keepalive and (age < 0 or age >= keepalive):
            say(f"no member has heard from the old master for {keepalive:.1f} s (haKeepaliveTimeout): it has no majority left")
            return
        time.sleep(0.1)
    raise PromotionRefused(f"{candidate} still hears from the old master: it is alive; run the promotion again without --unclean")
