"""The objects a MessageStore needs, as plain dicts (pure functions: spec in, manifests out).

StatefulSet with OnDelete updates (the operator decides when a pod goes), a headless Service
for peer discovery, a client Service, the ConfigMap with store.conf and a PodDisruptionBudget,
all owned by the MessageStore.
"""

from __future__ import annotations

import json
from typing import Any

from .replication import roles_document
from .spec import ADMIN_DIR, API_VERSION, CONFIG_CHECKSUM, CONFIG_DIR, DATA_DIR, KIND, RESTART_HASH, ROLES_DIR, TLS_DIR, Spec, digest

UID = 10001


SERVICE_ANNOTATIONS = "msgstore.io/service-annotations"


def owner(spec: Spec) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": spec.name,
            "uid": spec.uid or "unknown",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def _meta(spec: Spec, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": spec.namespace, "labels": dict(spec.labels), "ownerReferences": owner(spec)}


def config_map(spec: Spec) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(spec, spec.config_map), "data": {"store.conf": spec.store_conf()}}


def roles_config_map(spec: Spec, roles: dict[str, Any]) -> dict[str, Any]:
    """Which member of each group is master, at what epoch, and where: every pod reads it when
    it starts (an old master comes back as a follower) and follows its changes."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(spec, spec.roles_config_map),
        "data": {"roles.json": json.dumps(roles, sort_keys=True, indent=1)},
    }


def store_service_account(spec: Spec) -> dict[str, Any]:
    """A replicated store's pods: each master renews its group's Lease (ha/lease.py)."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(spec, spec.store_account)}


def lease_role(spec: Spec, groups: list[str]) -> dict[str, Any]:
    """Exactly what a store pod does with the API: read and renew its group's Lease."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(spec, spec.store_account),
        "rules": [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": sorted(groups), "verbs": ["get", "update"]}
        ],
    }


def lease_role_binding(spec: Spec) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(spec, spec.store_account),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": spec.store_account},
        "subjects": [{"kind": "ServiceAccount", "name": spec.store_account, "namespace": spec.namespace}],
    }


def lease(spec: Spec, group: str, holder: str, epoch: int, renew_time: str) -> dict[str, Any]:
    """A group's Lease as the operator first creates it: its master at its epoch."""
    from msgstore.ha.lease import EPOCH

    meta = _meta(spec, group)
    meta["annotations"] = {EPOCH: str(epoch)}
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta,
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": spec.replication.lease_duration_s,
            "acquireTime": renew_time,
            "renewTime": renew_time,
            "leaseTransitions": 0,
        },
    }


def headless_service(spec: Spec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(spec, spec.headless),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": dict(spec.selector),
            "ports": [{"name": "grpc", "port": spec.port, "targetPort": "grpc", "protocol": "TCP"}],
        },
    }


def client_service(spec: Spec) -> dict[str, Any]:
    """Where clients connect: every pod behind it; with spec.access AccessPoint, routes name it."""
    meta = _meta(spec, spec.name)
    # which of its annotations came from spec.access.serviceAnnotations: one taken out of the
    # spec is removed from the Service (others', a cloud controller's, are left alone)
    meta["annotations"] = {
        **meta.get("annotations", {}),
        **spec.service_annotations,
        SERVICE_ANNOTATIONS: ",".join(sorted(spec.service_annotations)),
    }
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": spec.service_type,
            "selector": dict(spec.selector),
            "ports": [
                {"name": "grpc", "port": spec.port, "targetPort": "grpc", "protocol": "TCP"},
                {"name": "metrics", "port": spec.port + 1, "targetPort": "metrics", "protocol": "TCP"},
            ],
        },
    }


def pod_disruption_budget(spec: Spec) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(spec, spec.name),
        "spec": {"maxUnavailable": spec.max_unavailable, "selector": {"matchLabels": dict(spec.selector)}},
    }


def container_args(spec: Spec) -> list[str]:
    dns = f"{spec.headless}.{spec.namespace}.svc.cluster.local:{spec.port}"
    args = [
        "serve",
        "--data-dir",
        DATA_DIR,
        "--host",
        "0.0.0.0",
        "--port",
        str(spec.port),
        "--config",
        f"{CONFIG_DIR}/store.conf",
        "--peers-dns",
        dns,
        "--node-name",
        "$(POD_NAME)",
        "--advertise",
        f"$(POD_IP):{spec.port}",
        "--metrics-port",
        str(spec.port + 1),
        "--metrics-host",
        "0.0.0.0",
        "--log-format",
        "json",
    ]
    if spec.admin_secret:
        args += ["--admin-token-file", f"{ADMIN_DIR}/{spec.admin_secret.get('key', 'token')}"]
    if spec.replication.enabled:
        args += ["--roles-file", f"{ROLES_DIR}/roles.json"]
    if spec.access_point:
        args += ["--access-point"]
    if spec.tls is not None:
        args += ["--tls-cert", f"{TLS_DIR}/tls.crt", "--tls-key", f"{TLS_DIR}/tls.key", "--tls-ca", f"{TLS_DIR}/ca.crt"]
        args += ["--tls-server-name", spec.tls_server_name, "--health-port", str(health_port(spec))]
        if spec.tls.client_authentication:
            args += ["--tls-client-ca", f"{TLS_DIR}/ca.crt"]
    return args


def health_port(spec: Spec) -> int:
    """With TLS, the kubelet's gRPC probes go to a plain-text health-only port (they cannot do TLS)."""
    return spec.port + 2


