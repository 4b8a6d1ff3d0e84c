"""One reconciliation pass: level-based and idempotent, safe to run on every event and timer.

In order: validate the spec; apply the rendered objects (patching only what differs); push hot
settings to every pod's admin API; run a requested manual delete; take one step of a rolling
restart; and compute the status (conditions, per-pod figures) and the Events worth posting.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from msgstore.client import StoreError
from msgstore.ha.lease import ADDRESS, END_OFFSET, EPOCH, IN_SYNC, micro_time
from msgstore.store.config import HOT_KEYS, StoreConfig
from msgstore.wire import config_text

from . import decide, render, replication
from .groups import Groups
from .kube import ApiError, Kube
from .lease_clock import CLOCK
from .pods import PodView, ReferenceMissing, admin_client, admin_of, admin_token, ask_again, list_pods, observe
from .spec import FORCE_SCALE_DOWN, MANUAL_DELETE, PAUSE, RESTART, Spec, SpecError, parse, quantity
from .tls import PLAIN, Certificates, Reaches
from .topics import Topics
from .users import Users

log = logging.getLogger(__name__)

# What Kopf kept under msgstore.io/ before its bookkeeping moved to kopf.msgstore.io/ (see
# handlers): left behind, the marker would keep hiding our own annotations from Kopf.
LEGACY_ANNOTATIONS = ("msgstore.io/kopf-managed", "msgstore.io/last-handled", "msgstore.io/reconcile", "msgstore.io/observe")
LEGACY_FINALIZERS = ("kopf.zalando.org/KopfFinalizerMarker", "msgstore.io/finalizer")

# where a live object's fields may be changed (the rest is immutable or owned by the cluster)
MUTABLE = {
    "StatefulSet": ("spec.replicas", "spec.template", "spec.updateStrategy", "spec.persistentVolumeClaimRetentionPolicy"),
    "Service": ("spec.type", "spec.ports", "spec.selector", "spec.publishNotReadyAddresses", "metadata.annotations"),
    "ConfigMap": ("data",),
    "PodDisruptionBudget": ("spec.maxUnavailable", "spec.selector"),
    "ServiceAccount": (),
    "Role": ("rules",),
    "RoleBinding": ("subjects",),
}
FENCE_CATCH_UP_S = 5.0  # a switchover waits this long for the candidate to hold all the fenced master has


@dataclass
class Outcome:
    status: dict[str, Any]
    annotations: dict[str, str | None] = field(default_factory=dict)  # to set (None = remove)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    waiting: str | None = None  # a reason to come back soon (a roll or scale step in progress)
    patched: list[str] = field(default_factory=list)  # objects created or changed (idempotency checks)
    finalizers: list[str] | None = None  # the object's finalizers to set (None = leave them)
    lease_checks: list[tuple[str, str, float]] = field(default_factory=list)  # (namespace, Lease, when it lapses unless renewed)


def contains(actual: Any, desired: Any) -> bool:
    """Whether ``actual`` already holds ``desired`` (extra defaults the cluster added are fine)."""
    if isinstance(desired, dict):
        return isinstance(actual, dict) and all(k in actual and contains(actual[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(actual, list) and len(actual) == len(desired) and all(contains(a, d) for a, d in zip(actual, desired))
    return actual == desired or (isinstance(desired, (int, float)) and str(actual) == str(desired))


def _at(obj: dict, path: str) -> Any:
    for part in path.split("."):
        obj = obj.get(part, {}) if isinstance(obj, dict) else {}
    return obj


def _nest(path: str, value: Any) -> dict:
    out: dict = {}
    cur = out
    parts = path.split(".")
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value
    return out


def _merge(a: dict, b: dict) -> dict:
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict):
            _merge(a[k], v)
        else:
            a[k] = v
    return a


class Reconciler:
    def __init__(self, kube: Kube):
        self.kube = kube
        self._pending_claims: list[str] = []  # claims that keep pods from starting, with Kubernetes' reason
        self._token: str | None = None  # the admin token of this pass
        self._reach = PLAIN  # how this pass's client reaches the pods (spec.tls)

    # ------------------------------------------------------------------ objects

    def apply(self, obj: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
        """Create the object, or patch the mutable fields that differ; nothing when in sync."""
        kind, meta = obj["kind"], obj["metadata"]
        live = self.kube.get_or_none(kind, meta["namespace"], meta["name"])
        if live is None:
            outcome.patched.append(f"create {kind}/{meta['name']}")
            return self.kube.create(obj)
        if kind == "StatefulSet" and _claim_size(obj) > _claim_size(live):
            # volumeClaimTemplates are immutable: replace the StatefulSet, leaving its pods in
            # place (they are adopted by the new one), so pods created later get the new size
            if not live["metadata"].get("deletionTimestamp"):
                self.kube.delete(kind, meta["namespace"], meta["name"], orphan=True)
                outcome.patched.append(f"recreate {kind}/{meta['name']}")
            outcome.waiting = outcome.waiting or f"recreating StatefulSet {meta['name']} for the new volume size"
            return live
        patch: dict = {}
        if not contains(live.get("metadata", {}).get("labels", {}), meta.get("labels", {})):
            patch["metadata"] = {"labels": meta["labels"]}
        for path in MUTABLE[kind]:
            want = _at(obj, path)
            if want != {} and not contains(_at(live, path), want):
                _merge(patch, _nest(path, want))
        if kind == "Service":  # annotations the spec no longer names (render.SERVICE_ANNOTATIONS)
            had = (live.get("metadata", {}).get("annotations") or {}).get(render.SERVICE_ANNOTATIONS, "")
            wanted = meta.get("annotations") or {}
            gone = {k: None for k in had.split(",") if k and k not in wanted and k in (live["metadata"].get("annotations") or {})}
            if gone:
                _merge(patch, {"metadata": {"annotations": {**wanted, **gone}}})
        if patch:
            outcome.patched.append(f"patch {kind}/{meta['name']}")
            return self.kube.patch(kind, meta["namespace"], meta["name"], patch)
        return live

    # ------------------------------------------------------------------ the pass

    def reconcile(self, body: dict[str, Any]) -> Outcome:
        meta = body.get("metadata", {})
        annotations = meta.get("annotations") or {}
        status = dict(body.get("status") or {})
        conditions = [dict(c) for c in status.get("conditions", [])]
        status["conditions"] = conditions
        out = Outcome(status)
        self._forget_legacy(meta, out)
        if str(annotations.get(PAUSE, "")).lower() == "true":
            if decide.set_condition(conditions, "ReconciliationPaused", True, "Annotated", f"{PAUSE}=true"):
                out.events.append(("Normal", "ReconciliationPaused", "reconciliation paused by annotation"))
            return out
        decide.set_condition(conditions, "ReconciliationPaused", False, "NotPaused")
        try:
            spec = parse(body)
        except SpecError as e:
            was = decide.condition(conditions, "ConfigInvalid")
            if decide.set_condition(conditions, "ConfigInvalid", True, "InvalidSpec", str(e)) or (was and was["message"] != str(e)):
                out.events.append(("Warning", "ConfigInvalid", str(e)))
            decide.set_condition(conditions, "Ready", False, "ConfigInvalid", str(e))
            return out
        decide.set_condition(conditions, "ConfigInvalid", False, "Valid")

        missing = None
        listed = list_pods(self.kube, spec)
        certs = Certificates(self.kube, render.owner(spec))
        try:
            token = admin_token(self.kube, spec)
            self._reach = certs.prepare(spec, [ip for p in listed if (ip := (p.get("status") or {}).get("podIP"))], annotations, status)
        except ReferenceMissing as e:
            token, missing = None, e
        out.events += certs.events
        if certs.status is not None:
            status["tls"] = certs.status
        elif spec.tls is None:
            status.pop("tls", None)
        self._report(conditions, out, "ReferenceMissing", missing.reason if missing else "", str(missing or ""), ok_reason="AllFound")
        pods = observe(self.kube, spec, token, reachable=missing is None, reach=Reaches(self.kube, spec, self._reach).of, pods=listed)
        self._token = token
        nonce = self._restart_nonce(annotations, status, out)
        replicas = self._replicas(spec, pods, annotations, conditions, out)
        roles = self._replication(spec, pods, token, replicas, conditions, status, out) if spec.replication.enabled else None
        for obj in render.all_objects(spec, replicas, nonce, roles):
            self.apply(obj, out)
        self._volumes(spec, replicas, conditions, out)
        desired_hash = render.restart_hash(spec, nonce)

        self._push_hot_config(spec, pods, token, out)
        self._manual_delete(spec, pods, token, annotations, status, out)
        self._roll(spec, pods, desired_hash, replicas, status, out)
        self._status(spec, pods, desired_hash, replicas, meta, conditions, status, out)
        if missing is None:
            declared = [
                Users(self.kube, spec, token, self._reach.client_options(), certs.ca_cert),
                Topics(self.kube, spec, token, self._reach.client_options()),
                Groups(self.kube, spec, token, self._reach.client_options()),
            ]
            for kind in declared:
                kind.reconcile(pods, status)
                out.events += kind.events
        if missing is not None:
            decide.set_condition(conditions, "Ready", False, missing.reason, str(missing))
        return out

    def _forget_legacy(self, meta: dict, out: Outcome) -> None:
        """Drop what an earlier operator version kept on the object (Kopf's bookkeeping under
        msgstore.io/, and the finalizer its timer needed), so nothing blocks a deletion later."""
        for key in LEGACY_ANNOTATIONS:
            if key in (meta.get("annotations") or {}):
                out.annotations[key] = None
        finalizers = list(meta.get("finalizers") or [])
        kept = [f for f in finalizers if f not in LEGACY_FINALIZERS]
        if kept != finalizers:
            out.finalizers = kept

    def _report(self, conditions: list, out: Outcome, ctype: str, reason: str, message: str, ok_reason: str) -> None:
        """A problem condition (status True while ``message`` says what is wrong), with a
        Warning Event when it starts or its message changes."""
        was = decide.condition(conditions, ctype) or {}
        changed = decide.set_condition(conditions, ctype, bool(message), reason if message else ok_reason, message)
        if message and (changed or was.get("message") != message):
            out.events.append(("Warning", reason, message))

    def _restart_nonce(self, annotations: dict, status: dict, out: Outcome) -> str:
        """A restart request is taken into the status (which the restart hash uses) and the
        annotation cleared, so the request is neither lost nor repeated."""
        requested = annotations.get(RESTART)
        if requested:
            if requested != status.get("restartNonce"):
                status["restartNonce"] = requested
                out.events.append(("Normal", "RestartRequested", f"rolling restart requested ({RESTART}={requested})"))
            out.annotations[RESTART] = None
        return status.get("restartNonce", "")

    def _replicas(self, spec: Spec, pods: list[PodView], annotations: dict, conditions: list, out: Outcome) -> int:
        """The StatefulSet's pod count: ``spec.pods`` (nodes × members per group), or the current
        count while a scale-down is blocked."""
        live = self.kube.get_or_none("StatefulSet", spec.namespace, spec.name)
        current = int(live["spec"]["replicas"]) if live else spec.pods
        if spec.pods >= current:
            decide.set_condition(conditions, "ScaleDownBlocked", False, "NotScalingDown")
            return spec.pods
        removed = [p for p in pods if p.ordinal >= spec.pods]
        blocker = decide.scale_down_blocker(removed)
        if blocker and str(annotations.get(FORCE_SCALE_DOWN, "")).lower() != "true":
            if decide.set_condition(conditions, "ScaleDownBlocked", True, "UnconsumedMessages", blocker):
                out.events.append(("Warning", "ScaleDownBlocked", blocker))
            out.waiting = out.waiting or f"scale-down blocked: {blocker}"  # consumption shows in no Kubernetes event
            return current
        decide.set_condition(conditions, "ScaleDownBlocked", False, "Allowed" if not blocker else "Forced", blocker or "")
        if FORCE_SCALE_DOWN in annotations:  # spent, as manual-delete is: left on, it would wave every later scale-down through
            out.annotations[FORCE_SCALE_DOWN] = None
        out.events.append(
            ("Normal", "ScaledDown", f"scaling from {current} to {spec.pods} pods" + (f" (forced: {blocker})" if blocker else ""))
        )
        return spec.pods

    # ------------------------------------------------------------------ replication

    def _replication(
        self, spec: Spec, pods: list[PodView], token: str | None, replicas: int, conditions: list, status: dict, out: Outcome
    ) -> dict[str, Any]:
        """Each group's master: confirmed, or (unhealthy for failoverAfterSeconds and unable to
        acknowledge) replaced by a member of its in-sync set; its followers pointed at it; the
        figures in ``status.replication``. Returns the roles document (the roles ConfigMap
        every pod reads)."""
        repl = dict(status.get("replication") or {})
        groups = {g: dict(v) for g, v in (repl.get("groups") or {}).items()}
        by_name = {p.name: p for p in pods}
        blocked = []
        wanted = spec.groups(replicas)
        for group, names in wanted.items():
            lease, shortened_from = self._lease(spec, group, groups.get(group, {}), names, out)
            seen = replication.LeaseView.of(lease)
            if seen is not None and shortened_from > seen.duration:  # its current renewal was made under the longer one
                seen.duration = shortened_from
            if seen is not None:
                seen.first_seen = self._first_seen(spec, group, seen, groups.get(group, {}))
            stale = replication.stale_master_role(seen, by_name)
            if stale is not None:  # its role was read before the Lease it renewed since
                by_name[stale] = ask_again(spec, by_name[stale], token)
            now = time.time()
            plan = replication.plan_group(spec, group, names, by_name, groups.get(group, {}), now, seen)
            if plan.waiting:
                out.waiting = out.waiting or plan.waiting
            if plan.blocked:
                blocked.append(plan.blocked)
            done = self._carry_out(spec, plan, by_name, token, out, lease)
            lapse = replication.lapses_at(plan, seen)
            if lapse is None and done and any(isinstance(a, replication.TakeLease) for a in plan.actions):
                lapse = time.time() + spec.replication.lease_duration_s  # the new holder's Lease, renewed by the operator just now
            if lapse is not None and lapse > now:  # (lapsed and not replaced: the passes come back as they do)
                out.lease_checks.append((spec.namespace, group, lapse))
            state = plan.state if done else {**groups.get(group, {}), **_kept(plan.state)}
            out.events += plan.events if done else []
            state["members"] = replication.member_figures(names, by_name, state.get("master", ""))
            groups[group] = state
        for gone in [g for g in groups if g not in wanted]:
            del groups[gone]
        status["replication"] = {"mode": spec.replication.mode, "replicas": spec.replication.replicas, "groups": groups}
        self._report(conditions, out, "FailoverBlocked", "NoInSyncFollower", "; ".join(blocked), ok_reason="MastersServing")
        return replication.roles_document(spec, groups)

    @staticmethod
    def _first_seen(spec: Spec, group: str, seen: replication.LeaseView, state: dict[str, Any]) -> float:
        """When this operator first saw the Lease's renewal (lease_clock), the status's record
        of it included (what an operator that has restarted since still knows)."""
        recorded = state.get("lease") or {}
        at = replication.parse_micro_iso(recorded.get("seenAt")) if recorded.get("renewTime") == seen.renew_time else None
        if at is not None:
            CLOCK.seen(spec.namespace, group, seen.uid, seen.renew_time, at)
        return CLOCK.seen(spec.namespace, group, seen.uid, seen.renew_time, time.time())

    def _lease(self, spec: Spec, group: str, state: dict[str, Any], names: list[str], out: Outcome) -> tuple[dict[str, Any] | None, float]:
        """The group's Lease, created for its master when missing; its duration kept as the spec
        says. With the duration it had before this pass shortened it (0 when it did not)."""
        lease = self.kube.get_or_none("Lease", spec.namespace, group)
        want = spec.replication.lease_duration_s
        before = 0.0
        try:
            if lease is None:
                master = state.get("master") if state.get("master") in names else names[0]
                lease = self.kube.create(render.lease(spec, group, master, int(state.get("epoch", 1)), micro_time()))
                out.patched.append(f"create Lease/{group}")
            elif (had := int((lease.get("spec") or {}).get("leaseDurationSeconds") or 0)) != want:
                lease = self.kube.patch("Lease", spec.namespace, group, {"spec": {"leaseDurationSeconds": want}})
                out.patched.append(f"patch Lease/{group}")
                before = float(had)
        except ApiError as e:
            out.events.append(("Warning", "LeaseFailed", f"{group}: {e.message or e.reason}"))
        return lease, before

    def _take_lease(self, spec: Spec, group: str, action: replication.TakeLease, lease: dict[str, Any] | None, fresh: bool) -> bool:
        """Record an election in the Lease, compare-and-swap on what was read (``fresh``: read it
        again first: the old master was fenced, whatever it renewed meanwhile no longer counts)."""
        if lease is None or fresh:
            lease = self.kube.get_or_none("Lease", spec.namespace, group)
        if lease is None:
            return False
        obj = copy.deepcopy(lease)
        now = micro_time()
        obj.setdefault("metadata", {}).setdefault("annotations", {})
        obj["metadata"]["annotations"].update({EPOCH: str(action.epoch), IN_SYNC: action.holder})
        obj["metadata"]["annotations"].pop(ADDRESS, None)
        obj["metadata"]["annotations"].pop(END_OFFSET, None)  # the old holder's end: the new one's log may end before it (SYNC)
        spec_ = obj.setdefault("spec", {})
        spec_.update(
            holderIdentity=action.holder,
            acquireTime=now,
            renewTime=now,
            leaseDurationSeconds=spec.replication.lease_duration_s,
            leaseTransitions=int(spec_.get("leaseTransitions") or 0) + 1,
        )
        try:
            self.kube.replace(obj)
        except ApiError as e:
            if e.status == 409:
                log.info("%s: the Lease changed since it was read; electing on the next pass", group)
                return False
            raise
        log.info("%s: the Lease names %s at epoch %d", group, action.holder, action.epoch)
        return True

    def _carry_out(
        self, spec: Spec, plan: replication.GroupPlan, pods: dict[str, PodView], token: str | None, out: Outcome, lease: dict | None = None
    ) -> bool:
        """The plan's actions in order; False when one that the rest depend on failed (a Fence
        not answered while the Lease has not expired, the Lease changed, a promotion): the plan's
        state is not taken and the next pass plans again."""
        fenced_end: int | None = None
        fenced: replication.Fence | None = None
        short: tuple[str, int] | None = None  # a switchover's candidate that could not catch up, and by how much
        for action in plan.actions:
            if short is not None:
                break
            if isinstance(action, replication.TakeLease):
                try:
                    if not self._take_lease(spec, plan.group, action, lease, fresh=fenced_end is not None):
                        out.waiting = out.waiting or f"{plan.group}: the Lease changed meanwhile"
                        return False
                except ApiError as e:
                    out.events.append(("Warning", "LeaseFailed", f"{plan.group}: {e.message or e.reason}"))
                    out.waiting = out.waiting or f"{plan.group}: writing the Lease failed"
                    return False
                continue
            p = pods.get(action.pod)
            if p is None or not p.ip:
                if isinstance(action, replication.Fence) and plan.fence_optional:
                    continue
                if isinstance(action, replication.Follow):
                    continue
                return False
            try:
                with admin_client(spec, p, token) as c:
                    admin = admin_of(c, spec, p)
                    if isinstance(action, replication.Fence):
                        fenced_end = admin.fence(action.epoch, f"the operator elects epoch {action.epoch}").end_offset
                        fenced = action
                        log.info("fenced %s (its log ends at %d)", p.name, fenced_end)
                    elif isinstance(action, replication.CatchUp):
                        held = self._catch_up(admin, fenced_end or 0)
                        if fenced_end is not None and held < fenced_end and fenced is not None:
                            short = (p.name, fenced_end - held)
                            break
                    elif isinstance(action, replication.Promote):
                        admin.promote(epoch=action.epoch, mode=action.mode)
                        log.info("promoted %s to master of %s at epoch %d", p.name, plan.group, action.epoch)
                    else:
                        admin.set_role(action.address, action.epoch)
                        log.info("%s now follows %s", p.name, action.address)
            except StoreError as e:
                if isinstance(action, replication.Fence) and plan.fence_optional:
                    continue  # the Lease expired: it cannot acknowledge anyway
                out.events.append(("Warning", "RoleChangeFailed", f"{plan.group}: {action} failed: {e}"))
                out.waiting = out.waiting or f"{plan.group}: a role change failed"
                if not isinstance(action, replication.Follow):
                    return False
        if short is not None and fenced is not None:
            self._abort_switchover(spec, plan.group, fenced, short, pods, token, out)
            return False
        return True

    def _abort_switchover(
        self, spec: Spec, group: str, fenced: replication.Fence, short: tuple[str, int], pods: dict[str, PodView], token, out: Outcome
    ) -> None:
        """A switchover whose candidate did not catch up with the fenced master: promoting it would
        lose what it lacks (ASYNC), so the fenced master gets its office back, at the epoch being
        elected (recorded in the Lease first), and the roll waits."""
        candidate, missing = short
        why = (
            f"{group}: {candidate} holds {missing} bytes less than the fenced master {fenced.pod} after {FENCE_CATCH_UP_S:.0f} s: "
            f"the switchover was aborted"
        )
        try:
            if not self._take_lease(spec, group, replication.TakeLease(fenced.pod, fenced.epoch), None, fresh=True):
                out.events.append(("Warning", "SwitchoverAborted", f"{why}; the Lease changed meanwhile (elected on the next pass)"))
                out.waiting = why
                return
            p = pods.get(fenced.pod)
            assert p is not None
            with admin_client(spec, p, token) as c:
                admin_of(c, spec, p).promote(epoch=fenced.epoch, mode=spec.replication.mode)
        except (ApiError, StoreError, AssertionError) as e:
            out.events.append(("Warning", "SwitchoverAborted", f"{why}; giving {fenced.pod} its office back failed ({e})"))
            out.waiting = why
            return
        out.events.append(("Warning", "SwitchoverAborted", f"{why}; {fenced.pod} keeps mastership at epoch {fenced.epoch}; the roll waits"))
        out.waiting = why

    @staticmethod
    def _catch_up(admin, end: int) -> int:
        """How much the candidate holds once it holds ``end``, or when FENCE_CATCH_UP_S ran out
        (a candidate that does not answer meanwhile holds what it last said)."""
        deadline = time.monotonic() + FENCE_CATCH_UP_S
        held = 0
        while True:
            try:
                held = admin.role_pb().end_offset
            except StoreError:
                pass
            if held >= end or time.monotonic() > deadline:
                return held
            time.sleep(0.05)

    def _volumes(self, spec: Spec, replicas: int, conditions: list, out: Outcome) -> None:
        """Grow every pod's volume to ``spec.storage.size`` (a claim can grow, never shrink), as
        Strimzi does; what the StorageClass refuses is reported with the API server's words."""
        want = quantity(spec.storage_size)
        problems = []
        self._pending_claims = []
        for pvc in self.kube.list("PersistentVolumeClaim", spec.namespace, spec.store_labels):
            name = pvc["metadata"]["name"]
            if not name.startswith(f"data-{spec.name}-") or not name.rsplit("-", 1)[-1].isdigit():
                continue
            if (pvc.get("status") or {}).get("phase") == "Pending":
                warning = _last_warning(self.kube, spec.namespace, name)
                if warning:  # a claim merely being provisioned is not news
                    self._pending_claims.append(f"{name}: Pending{warning}")
            have_text = pvc["spec"]["resources"]["requests"]["storage"]
            have = quantity(have_text)
            if want > have:
                try:
                    self.kube.patch(
                        "PersistentVolumeClaim", spec.namespace, name, {"spec": {"resources": {"requests": {"storage": spec.storage_size}}}}
                    )
                    out.patched.append(f"expand PersistentVolumeClaim/{name}")
                    out.events.append(("Normal", "VolumeExpanding", f"{name}: {have_text} → {spec.storage_size}"))
                except ApiError as e:
                    problems.append(f"{name}: {e.message or e.reason}")
            elif want < have:
                problems.append(f"{name} holds {have_text}: a volume cannot shrink (spec.storage.size is {spec.storage_size})")
        self._report(conditions, out, "StorageResizeBlocked", "VolumeResizeRefused", "; ".join(problems), ok_reason="VolumesMatchSpec")

    def _push_hot_config(self, spec: Spec, pods: list[PodView], token: str | None, out: Outcome) -> None:
        """Hot settings go to every pod's admin API (no restart). Keys removed from the spec go
        back to their defaults, so a pod's persisted settings never outlive the spec."""
        desired = StoreConfig(spec.store).to_dict()
        for p in pods:
            live = (p.store or {}).get("config")
            if not live or not p.recovered:
                continue
            changes = {k: config_text(desired[k]) for k in HOT_KEYS if config_text(desired[k]) != live.get(k)}
            if not changes:
                continue
            try:
                with admin_client(spec, p, token) as c:
                    res = admin_of(c, spec, p).update_config(changes)
                p.store["config_generation"] = res.generation
                p.store["config"].update(changes)
                log.info("pushed %s to %s (generation %d)", sorted(changes), p.name, res.generation)
            except StoreError as e:
                out.events.append(("Warning", "ConfigPushFailed", f"{p.name}: {e}"))
                out.waiting = out.waiting or f"config not yet pushed to {p.name}"

    def _manual_delete(self, spec: Spec, pods: list[PodView], token: str | None, annotations: dict, status: dict, out: Outcome) -> None:
        nonce = annotations.get(MANUAL_DELETE)
        if not nonce:
            return
        results = []
        for p in sorted(pods, key=lambda p: p.ordinal):
            if p.ordinal >= spec.pods:
                continue
            entry: dict[str, Any] = {"pod": p.name}
            if p.store is None:
                entry["error"] = p.error or "not reachable"
            else:
                try:
                    with admin_client(spec, p, token) as c:
                        res = admin_of(c, spec, p).manual_delete()
                    entry.update(deletedSegments=res.deleted_segments, minPhyOffset=res.min_phy_offset)
                except StoreError as e:
                    entry["error"] = str(e)
            results.append(entry)
        status["lastManualDelete"] = {"nonce": nonce, "time": decide.now(), "results": results}
        out.annotations[MANUAL_DELETE] = None
        deleted = sum(r.get("deletedSegments", 0) for r in results)
        failed = [r["pod"] for r in results if "error" in r]
        out.events.append(
            (
                "Warning" if failed else "Normal",
                "ManualDelete",
                f"manual delete {nonce}: {deleted} segments deleted on {len(results) - len(failed)} pods"
                + (f"; failed on {', '.join(failed)}" if failed else ""),
            )
        )

    def _roll(self, spec: Spec, pods: list[PodView], desired_hash: str, replicas: int, status: dict, out: Outcome) -> None:
        roll = dict(status.get("lastRoll") or {})
        groups = (status.get("replication") or {}).get("groups") or {}
        masters = frozenset(g.get("master", "") for g in groups.values()) if spec.replication.enabled else frozenset()
        step = decide.roll_step(pods, desired_hash, replicas, rolling=roll.get("state") == "running", last=masters)
        if step.action == "done":
            if roll.get("state") == "running":
                roll.update(state="done", finished=decide.now(), message="every pod is up to date")
                out.events.append(("Normal", "RollFinished", f"rolling restart done: {', '.join(roll.get('restarted', []))}"))
                status["lastRoll"] = roll
            return
        if roll.get("state") != "running":
            roll = {"state": "running", "started": decide.now(), "restarted": [], "targetHash": desired_hash}
            out.events.append(("Normal", "RollStarted", "rolling restart started: pods are restarted highest ordinal first"))
        roll["message"] = step.reason
        if step.action == "delete" and step.pod in masters and self._switchover(spec, pods, step.pod, status, out):
            status["lastRoll"] = roll
            out.waiting = f"moving mastership away from {step.pod} before restarting it"
            return
        if step.action == "delete":
            self.kube.delete("Pod", spec.namespace, step.pod)
            roll["restarted"] = [*roll.get("restarted", []), step.pod]
            out.events.append(("Normal", "PodRestarted", step.reason))
        status["lastRoll"] = roll
        out.waiting = step.reason

    def _switchover(self, spec: Spec, pods: list[PodView], master: str, status: dict, out: Outcome) -> bool:
        """Before a roll restarts a master: promote a caught-up follower of its group. True when
        mastership moved (or cannot yet: the roll then waits rather than restart a master)."""
        groups = status["replication"]["groups"]
        group = next(g for g, st in groups.items() if st.get("master") == master)
        names = spec.groups(spec.pods).get(group, [])
        by_name = {p.name: p for p in pods}
        lease = self.kube.get_or_none("Lease", spec.namespace, group)
        plan = replication.plan_switchover(spec, group, names, by_name, groups[group], replication.LeaseView.of(lease))
        if plan is None:
            return len(names) > 1  # a group of one has nowhere to move to: restart it in place
        if self._carry_out(spec, plan, by_name, self._token, out, lease):
            plan.state["members"] = groups[group].get("members", [])
            groups[group] = plan.state
            out.events += plan.events
            roles = replication.roles_document(spec, groups)
            self.apply(render.roles_config_map(spec, roles), out)
        return True

    def _status(
        self, spec: Spec, pods: list[PodView], desired_hash: str, replicas: int, meta: dict, conditions: list, status: dict, out: Outcome
    ) -> None:
        status["observedGeneration"] = meta.get("generation")
        status["replicas"] = -(-len(pods) // spec.replication.replicas)  # nodes that exist (the scale subresource's status)
        status["selector"] = spec.selector_text
        status["pods"] = [decide.pod_figures(p, desired_hash) for p in sorted(pods, key=lambda p: p.ordinal)]
        mine = [p for p in pods if p.ordinal < replicas]
        pending = decide.pending_pods(pods) + self._pending_claims
        self._report(conditions, out, "PodsPending", "PodsNotRunning", "; ".join(pending), ok_reason="AllRunning")
        self._report(conditions, out, "ImageUnavailable", "ImagePullFailed", decide.unpullable_images(pods), ok_reason="Pulled")
        refused = [p.name for p in pods if p.token_refused]
        self._report(
            conditions,
            out,
            "AdminTokenRejected",
            "AdminTokenRejected",
            f"{', '.join(refused)} refuse the admin token of Secret {(spec.admin_secret or {}).get('name')} "
            "(and the one they accepted before)"
            if refused
            else "",
            ok_reason="Accepted",
        )
        status["readyReplicas"] = sum(1 for p in mine if p.ready and p.recovered)
        usages = [f["diskUsagePercent"] for f in status["pods"] if f.get("diskUsagePercent", -1) >= 0]
        status["diskUsagePercent"] = max(usages) if usages else 0
        # abnormal recoveries: a Warning once per recovery, the condition while one runs
        reported = dict(status.get("reportedRecoveries") or {})
        recovering = []
        for p in pods:
            rec = p.recovery
            if rec.get("mode") == "abnormal" and str(rec.get("started_ms")) != str(reported.get(p.name)):
                reported[p.name] = str(rec.get("started_ms"))
                out.events.append(
                    (
                        "Warning",
                        "AbnormalRecovery",
                        f"{p.name} recovered from a crash: {rec.get('state')} in {rec.get('duration_ms')} ms, "
                        f"{rec.get('bytes_truncated')} bytes truncated",
                    )
                )
            if p.store is not None and rec.get("state") != "done":
                recovering.append(f"{p.name} ({rec.get('mode')}, {float(rec.get('progress', 0)):.0%})")
        status["reportedRecoveries"] = reported
        decide.set_condition(conditions, "Recovering", bool(recovering), "Recovering" if recovering else "Recovered", ", ".join(recovering))
        pressure = decide.disk_pressure(pods, int(StoreConfig(spec.store).diskMaxUsedSpaceRatio))
        if (
            decide.set_condition(conditions, "DiskPressure", bool(pressure), "HighDiskUsage" if pressure else "DiskOK", ", ".join(pressure))
            and pressure
        ):
            out.events.append(("Warning", "DiskPressure", ", ".join(pressure)))
        busy = out.waiting
        decide.set_condition(conditions, "Reconciling", bool(busy), "InProgress" if busy else "Reconciled", busy or "")
        missing = [spec.pod_name(i) for i in range(replicas) if i not in {p.ordinal for p in mine}]
        not_ready = [p.name for p in mine if not (p.ready and p.recovered)]
        ready = not (missing or not_ready or busy)
        why = busy or (f"missing {', '.join(missing)}" if missing else f"not ready: {', '.join(not_ready)}" if not_ready else "")
        decide.set_condition(conditions, "Ready", ready, "AllPodsReady" if ready else "NotReady", why)


def _kept(state: dict[str, Any]) -> dict[str, Any]:
    """What a pass keeps of a plan whose election did not finish: how long the master was down
    and when its Lease was last seen renewed (the Lease itself records an election made)."""
    return {k: v for k, v in state.items() if k in ("masterNotReadySince", "lease")}


def _claim_size(sts: dict[str, Any]) -> int:
    for claim in sts.get("spec", {}).get("volumeClaimTemplates") or []:
        if claim.get("metadata", {}).get("name") == "data":
            return quantity(claim["spec"]["resources"]["requests"]["storage"])
    return 0


def _last_warning(kube: Kube, namespace: str, name: str) -> str:
    """The newest Warning Event about an object, as ``: reason: message`` ('' when none)."""
    try:
        events = kube.list("Event", namespace, fields={"involvedObject.name": name})
    except ApiError:
        return ""
    warnings = [e for e in events if e.get("type") == "Warning"]
    if not warnings:
        return ""
    e = max(warnings, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return f": {e.get('reason', '')}: {e.get('message', '')}"
