"""What the store's declared resources (MessageStoreUser, MessageStoreTopic, MessageStoreGroup)
share: they are reconciled in their store's own pass (under its lock, with the admin token and
the TLS reach it holds), listed by ``spec.store``, report in a ``Ready`` condition with Warning
Events, and what the operator made on the store is remembered in the MessageStore's status
(one key per kind), so a resource deleted without a finalizer is noticed at the next pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any

from msgstore.client import Client

from . import decide
from .kube import Kube, NotFound
from .pods import ADMIN_TIMEOUT_S, PodView
from .spec import Spec

log = logging.getLogger(__name__)


class Declared:
    KIND = ""

    def __init__(self, kube: Kube, spec: Spec, token: str | None, reach: dict[str, Any]):
        self.kube, self.spec, self.token, self.reach = kube, spec, token, reach
        self.events: list[tuple[str, str, str]] = []  # on the MessageStore

    def resources(self) -> list[dict[str, Any]] | None:
        """This store's resources of the kind, oldest first; None when the CRD is not installed
        (``helm upgrade`` leaves crds/ alone): then nothing of the kind is touched."""
        try:
            listed = self.kube.list(self.KIND, self.spec.namespace)
        except NotFound:
            return None
        mine = [r for r in listed if (r.get("spec") or {}).get("store") == self.spec.name]
        return sorted(mine, key=lambda r: r["metadata"].get("creationTimestamp") or "")

    def reachable(self, pods: list[PodView]) -> list[str]:
        """Pods that answer as the spec says (during a roll switching TLS, the new ones)."""
        return [f"{p.ip}:{self.spec.port}" for p in pods if p.store is not None and not p.deleting and p.reach == self.reach]

    def client(self, addresses: list[str]) -> Client:
        return Client(addresses, admin_token=self.token, timeout=ADMIN_TIMEOUT_S * 3, **self.reach)

    def unavailable(self, resources: list[dict[str, Any]], pods: list[PodView], needs_token: bool) -> list[str] | None:
        """The addresses to work through, or None after saying on every resource why not."""
        problem = ""
        addresses = self.reachable(pods)
        if needs_token and self.token is None:
            problem = f"MessageStore {self.spec.name} has no spec.adminTokenSecret: users are managed with the admin token"
        elif not addresses:
            problem = f"no pod of MessageStore {self.spec.name} answers yet"
        if problem:
            for body in resources:
                self.status(body, "StoreUnavailable", problem)
            return None
        return addresses

    def claimed(
        self,
        resources: list[dict[str, Any]],
        managed: Collection[str],
        status_key: str,
        one: Callable[[dict[str, Any], dict[str, str]], str | None],
    ) -> dict[str, str]:
        """Key on the store (an access key, a topic, a group) -> the resource that holds it:
        ``one(body, held so far)`` applies a resource and says its key, or None when it is
        refused; a refused resource keeps the key it was last applied under (``status_key`` of
        its status) when the operator made that one, so nothing is taken off the store for a
        bad edit and no other resource takes the key meanwhile. One resource's exception is its
        own status (``Failed``), never the store's pass."""
        held: dict[str, str] = {}
        for body in resources:
            name = body["metadata"]["name"]
            previous = (body.get("status") or {}).get(status_key)
            try:
                key = one(body, held)
            except Exception as e:
                log.exception("%s %s", self.KIND, name)
                self.status(body, "Failed", f"{type(e).__name__}: {e}")
                key = None
            if key:
                held[key] = name
            elif previous in managed and previous not in held:
                held[previous] = name
        return held

    def status(self, body: dict[str, Any], reason: str, message: str, ready: bool = False, **fields: Any) -> None:
        """The resource's Ready condition and ``fields``; a Warning Event when it turns not ready."""
        meta = body["metadata"]
        old = body.get("status") or {}
        conditions = [dict(c) for c in old.get("conditions") or []]
        changed = decide.set_condition(conditions, "Ready", ready, reason, message)
        new = {**old, **fields, "conditions": conditions, "observedGeneration": meta.get("generation")}
        if new == old:
            return
        try:
            self.kube.patch(self.KIND, self.spec.namespace, meta["name"], {"status": new}, sub="status")
        except NotFound:  # deleted since it was listed: the next pass notices
            return
        if changed and not ready:
            self.event(body, "Warning", reason, message)

    def event(self, body: dict[str, Any], etype: str, reason: str, message: str) -> None:
        try:
            self.kube.event(body, etype, reason, message)
        except Exception as e:  # an Event is worth a log line, not a failed pass
            log.warning("could not post event %s: %s", reason, e)
