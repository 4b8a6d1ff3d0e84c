"""The MessageStore's conditions and the operator's recent events, when the console runs with
``--kubernetes NAMESPACE/NAME`` (in the cluster with its ServiceAccount, or with the
kubeconfig of whoever runs it). Read-only: the console changes nothing on Kubernetes."""

from __future__ import annotations

from typing import Any

_api: Any = None


def _clients() -> tuple[Any, Any]:
    global _api
    if _api is None:
        try:
            from kubernetes import client, config
        except ImportError as e:  # (the operator extra brings it)
            raise RuntimeError("the kubernetes package is not installed: pip install 'msgstore[operator]'") from e
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        _api = (client.CustomObjectsApi(), client.CoreV1Api())
    return _api


def store_state(target: str) -> dict[str, Any]:
    namespace, _, name = target.partition("/")
    if not namespace or not name:
        raise ValueError(f"--kubernetes {target!r}: give NAMESPACE/NAME")
    custom, core = _clients()
    obj = custom.get_namespaced_custom_object("msgstore.io", "v1alpha1", namespace, "messagestores", name)
    status = obj.get("status") or {}
    events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name},involvedObject.kind=MessageStore").items
    events = sorted(events, key=lambda e: str(e.last_timestamp or e.event_time or e.metadata.creation_timestamp or ""), reverse=True)[:30]
    conditions = status.get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    return {
        "name": name,
        "namespace": namespace,
        "phase": "" if ready is None else ("Ready" if ready.get("status") == "True" else f"not ready: {ready.get('reason', '')}"),
        "replicas": f"{status.get('readyReplicas', 0)}/{(obj.get('spec') or {}).get('replicas', '')}",
        "conditions": conditions,
        "events": [
            {
                "when": str(e.last_timestamp or e.event_time or e.metadata.creation_timestamp or ""),
                "type": e.type,
                "reason": e.reason,
                "message": e.message,
                "count": e.count or 1,
            }
            for e in events
        ],
    }