def pod_template(spec: Spec) -> dict[str, Any]:
    grpc_probe = {"grpc": {"port": health_port(spec) if spec.tls is not None else spec.port}}
    container: dict[str, Any] = {
        "name": "msgstore",
        "image": spec.image,
        "command": ["msgstore"],
        "args": container_args(spec),
        "env": [
            {"name": n, "valueFrom": {"fieldRef": {"fieldPath": p}}}
            for n, p in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace"), ("POD_IP", "status.podIP"))
        ],
        "ports": [
            {"name": "grpc", "containerPort": spec.port, "protocol": "TCP"},
            {"name": "metrics", "containerPort": spec.port + 1, "protocol": "TCP"},
        ],
        "resources": spec.resources or {"requests": {"cpu": "500m", "memory": "1Gi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
        },
        # recovery of a big store may take minutes: the startup probe allows 30 before liveness begins
        "startupProbe": {**grpc_probe, "periodSeconds": 5, "failureThreshold": 360},
        "livenessProbe": {**grpc_probe, "periodSeconds": 10, "failureThreshold": 6, "timeoutSeconds": 5},
        "readinessProbe": {**grpc_probe, "periodSeconds": 5, "failureThreshold": 2, "timeoutSeconds": 3},
        # a store that cannot start says why in its last log lines: the kubelet keeps them in the
        # container's lastState, and the operator quotes them in PodsPending
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_DIR},
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    if spec.image_pull_policy:
        container["imagePullPolicy"] = spec.image_pull_policy
    volumes: list[dict[str, Any]] = [{"name": "config", "configMap": {"name": spec.config_map}}, {"name": "tmp", "emptyDir": {}}]
    if spec.admin_secret:
        container["volumeMounts"].append({"name": "admin-token", "mountPath": ADMIN_DIR, "readOnly": True})
        volumes.append({"name": "admin-token", "secret": {"secretName": spec.admin_secret["name"], "defaultMode": 0o440}})
    if spec.tls is not None:
        container["ports"].append({"name": "health", "containerPort": health_port(spec), "protocol": "TCP"})
        container["volumeMounts"].append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
        volumes.append({"name": "tls", "secret": {"secretName": spec.tls_secret, "defaultMode": 0o440}})
    if spec.replication.enabled:
        container["volumeMounts"].append({"name": "roles", "mountPath": ROLES_DIR, "readOnly": True})
        volumes.append({"name": "roles", "configMap": {"name": spec.roles_config_map}})
    pod_spec: dict[str, Any] = {
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": UID,
            "runAsGroup": UID,
            "fsGroup": UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "terminationGracePeriodSeconds": 60,
        "enableServiceLinks": False,
        # an unreplicated store never calls the Kubernetes API; a replicated one renews its group's Lease
        "automountServiceAccountToken": spec.replication.enabled,
        "containers": [container],
        "volumes": volumes,
    }
    if spec.replication.enabled:
        pod_spec["serviceAccountName"] = spec.store_account
    p = spec.placement
    for key in ("nodeSelector", "tolerations", "affinity", "topologySpreadConstraints", "priorityClassName"):
        if p.get(key):
            pod_spec[key] = p[key]
    if spec.replication.enabled and not p.get("affinity"):
        # a group's members on different machines, where there are enough (a lost machine then
        # takes one copy of each message, not all of them)
        pod_spec["affinity"] = {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {"labelSelector": {"matchLabels": dict(spec.selector)}, "topologyKey": "kubernetes.io/hostname"},
                    }
                ]
            }
        }
    return {"metadata": {"labels": dict(spec.labels)}, "spec": pod_spec}


def restart_hash(spec: Spec, nonce: str = "") -> str:
    """What a pod must be restarted for: its template, restart-only settings, a restart request
    (``nonce``, from ``msgstore.io/restart``)."""
    return digest({"template": pod_template(spec), "restart_only": spec.restart_only, "nonce": nonce})


def stateful_set(spec: Spec, replicas: int | None = None, nonce: str = "") -> dict[str, Any]:
    template = pod_template(spec)
    template["metadata"]["annotations"] = {CONFIG_CHECKSUM: spec.config_checksum(), RESTART_HASH: restart_hash(spec, nonce)}
    claim_spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": spec.storage_size}}}
    if spec.storage_class:
        claim_spec["storageClassName"] = spec.storage_class
    retention = {"whenDeleted": spec.retention.get("whenDeleted", "Retain"), "whenScaled": spec.retention.get("whenScaled", "Retain")}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(spec, spec.name),
        "spec": {
            "serviceName": spec.headless,
            "replicas": spec.pods if replicas is None else replicas,
            "podManagementPolicy": "Parallel",  # nodes are independent: no need to start them in order
            "updateStrategy": {"type": "OnDelete"},  # the operator rolls pods itself, one at a time
            "selector": {"matchLabels": dict(spec.selector)},
            "persistentVolumeClaimRetentionPolicy": retention,
            "template": template,
            "volumeClaimTemplates": [
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {"name": "data", "labels": dict(spec.selector)},
                    "spec": claim_spec,
                }
            ],
        },
    }


def all_objects(spec: Spec, replicas: int | None = None, nonce: str = "", roles: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """``replicas``: pods of the StatefulSet; ``roles``: the roles document (replicated stores)."""
    objects = [config_map(spec)]
    if spec.replication.enabled:
        objects.append(roles_config_map(spec, roles if roles is not None else roles_document(spec, {})))
        objects += [store_service_account(spec), lease_role(spec, list(spec.groups(replicas))), lease_role_binding(spec)]
    return [*objects, headless_service(spec), client_service(spec), pod_disruption_budget(spec), stateful_set(spec, replicas, nonce)]
