"""The few Kubernetes API calls the operator makes, over the official client's ApiClient.

Every call names its (API group, resource, verb) in :data:`VERBS`, which a test compares with
the operator's RBAC Role: the Role grants exactly what the code uses. Objects travel as plain
JSON dicts (no generated models) and patches are JSON merge patches.
"""

from __future__ import annotations

import datetime
import json
import logging
from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

log = logging.getLogger(__name__)

# (group, resource, verb) of every call below; "" is the core group
VERBS: frozenset[tuple[str, str, str]] = frozenset(
    {
        ("msgstore.io", "messagestores", "get"),
        ("msgstore.io", "messagestores", "list"),
        ("msgstore.io", "messagestores", "patch"),
        ("msgstore.io", "messagestores/status", "patch"),
        # MessageStoreUser/Topic/Group resources (declared.py): read in the store's pass, their status written
        ("msgstore.io", "messagestoreusers", "list"),
        ("msgstore.io", "messagestoreusers/status", "patch"),
        ("msgstore.io", "messagestoretopics", "list"),
        ("msgstore.io", "messagestoretopics/status", "patch"),
        ("msgstore.io", "messagestoregroups", "list"),
        ("msgstore.io", "messagestoregroups/status", "patch"),
        ("apps", "statefulsets", "get"),
        ("apps", "statefulsets", "create"),
        ("apps", "statefulsets", "patch"),
        ("apps", "statefulsets", "delete"),
        ("", "services", "get"),
        ("", "services", "create"),
        ("", "services", "patch"),
        ("", "configmaps", "get"),
        ("", "configmaps", "create"),
        ("", "configmaps", "patch"),
        ("policy", "poddisruptionbudgets", "get"),
        ("policy", "poddisruptionbudgets", "create"),
        ("policy", "poddisruptionbudgets", "patch"),
        ("", "pods", "list"),
        ("", "pods", "delete"),
        ("", "persistentvolumeclaims", "list"),
        ("", "persistentvolumeclaims", "patch"),
        ("", "secrets", "get"),
        # spec.tls: the store's CA and its pods' certificate (tls.py)
        ("", "secrets", "create"),
        ("", "secrets", "update"),
        ("", "events", "create"),
        ("", "events", "list"),
        # replicated stores: each group's Lease (the arbiter of who is master), and the pods'
        # ServiceAccount with a Role to renew it (granting get/update needs holding them)
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "update"),
        ("coordination.k8s.io", "leases", "patch"),
        ("", "serviceaccounts", "get"),
        ("", "serviceaccounts", "create"),
        ("", "serviceaccounts", "patch"),
        ("rbac.authorization.k8s.io", "roles", "get"),
        ("rbac.authorization.k8s.io", "roles", "create"),
        ("rbac.authorization.k8s.io", "roles", "patch"),
        ("rbac.authorization.k8s.io", "rolebindings", "get"),
        ("rbac.authorization.k8s.io", "rolebindings", "create"),
        ("rbac.authorization.k8s.io", "rolebindings", "patch"),
    }
)
# what Kopf itself needs: watching (and its progress annotations, under messagestores patch)
KOPF_VERBS: frozenset[tuple[str, str, str]] = frozenset(
    {
        ("msgstore.io", "messagestores", "list"),
        ("msgstore.io", "messagestores", "watch"),
        ("msgstore.io", "messagestoreusers", "list"),
        ("msgstore.io", "messagestoreusers", "watch"),
        ("msgstore.io", "messagestoretopics", "list"),
        ("msgstore.io", "messagestoretopics", "watch"),
        ("msgstore.io", "messagestoregroups", "list"),
        ("msgstore.io", "messagestoregroups", "watch"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
    }
)
# what the API server's admission asks of us without a call of our own: owner references with
# blockOwnerDeletion need permission to set finalizers on the owner (OwnerReferencesPermissionEnforcement)
ADMISSION_VERBS: frozenset[tuple[str, str, str]] = frozenset(
    {
        ("msgstore.io", "messagestores/finalizers", "update"),
    }
)

PLURALS = {
    "ConfigMap": ("", "v1", "configmaps"),
    "Service": ("", "v1", "services"),
    "StatefulSet": ("apps", "v1", "statefulsets"),
    "PodDisruptionBudget": ("policy", "v1", "poddisruptionbudgets"),
    "Pod": ("", "v1", "pods"),
    "Secret": ("", "v1", "secrets"),
    "Event": ("", "v1", "events"),
    "PersistentVolumeClaim": ("", "v1", "persistentvolumeclaims"),
    "MessageStore": ("msgstore.io", "v1alpha1", "messagestores"),
    "MessageStoreUser": ("msgstore.io", "v1alpha1", "messagestoreusers"),
    "MessageStoreTopic": ("msgstore.io", "v1alpha1", "messagestoretopics"),
    "MessageStoreGroup": ("msgstore.io", "v1alpha1", "messagestoregroups"),
    "Lease": ("coordination.k8s.io", "v1", "leases"),
    "ServiceAccount": ("", "v1", "serviceaccounts"),
    "Role": ("rbac.authorization.k8s.io", "v1", "roles"),
    "RoleBinding": ("rbac.authorization.k8s.io", "v1", "rolebindings"),
}


class NotFound(Exception):
    pass


class ApiError(ApiException):
    """A refused call, with the API server's own message (``message``) for conditions and Events."""

    def __init__(self, status: int, reason: str, message: str):
        super().__init__(status=status, reason=reason)
        self.message = message


def _path(group: str, version: str, plural: str, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
    base = f"/api/{version}" if group == "" else f"/apis/{group}/{version}"
    path = f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"
    if name:
        path += f"/{name}"
    if sub:
        path += f"/{sub}"
    return path


class Kube:
    """A namespaced JSON client; :func:`connect` builds one for in-cluster or kubeconfig use."""

    def __init__(self, api_client: kubernetes.client.ApiClient):
        self.api = api_client

    def _call(
        self,
        verb: str,
        kind: str,
        method: str,
        path: str,
        body: Any = None,
        query: list | None = None,
        content_type: str = "application/json",
        sub: str | None = None,
    ) -> dict[str, Any]:
        group, _, plural = PLURALS[kind]
        resource = f"{plural}/{sub}" if sub else plural
        assert (group, resource, verb) in VERBS, f"{verb} {group}/{resource} is not in VERBS (and so not in the Role)"
        method_, url, headers, body_, post = self.api.param_serialize(
            method,
            path,
            query_params=query or [],
            body=body,
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        resp = self.api.call_api(method_, url, header_params=headers, body=body_, post_params=post, _request_timeout=30)
        data = resp.read() if hasattr(resp, "read") else resp.data
        if resp.status == 404:
            raise NotFound(path)
        if resp.status >= 400:
            try:
                message = json.loads(data).get("message", "")
            except (ValueError, AttributeError):
                message = data[:500].decode(errors="replace") if isinstance(data, bytes) else str(data)[:500]
            raise ApiError(resp.status, f"{method} {path}: {data[:500]!r}", message)
        return json.loads(data) if data else {}

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        g, v, p = PLURALS[kind]
        return self._call("get", kind, "GET", _path(g, v, p, namespace, name))

    def get_or_none(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.get(kind, namespace, name)
        except NotFound:
            return None

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        g, v, p = PLURALS[obj["kind"]]
        return self._call("create", obj["kind"], "POST", _path(g, v, p, obj["metadata"]["namespace"]), body=obj)

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT the whole object; its ``metadata.resourceVersion`` makes it a compare-and-swap
        (a 409 ApiError when it changed meanwhile)."""
        g, v, p = PLURALS[obj["kind"]]
        meta = obj["metadata"]
        return self._call("update", obj["kind"], "PUT", _path(g, v, p, meta["namespace"], meta["name"]), body=obj)

    def patch(self, kind: str, namespace: str, name: str, patch: dict[str, Any], sub: str | None = None) -> dict[str, Any]:
        g, v, p = PLURALS[kind]
        return self._call(
            "patch", kind, "PATCH", _path(g, v, p, namespace, name, sub), body=patch, content_type="application/merge-patch+json", sub=sub
        )

    def list(
        self, kind: str, namespace: str | None, labels: dict[str, str] | None = None, fields: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """Objects of a kind in a namespace (every namespace with None), by labels and fields."""
        g, v, p = PLURALS[kind]
        query = []
        if labels:
            query.append(("labelSelector", ",".join(f"{k}={val}" for k, val in sorted(labels.items()))))
        if fields:
            query.append(("fieldSelector", ",".join(f"{k}={val}" for k, val in sorted(fields.items()))))
        items = self._call("list", kind, "GET", _path(g, v, p, namespace), query=query).get("items", [])
        # filter here too: a selector-ignorant API (an emulator) must not make us act on strangers
        return [i for i in items if all((i.get("metadata", {}).get("labels") or {}).get(k) == val for k, val in (labels or {}).items())]

    def delete(self, kind: str, namespace: str, name: str, orphan: bool = False) -> None:
        """Delete; ``orphan`` leaves what the object owns in place (a StatefulSet's pods)."""
        g, v, p = PLURALS[kind]
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Orphan"} if orphan else None
        try:
            self._call("delete", kind, "DELETE", _path(g, v, p, namespace, name), body=body)
        except NotFound:
            pass

    def event(self, obj: dict[str, Any], etype: str, reason: str, message: str) -> None:
        """Post a core/v1 Event about ``obj`` (from any thread, unlike ``kopf.event``)."""
        meta = obj["metadata"]
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.create(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{meta['name']}.", "namespace": meta.get("namespace", "default")},
                "involvedObject": {
                    "apiVersion": obj.get("apiVersion", ""),
                    "kind": obj.get("kind", ""),
                    "name": meta["name"],
                    "namespace": meta.get("namespace", "default"),
                    "uid": meta.get("uid", ""),
                },
                "type": etype,
                "reason": reason,
                "message": message[:1024],
                "source": {"component": "msgstore-operator"},
                "reportingComponent": "msgstore-operator",
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            }
        )


def connect(host: str | None = None, token: str | None = None, verify_ssl: bool = True) -> Kube:
    """In-cluster credentials, else the kubeconfig, else an explicit host (tests)."""
    if host:
        cfg = kubernetes.client.Configuration()
        cfg.host = host
        cfg.verify_ssl = verify_ssl
        if token:
            cfg.api_key = {"authorization": f"Bearer {token}"}
        return Kube(kubernetes.client.ApiClient(cfg))
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()
    return Kube(kubernetes.client.ApiClient())
