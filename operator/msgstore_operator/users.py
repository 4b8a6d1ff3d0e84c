"""MessageStoreUser resources: a store's users kept in Git, as Strimzi's KafkaUser.

Reconciled in the store's own pass (under its lock, with the admin token and the TLS reach
that pass already holds): for every resource naming the store, the operator keeps a Secret
with the user's access key, a generated secret key and the store's address (owned by the
resource, so it goes with it), puts the user on the store when it is missing or its entries or
type differ (drift: a change made with the CLI is undone and reported), and deletes from the
store the users it put there whose resource is gone. Which users it put there is kept in the
MessageStore's ``status.managedUsers``; users made with the CLI under other access keys are
never touched. The operator sets no finalizer: a deleted resource is noticed at the store's
next pass (its event pokes it).
"""

from __future__ import annotations

import base64
import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from msgstore.acl import policy
from msgstore.client import Client, StoreError

from . import decide
from .kube import Kube, NotFound
from .pods import ADMIN_TIMEOUT_S, PodView
from .spec import API_VERSION, Spec, SpecError

log = logging.getLogger(__name__)

KIND = "MessageStoreUser"
PLURAL = "messagestoreusers"
MANAGED = "managedUsers"  # MessageStore status: the access keys the operator put on the store
SECRET_KEY_BYTES = 32


@dataclass(frozen=True)
class UserSpec:
    name: str
    access_key: str
    super_user: bool
    entries: tuple[dict[str, Any], ...]  # as the admin API takes them (Entry.to_json)
    secret_name: str


def parse_user(body: Mapping[str, Any]) -> UserSpec:
    """SpecError names the field (``spec.entries[1].actions``)."""
    meta, spec = body.get("metadata", {}), body.get("spec") or {}
    access_key = spec.get("accessKey") or meta["name"]
    try:
        policy.check_access_key(access_key, "accessKey")
        raw = [{**e, "decision": str(e.get("decision", "Allow")).lower()} for e in spec.get("entries") or []]
        entries = [policy.parse_entry(e, f"entries[{i}]") for i, e in enumerate(raw)]
        policy.check_entries(entries)
    except policy.PolicyError as e:
        raise SpecError(f"spec.{e.field}", e.reason) from None
    super_user = bool(spec.get("superUser", False))
    if super_user and entries:
        raise SpecError("spec.entries", "a super user may do everything: its entries would mean nothing")
    return UserSpec(
        meta["name"], access_key, super_user, tuple(e.to_json() for e in entries), spec.get("secretName") or f"{meta['name']}-credentials"
    )


def _live_json(info: Any) -> tuple[bool, list[dict[str, Any]]]:
    """A stored user (admin UserInfo) as (super, entries) in the form parse_user gives."""
    entries = []
    for e in info.entries:
        raw = {"resource": e.resource, "actions": list(e.actions), "decision": e.decision or "allow"}
        if e.source_ips:
            raw["sourceIps"] = list(e.source_ips)
        entries.append(policy.parse_entry(raw, "entries").to_json())
    return info.user_type == "Super", entries


def _key(entries: Any) -> list[str]:
    return sorted(repr(sorted(e.items())) for e in entries)


