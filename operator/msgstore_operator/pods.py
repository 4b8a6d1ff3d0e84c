"""What the operator sees of each store pod: Kubernetes' view and the store's own status."""

from __future__ import annotations

import base64
import datetime
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import grpc

from msgstore.client import AdminClient, Client, StoreError

from .kube import Kube, NotFound
from .spec import RESTART_HASH, Spec

log = logging.getLogger(__name__)
ADMIN_TIMEOUT_S = 3.0
PENDING_GRACE_S = 15.0  # a new pod waits for its volume and the scheduler a moment: not worth reporting
IMAGE_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")  # the kubelet cannot get the image
PULL_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CrashLoopBackOff")
REFUSED = (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED)

# The last admin token each store's pods accepted. When the Secret rotates, pods pick the new
# token up only once the kubelet has rewritten their volume; meanwhile they are asked with the
# one they still hold (kept in memory only: a token never goes into status or annotations).
_accepted: dict[tuple[str, str], str] = {}
_accepted_lock = threading.Lock()


class ReferenceMissing(Exception):
    """A Secret (or a key of it) the spec names does not exist."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass
class PodView:
    name: str
    ordinal: int
    ip: str | None
    ready: bool
    deleting: bool
    restart_hash: str
    phase: str = ""
    pending: str = ""  # why the pod does not run: the scheduler's or the kubelet's words
    unpullable: str = ""  # the image the kubelet cannot pull for it
    store: dict[str, Any] | None = None  # Admin.GetStatus as a dict; None when unreachable
    error: str = ""
    token: str | None = None  # the admin token this pod accepted
    role: dict[str, Any] | None = None  # Admin.GetRole (replicated stores): role, epoch, end_offset, master_address, lag...
    reach: dict[str, Any] = field(default_factory=dict)  # the TLS options this pod is reached with (tls.Reaches)

    @property
    def address(self) -> str | None:
        return None if not self.ip else self.ip

    @property
    def recovery(self) -> dict[str, Any]:
        return (self.store or {}).get("recovery", {})

    @property
    def recovered(self) -> bool:
        """Serving, with its recovery finished (normal or not)."""
        return bool(self.store) and self.store.get("state") == "running" and self.recovery.get("state") == "done"

    @property
    def token_refused(self) -> bool:
        return self.error.startswith(tuple(c.name for c in REFUSED))


def ordinal_of(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def _condition(pod: dict[str, Any], ctype: str) -> dict[str, Any]:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return {}


def _age_s(meta: dict[str, Any]) -> float:
    try:
        created = datetime.datetime.strptime(meta["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    except (KeyError, ValueError):
        return float("inf")
    return (datetime.datetime.now(datetime.UTC) - created).total_seconds()


def _pending_reason(pod: dict[str, Any]) -> str:
    """Why a pod is not running, in the words of whoever knows: the scheduler (unschedulable),
    or the kubelet (an image that cannot be pulled, a volume that cannot be mounted). Image
    errors are reported at once; the rest only once the pod has waited past a short grace."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in PULL_ERRORS:
            return f"{waiting['reason']}: {waiting.get('message', '')}".strip() + _last_words(cs)
    if _age_s(pod.get("metadata", {})) < PENDING_GRACE_S:
        return ""
    scheduled = _condition(pod, "PodScheduled")
    if scheduled.get("status") == "False":
        return f"{scheduled.get('reason', 'Unschedulable')}: {scheduled.get('message', '')}".strip()
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("message"):
            return f"{waiting.get('reason')}: {waiting['message']}"
    return ""


def _last_words(status: dict[str, Any]) -> str:
    """What a container that exited in error said last (its termination message: with
    FallbackToLogsOnError, the tail of its log), as '; it exited N: <line>' ("" when none)."""
    last = (status.get("lastState") or {}).get("terminated") or {}
    lines = [line.strip() for line in str(last.get("message") or "").splitlines() if line.strip()]
    if not lines or not last.get("exitCode"):
        return ""
    reason = f" ({last['reason']})" if last.get("reason") not in (None, "", "Error") else ""  # OOMKilled, say
    return f"; it exited {last['exitCode']}{reason}: {lines[-1][-400:]}"


def _unpullable_image(pod: dict[str, Any]) -> str:
    """The image a container of the pod waits for and cannot get ("" when none)."""
    images = {c.get("name"): c.get("image", "") for c in (pod.get("spec") or {}).get("containers") or []}
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if ((cs.get("state") or {}).get("waiting") or {}).get("reason") in IMAGE_ERRORS:
            return images.get(cs.get("name")) or cs.get("image", "") or "?"
    return ""


def _ours(pod: dict[str, Any], spec: Spec) -> bool:
    """A pod of this store's StatefulSet: named ``<store>-<ordinal>`` and controlled by it (or
    by nothing, while the StatefulSet is recreated and the pods wait to be adopted)."""
    meta = pod.get("metadata", {})
    if not meta.get("name", "").startswith(spec.name + "-") or ordinal_of(meta["name"]) < 0:
        return False
    controllers = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    return all(o.get("kind") == "StatefulSet" and o.get("name") == spec.name for o in controllers)


