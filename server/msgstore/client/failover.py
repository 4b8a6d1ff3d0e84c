"""A manual failover or switchover without Kubernetes (``msgstore admin promote``): the same
steps the operator takes, with the member named on the command line as the candidate.

1. Ask every member of the group (the candidate knows them) for its role and epochs; the new
   epoch is one past the newest any of them knows (so a retried promotion cannot make two
   masters with one epoch).
2. Fence the old master (``Admin.Fence``): from that moment it acknowledges nothing, in either
   mode. Its answer says its final end, mode and in-sync set.
3. Elect only from the in-sync set (RocketMQ's SyncStateSet): a member outside it may lack
   acknowledged messages (``--unclean`` overrides, Kafka's unclean election). Wait until the
   candidate holds everything the fenced master has (a switchover then loses nothing, in ASYNC
   mode too).
4. Promote it at the new epoch, in the group's mode, and point every other member at it.

When the old master cannot be reached, nothing can stop it from acknowledging but its own
rules, so the promotion is refused unless ``--force``. Forced, the other members are pointed at
the candidate first and the promotion waits until none of them has heard from the old master
for ``haKeepaliveTimeout``: in a group of three or more the old master has then lost its
majority and acknowledges nothing (check-quorum). In a group of two nothing guarantees that
until the old master learns of the new epoch: writes it acknowledges meanwhile (ASYNC) are cut
when it rejoins.
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
    force: bool = False,
    unclean: bool = False,
    catch_up_s: float = 10.0,
    say: Callable[[str], None] = lambda _: None,
) -> Promotion:
    """Make the member at ``candidate`` (host:port) its group's master, as the module says."""
    quick = _Admins(client, PROBE_TIMEOUT_S)
    slow = _Admins(client, max(client.timeout, 30.0))  # a promotion dispatches what the candidate copied
    cand = quick.on(candidate).role_pb()
    out = Promotion(candidate=cand.node or candidate)
    if cand.role == "MASTER" and not cand.fenced and (not epoch or cand.epoch == epoch):
        out.epoch, out.mode, out.status = cand.epoch, cand.mode, cand
        out.notes.append(f"{out.candidate} already is the master of {cand.group} at epoch {cand.epoch}")
        _repoint_strays(quick, cand, candidate, out)  # a promotion interrupted after its Promote
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
    if cand.role == "MASTER":  # a fenced master taking writes again (a switchover abandoned): a new term of its own
        live = [n for n, r in masters if not r.fenced and r.epoch >= cand.epoch]
        if live:
            raise PromotionRefused(f"{live[0]} is the master of {cand.group} (epoch {heard[live[0]].epoch}): promote a follower of it")
        old = None
        force = True
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
        if not force:
            raise PromotionRefused(
                f"the master of {cand.group} ({cand.master_address or 'unknown'}) cannot be reached to fence it"
                + (f" (no answer from {', '.join(missing)})" if missing else "")
                + ". --force promotes anyway: the old master may go on acknowledging writes until it learns of epoch "
                f"{out.epoch} (at once when it reaches a member that knows it; in a group of three or more once it no longer "
                "hears from a majority), and in ASYNC mode what it acknowledges meanwhile is cut when it rejoins"
            )
        if cand.role != "MASTER":
            out.notes.append(f"forced: the master of {cand.group} was not reached ({', '.join(missing) or 'nobody answered'})")
            mode = mode or cand.group_mode
            _check_forced_candidate(cand, heard, unclean, out)
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


def _repoint_strays(admins: _Admins, cand: apb.RoleStatus, candidate: str, out: Promotion) -> None:
    """Point at the candidate every member that answers and neither follows it nor knows a newer
    epoch: what a promotion stopped between its Promote and its repointing left undone."""
    for m in cand.members:
        if m.name == cand.node:
            continue
        r = _role(admins, m.address)
        if r is None or r.epoch > cand.epoch or (r.role == "SLAVE" and r.master_address == candidate and r.epoch == cand.epoch):
            continue
        try:
            admins.on(m.address).set_role(candidate, cand.epoch)
            out.repointed.append(m.name)
        except StoreError as e:
            out.notes.append(f"{m.name} ({m.address}) was not repointed ({e.code.name}): it learns of epoch {cand.epoch} when it is back")


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


def _check_forced_candidate(cand: apb.RoleStatus, heard: dict[str, apb.RoleStatus], unclean: bool, out: Promotion) -> None:
    """Without the old master's word: the candidate must have been in its in-sync set when last
    told, and (ASYNC: acknowledgements waited for nobody) no reachable member may hold more of
    the newest history. In SYNC mode every member of the set holds every acknowledged put."""
    if unclean:
        return
    if cand.node not in cand.sync_state_set:
        raise PromotionRefused(
            f"{out.candidate} was not in the in-sync set when it last heard from its master "
            f"({', '.join(cand.sync_state_set) or 'never told'}): it may lack acknowledged messages. Promote a member that was, "
            "or pass --unclean"
        )

    def rank(r: apb.RoleStatus) -> tuple[int, int]:
        return (r.epochs[-1].epoch if r.epochs else 0, r.end_offset)

    better = [(n, r) for n, r in heard.items() if r.role == "SLAVE" and rank(r) > rank(cand)]
    if better and cand.group_mode != "SYNC":
        n, r = max(better, key=lambda nr: rank(nr[1]))
        raise PromotionRefused(
            f"{n} holds more of {cand.group}'s history than {out.candidate} (epoch {rank(r)[0]} to {r.end_offset} against "
            f"epoch {rank(cand)[0]} to {cand.end_offset}): promote {n}, or pass --unclean"
        )


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
    raise PromotionRefused(f"{candidate} still hears from the old master: it is alive; run the promotion again without --force")
