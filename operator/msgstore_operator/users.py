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
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from msgstore.acl import policy
from msgstore.client import Client, StoreError
from msgstore.client.client import put_user_request

from .declared import Declared
from .kube import Kube, NotFound
from .pods import PodView
from .spec import API_VERSION, Spec, SpecError

KIND = "MessageStoreUser"
PLURAL = "messagestoreusers"
MANAGED = "managedUsers"  # MessageStore status: the access keys the operator put on the store
ADOPT = "msgstore.io/adopt-user"  # a resource may take over a user the CLI made under its access key
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


def _precedence(body: dict[str, Any]) -> tuple[bool, str]:
    """A resource already holding its access key first (an older resource renamed to a newer
    one's key does not take it over), then the oldest."""
    spec, status = body.get("spec") or {}, body.get("status") or {}
    key = spec.get("accessKey") or body["metadata"]["name"]
    return status.get("accessKey") != key, body["metadata"].get("creationTimestamp") or ""


def _key(entries: Any) -> list[str]:
    return sorted(repr(sorted(e.items())) for e in entries)


class Users(Declared):
    """One pass over the users of one store."""

    KIND = KIND

    def __init__(self, kube: Kube, spec: Spec, token: str | None, reach: dict[str, Any], ca_cert: bytes | None = None):
        super().__init__(kube, spec, token, reach)
        self.ca_cert = ca_cert

    def reconcile(self, pods: list[PodView], status: dict[str, Any]) -> None:
        resources = self.resources()
        managed = set(status.get(MANAGED) or [])
        if resources is None or (not resources and not managed):
            return
        addresses = self.unavailable(resources, pods, needs_token=True)
        if addresses is None:
            return
        with self.client(addresses) as client:
            try:  # every replica group's master keeps its own users: each is compared and corrected
                if not all(n.ready for n in client.nodes()):  # a group without its master (a roll): next pass
                    return
                live = {m: {u.access_key: u for u in client.admin(m).users()} for m in client.group_masters()}
            except StoreError as e:
                for body in resources:
                    self.status(body, "StoreUnavailable", f"listing the store's users failed: {e.code.name}: {e.details}")
                return
            kept = set(
                self.claimed(
                    sorted(resources, key=_precedence), managed, "accessKey", lambda b, held: self._one(client, b, live, held, managed)
                )
            )
            for key in sorted(managed - kept):
                try:
                    client.delete_user(key)
                    self.events.append(("Normal", "UserDeleted", f"user {key} deleted from the store (its MessageStoreUser is gone)"))
                except StoreError as e:
                    kept.add(key)  # tried again next pass
                    self.events.append(("Warning", "UserDeleteFailed", f"user {key}: {e.code.name}: {e.details}"))
        status[MANAGED] = sorted(kept)

    def _one(
        self, client: Client, body: dict[str, Any], live: dict[str, dict[str, Any]], wanted: dict[str, str], managed: set[str]
    ) -> str | None:
        try:
            user = parse_user(body)
        except SpecError as e:
            self._say(body, None, "InvalidSpec", str(e))
            return None
        if user.access_key in wanted:
            self._say(body, user, "AccessKeyTaken", f"spec.accessKey: {user.access_key} is MessageStoreUser {wanted[user.access_key]}'s")
            return None
        exists = any(user.access_key in users for users in live.values())
        adopt = str((body["metadata"].get("annotations") or {}).get(ADOPT, "")).lower() == "true"
        if exists and user.access_key not in managed and not adopt:
            self._say(
                body,
                None,
                "UserExists",
                f"spec.accessKey: user {user.access_key} exists on the store and no MessageStoreUser made it (the CLI did): "
                f"annotate {ADOPT}=true to take it over",
            )
            return None
        try:
            secret_key, fresh = self._secret(body, user)
        except SpecError as e:
            self._say(body, None, "SecretNotOurs", str(e))
            return None
        request = put_user_request(user.access_key, secret_key, user.super_user, list(user.entries))
        done = []
        for master, users in live.items():
            have = users.get(user.access_key)
            why, drift = "", False
            if have is None:
                why = "created"
            elif fresh:
                why = "given a new secret key (its Secret was made anew)"
            else:
                live_super, live_entries = _live_json(have)
                if live_super != user.super_user or _key(live_entries) != _key(user.entries):
                    why, drift = "put back as the resource says (the store's copy was changed outside it)", True
            if not why:
                continue
            try:
                client.admin(master).put_user(request)
            except StoreError as e:
                self._say(body, user, "StoreRefused", f"{e.code.name}: {e.details}")
                return user.access_key  # (kept: what was put elsewhere is taken off if the resource goes)
            done.append((why, drift))
        if done:
            why, drift = done[0]
            self.event(body, "Warning" if drift else "Normal", "UserDrift" if drift else "UserPut", f"user {user.access_key} {why}")
        note = (
            ""
            if self.spec.store.get("authorizationEnabled") == "true"
            else (
                f"MessageStore {self.spec.name} does not check callers (spec.store.authorizationEnabled is off): "
                "the user is stored, not enforced"
            )
        )
        self._say(body, user, "Ready", note, ready=True)
        return user.access_key

    def _secret(self, body: dict[str, Any], user: UserSpec) -> tuple[str, bool]:
        """The user's secret key, from its Secret (made now when missing: ``fresh``); the rest
        of the Secret (endpoint, the store's CA certificate) follows the store."""
        meta = body["metadata"]
        try:
            live = self.kube.get("Secret", self.spec.namespace, user.secret_name)
        except NotFound:
            live = None
        secret_key, fresh = "", True
        if live is not None:
            owners = (live.get("metadata") or {}).get("ownerReferences") or []
            if not any(o.get("kind") == KIND and o.get("uid") == meta.get("uid") for o in owners):
                raise SpecError("spec.secretName", f"Secret {user.secret_name} exists and was not made for this MessageStoreUser")
            have = {k: base64.b64decode(v) for k, v in (live.get("data") or {}).items()}
            if have.get("secretKey") and have.get("accessKey") == user.access_key.encode():
                secret_key, fresh = have["secretKey"].decode(), False
        secret_key = secret_key or secrets.token_urlsafe(SECRET_KEY_BYTES)
        data = {
            "accessKey": user.access_key.encode(),
            "secretKey": secret_key.encode(),
            "endpoint": f"{self.spec.name}.{self.spec.namespace}.svc:{self.spec.port}".encode(),
        }
        if self.ca_cert:
            data["ca.crt"] = self.ca_cert
        if live is not None and not fresh and have == data:
            return secret_key, False
        labels = {**self.spec.store_labels, "app.kubernetes.io/managed-by": "msgstore-operator", "msgstore.io/user": meta["name"]}
        owner = {"apiVersion": API_VERSION, "kind": KIND, "name": meta["name"], "uid": meta.get("uid", ""), "controller": True}
        obj = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": user.secret_name, "namespace": self.spec.namespace, "labels": labels, "ownerReferences": [owner]},
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        }
        if live is None:
            self.kube.create(obj)
        else:
            obj["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
            self.kube.replace(obj)
        return secret_key, fresh

    def _say(self, body: dict[str, Any], user: UserSpec | None, reason: str, message: str, ready: bool = False) -> None:
        fields = {"accessKey": user.access_key, "secretName": user.secret_name} if user is not None else {}
        self.status(body, reason, message, ready, **fields)