def list_pods(kube: Kube, spec: Spec) -> list[dict[str, Any]]:
    return [p for p in kube.list("Pod", spec.namespace, spec.store_labels) if _ours(p, spec)]


def admin_token(kube: Kube, spec: Spec) -> str | None:
    """The token the spec's Secret holds; :class:`ReferenceMissing` when it cannot be read."""
    if not spec.admin_secret:
        return None
    name, key = spec.admin_secret["name"], spec.admin_secret.get("key", "token")
    try:
        secret = kube.get("Secret", spec.namespace, name)
    except NotFound:
        raise ReferenceMissing(
            "SecretNotFound", f"Secret {name} (spec.adminTokenSecret) does not exist in namespace {spec.namespace}"
        ) from None
    raw = (secret.get("data") or {}).get(key)
    if raw is None:
        raise ReferenceMissing("SecretKeyNotFound", f"Secret {name} has no key {key!r} (spec.adminTokenSecret.key)")
    return base64.b64decode(raw).decode().strip()


def admin_client(spec: Spec, pod: PodView, token: str | None) -> Client:
    token = pod.token if pod.token is not None else token
    return Client(f"{pod.ip}:{spec.port}", admin_token=token, timeout=ADMIN_TIMEOUT_S, **pod.reach)


def admin_of(client: Client, spec: Spec, pod: PodView) -> AdminClient:
    """The pod's admin API, addressed directly (no route lookup through its peers)."""
    return AdminClient(client, f"{pod.ip}:{spec.port}")


def _ask(spec: Spec, view: PodView, token: str | None, reach: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The pod's Admin.GetStatus, and its Admin.GetRole in a replicated store, over one channel."""
    with Client(f"{view.ip}:{spec.port}", admin_token=token, timeout=ADMIN_TIMEOUT_S, **reach) as c:
        admin = admin_of(c, spec, view)
        status = admin.status()
        if not spec.replication.enabled:
            return status, None
        r = admin.role_pb()
    return status, {
        "group": r.group,
        "role": r.role,
        "mode": r.mode,
        "epoch": r.epoch,
        "end_offset": r.end_offset,
        "master_address": r.master_address,
        "lag_bytes": r.lag_bytes,
        "lag_seconds": r.lag_seconds,
        "connected": r.connected,
        "followers": {f.member: {"lag_bytes": f.lag_bytes, "in_sync": f.in_sync} for f in r.followers},
        "fenced": r.fenced,
        "last_epoch": r.epochs[-1].epoch if r.epochs else 0,
        "group_epoch": max(r.group_epoch, r.epoch),
        "sync_state_set": list(r.sync_state_set),
    }


def ask_again(spec: Spec, view: PodView, token: str | None) -> PodView:
    """The pod's status and role asked once more (with the token it accepted); unchanged when it
    does not answer now."""
    if not view.ip or view.deleting:
        return view
    try:
        status, role = _ask(spec, view, view.token or token, view.reach)
    except StoreError:
        return view
    return replace(view, store=status, role=role)


def observe(
    kube: Kube,
    spec: Spec,
    token: str | None,
    reachable: bool = True,
    reach: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    pods: list | None = None,
) -> list[PodView]:
    """Every pod of the store, highest ordinal first, with its store status where reachable.

    A pod that refuses the current admin token is asked with the token it accepted last (a
    Secret rotation the pod has not seen yet); ``reachable=False`` skips the admin calls;
    ``reach``: a pod's TLS options (plain text without); ``pods``: the store's pods, when the
    caller has listed them already."""
    key = (spec.namespace, spec.name)
    with _accepted_lock:
        previous = _accepted.get(key)
    candidates = [t for t in dict.fromkeys([token, previous]) if t is not None] or [None]
    views = []
    for pod in pods if pods is not None else list_pods(kube, spec):
        if not _ours(pod, spec):
            continue
        meta, status = pod.get("metadata", {}), pod.get("status") or {}
        view = PodView(
            name=meta["name"],
            ordinal=ordinal_of(meta["name"]),
            ip=status.get("podIP"),
            ready=_condition(pod, "Ready").get("status") == "True",
            deleting=bool(meta.get("deletionTimestamp")),
            restart_hash=(meta.get("annotations") or {}).get(RESTART_HASH, ""),
            phase=status.get("phase", ""),
            pending=_pending_reason(pod),
            unpullable=_unpullable_image(pod),
            reach=reach(pod) if reach is not None else {},
        )
        if view.ip and not view.deleting and reachable:
            for candidate in candidates:
                try:
                    view.store, view.role = _ask(spec, view, candidate, view.reach)
                    view.token, view.error = candidate, ""
                    break
                except StoreError as e:
                    view.error = f"{e.code.name}: {e.details}"
                    if e.code not in REFUSED:
                        break
        views.append(view)
    accepted = [v.token for v in views if v.store is not None and v.token is not None]
    with _accepted_lock:
        if token is not None and token in accepted:
            _accepted[key] = token
        elif accepted and key not in _accepted:
            _accepted[key] = accepted[0]
    return sorted(views, key=lambda v: v.ordinal, reverse=True)