class Users:
    """One pass over the users of one store."""

    def __init__(self, kube: Kube, spec: Spec, token: str | None, reach: dict[str, Any]):
        self.kube, self.spec, self.token, self.reach = kube, spec, token, reach
        self.events: list[tuple[str, str, str]] = []  # on the MessageStore

    def reconcile(self, pods: list[PodView], status: dict[str, Any]) -> None:
        try:
            listed = self.kube.list(KIND, self.spec.namespace)
        except NotFound:  # the CRD is not installed (helm upgrade does not update crds/): no users to manage
            listed = []
        resources = [u for u in listed if (u.get("spec") or {}).get("store") == self.spec.name]
        managed = set(status.get(MANAGED) or [])
        if not resources and not managed:
            return
        # (during a roll that switches TLS on or off, the pods already serving as the spec says)
        reachable = [f"{p.ip}:{self.spec.port}" for p in pods if p.store is not None and not p.deleting and p.reach == self.reach]
        problem = ""
        if self.token is None:
            problem = f"MessageStore {self.spec.name} has no spec.adminTokenSecret: users are managed with the admin token"
        elif not reachable:
            problem = f"no pod of MessageStore {self.spec.name} answers yet"
        if problem:
            for body in resources:
                self._status(body, None, "StoreUnavailable", problem)
            return
        with Client(reachable, admin_token=self.token, timeout=ADMIN_TIMEOUT_S * 3, **self.reach) as client:
            try:
                live = {u.access_key: u for u in client.users()}
            except StoreError as e:
                for body in resources:
                    self._status(body, None, "StoreUnavailable", f"listing the store's users failed: {e.code.name}: {e.details}")
                return
            wanted: dict[str, str] = {}
            for body in sorted(resources, key=lambda b: b["metadata"].get("creationTimestamp") or ""):
                key = self._one(client, body, live, wanted)
                if key:
                    wanted[key] = body["metadata"]["name"]
            kept = set(wanted)
            for key in sorted(managed - kept):
                try:
                    client.delete_user(key)
                    self.events.append(("Normal", "UserDeleted", f"user {key} deleted from the store (its MessageStoreUser is gone)"))
                except StoreError as e:
                    kept.add(key)  # tried again next pass
                    self.events.append(("Warning", "UserDeleteFailed", f"user {key}: {e.code.name}: {e.details}"))
        status[MANAGED] = sorted(kept)

    def _one(self, client: Client, body: dict[str, Any], live: dict[str, Any], wanted: dict[str, str]) -> str | None:
        try:
            user = parse_user(body)
        except SpecError as e:
            self._status(body, None, "InvalidSpec", str(e))
            return None
        if user.access_key in wanted:
            self._status(body, user, "AccessKeyTaken", f"spec.accessKey: {user.access_key} is MessageStoreUser {wanted[user.access_key]}'s")
            return None
        try:
            secret_key, fresh = self._secret(body, user)
        except SpecError as e:
            self._status(body, None, "SecretNotOurs", str(e))
            return None
        have = live.get(user.access_key)
        why, drift = "", False
        if have is None:
            why = "created"
        elif fresh:
            why = "given a new secret key (its Secret was made anew)"
        else:
            live_super, live_entries = _live_json(have)
            if live_super != user.super_user or _key(live_entries) != _key(user.entries):
                why, drift = "put back as the resource says (the store's copy was changed outside it)", True
        if why:
            try:
                client.put_user(user.access_key, secret_key, super_user=user.super_user, entries=list(user.entries))
            except StoreError as e:
                self._status(body, user, "StoreRefused", f"{e.code.name}: {e.details}")
                return user.access_key if have is not None else None
            self._event(body, "Warning" if drift else "Normal", "UserDrift" if drift else "UserPut", f"user {user.access_key} {why}")
        note = (
            ""
            if self.spec.store.get("authorizationEnabled") == "true"
            else (
                f"MessageStore {self.spec.name} does not check callers (spec.store.authorizationEnabled is off): "
                "the user is stored, not enforced"
            )
        )
        self._status(body, user, "Ready", note, ready=True)
        return user.access_key

    def _secret(self, body: dict[str, Any], user: UserSpec) -> tuple[str, bool]:
        """The user's secret key, from its Secret (made now when missing: ``fresh``)."""
        meta = body["metadata"]
        try:
            live = self.kube.get("Secret", self.spec.namespace, user.secret_name)
        except NotFound:
            live = None
        if live is not None:
            owners = (live.get("metadata") or {}).get("ownerReferences") or []
            if not any(o.get("kind") == KIND and o.get("uid") == meta.get("uid") for o in owners):
                raise SpecError("spec.secretName", f"Secret {user.secret_name} exists and was not made for this MessageStoreUser")
            data = {k: base64.b64decode(v).decode() for k, v in (live.get("data") or {}).items()}
            if data.get("secretKey") and data.get("accessKey") == user.access_key:
                return data["secretKey"], False
        secret_key = secrets.token_urlsafe(SECRET_KEY_BYTES)
        data = {
            "accessKey": user.access_key,
            "secretKey": secret_key,
            "endpoint": f"{self.spec.name}.{self.spec.namespace}.svc:{self.spec.port}",
        }
        obj = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": user.secret_name,
                "namespace": self.spec.namespace,
                "labels": {**self.spec.store_labels, "app.kubernetes.io/managed-by": "msgstore-operator", "msgstore.io/user": meta["name"]},
                "ownerReferences": [
                    {"apiVersion": API_VERSION, "kind": KIND, "name": meta["name"], "uid": meta.get("uid", ""), "controller": True}
                ],
            },
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        }
        if live is None:
            self.kube.create(obj)
        else:
            obj["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
            self.kube.replace(obj)
        return secret_key, True

    def _status(self, body: dict[str, Any], user: UserSpec | None, reason: str, message: str, ready: bool = False) -> None:
        meta = body["metadata"]
        old = body.get("status") or {}
        conditions = [dict(c) for c in old.get("conditions") or []]
        changed = decide.set_condition(conditions, "Ready", ready, reason, message)
        new = {**old, "conditions": conditions, "observedGeneration": meta.get("generation")}
        if user is not None:
            new.update(accessKey=user.access_key, secretName=user.secret_name)
        if new == old:
            return
        self.kube.patch(KIND, self.spec.namespace, meta["name"], {"status": new}, sub="status")
        if changed and not ready:
            self._event(body, "Warning", reason, message)

    def _event(self, body: dict[str, Any], etype: str, reason: str, message: str) -> None:
        try:
            self.kube.event(body, etype, reason, message)
        except Exception as e:  # an Event is worth a log line, not a failed pass
            log.warning("could not post event %s: %s", reason, e)
