"""What the operator sees of each store pod: Kubernetes' view and the store's own status."""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass
from typing import Any

from msgstore.client import AdminClient, Client, StoreError

from .kube import Kube
from .spec import RESTART_HASH, Spec

log = logging.getLogger(__name__)
ADMIN_TIMEOUT_S = 3.0


@dataclass
class PodView:
    name: str
    ordinal: int
    ip: str | None
    ready: bool
    deleting: bool
    restart_hash: str
    store: dict[str, Any] | None = None  # Admin.GetStatus as a dict; None when unreachable
    error: str = ""

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


def ordinal_of(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def _ready(pod: dict[str, Any]) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def admin_token(kube: Kube, spec: Spec) -> str | None:
    if not spec.admin_secret:
        return None
    secret = kube.get("Secret", spec.namespace, spec.admin_secret["name"])
    raw = (secret.get("data") or {}).get(spec.admin_secret.get("key", "token"))
    if raw is None:
        raise ValueError(f"secret {spec.admin_secret['name']} has no key {spec.admin_secret.get('key', 'token')!r}")
    return base64.b64decode(raw).decode().strip()


def admin_client(spec: Spec, pod: PodView, token: str | None) -> Client:
    return Client(f"{pod.ip}:{spec.port}", admin_token=token, timeout=ADMIN_TIMEOUT_S)


def admin_of(client: Client, spec: Spec, pod: PodView) -> AdminClient:
    """The pod's admin API, addressed directly (no route lookup through its peers)."""
    return AdminClient(client, f"{pod.ip}:{spec.port}")


def observe(kube: Kube, spec: Spec, token: str | None) -> list[PodView]:
    """Every pod of the store, highest ordinal first, with its store status where reachable."""
    views = []
    for pod in kube.list("Pod", spec.namespace, spec.selector):
        meta = pod.get("metadata", {})
        view = PodView(name=meta["name"], ordinal=ordinal_of(meta["name"]), ip=(pod.get("status") or {}).get("podIP"),
                       ready=_ready(pod), deleting=bool(meta.get("deletionTimestamp")),
                       restart_hash=(meta.get("annotations") or {}).get(RESTART_HASH, ""))
        if view.ip and not view.deleting:
            try:
                with admin_client(spec, view, token) as c:
                    view.store = admin_of(c, spec, view).status()
            except StoreError as e:
                view.error = f"{e.code.name}: {e.details}"
        views.append(view)
    return sorted(views, key=lambda v: v.ordinal, reverse=True)
