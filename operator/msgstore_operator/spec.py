"""A MessageStore's spec, read into plain values with defaults and validated.

The CRD's OpenAPI schema rejects most bad values before they reach us; the checks that need
the whole configuration (ratio ordering, unknown keys in ``store.extra``) happen here, through
the store's own configuration validation, so the operator and the pods agree on what is valid.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from msgstore.store.config import HOT_KEYS, TYPED_KEYS, ConfigError, StoreConfig
from msgstore.wire import config_text

GROUP = "msgstore.io"
VERSION = "v1alpha1"
PLURAL = "messagestores"
KIND = "MessageStore"
API_VERSION = f"{GROUP}/{VERSION}"

DEFAULT_IMAGE = os.environ.get("MSGSTORE_IMAGE", "ghcr.io/msgstore/msgstore:0.1.0")
DATA_DIR = "/var/lib/msgstore"
CONFIG_DIR = "/etc/msgstore/config"
ADMIN_DIR = "/etc/msgstore/admin"
ROLES_DIR = "/etc/msgstore/roles"
TLS_DIR = "/etc/msgstore/tls"
METRICS_PORT_OFFSET = 1

# annotations (actions the user sets, bookkeeping we set)
MANUAL_DELETE = "msgstore.io/manual-delete"
RESTART = "msgstore.io/restart"
PAUSE = "msgstore.io/pause-reconciliation"
FORCE_SCALE_DOWN = "msgstore.io/force-scale-down"
CONFIG_CHECKSUM = "msgstore.io/config-checksum"
RESTART_HASH = "msgstore.io/restart-hash"
RENEW_CERTIFICATES = "msgstore.io/renew-certificates"

TYPED_STORE_KEYS = TYPED_KEYS  # spec.store fields of their own (the rest go in spec.store.extra)


@dataclass(frozen=True)
class Replication:
    """``spec.replication``: every node a group of ``replicas`` members (1: no replication)."""

    replicas: int = 1
    mode: str = "SYNC"
    in_sync_replicas: int = 2
    failover_after_s: int = 10
    unclean_election: bool = False

    @property
    def enabled(self) -> bool:
        return self.replicas > 1

    @property
    def lease_duration_s(self) -> int:
        """The group Lease's duration: a master unable to renew stops after 2/3 of it."""
        return max(3, self.failover_after_s)


@dataclass(frozen=True)
class Tls:
    """``spec.tls``: the certificates the pods serve with, the operator's or the user's."""

    secret_name: str | None = None  # the user's Secret (cert-manager's layout: tls.crt, tls.key, ca.crt)
    client_authentication: bool = False  # Required: clients present a certificate the CA signed
    validity_days: int = 90
    renew_before_days: int = 30

    @property
    def issued(self) -> bool:
        """The operator issues and renews the certificates (no Secret of the user's named)."""
        return not self.secret_name


class SpecError(ValueError):
    """The spec cannot be reconciled; ``field`` is the path of the offending field."""

    def __init__(self, field_: str, reason: str):
        super().__init__(f"{field_}: {reason}")
        self.field = field_
        self.reason = reason


@dataclass(frozen=True)
class Spec:
    name: str
    namespace: str
    uid: str
    replicas: int
    image: str
    image_pull_policy: str | None
    port: int
    resources: dict
    storage_size: str
    storage_class: str | None
    retention: dict
    placement: dict
    store: dict[str, str]  # every configured store key, as strings (what the ConfigMap holds)
    admin_secret: dict | None
    max_unavailable: int
    annotations: dict = field(default_factory=dict)
    replication: Replication = field(default_factory=Replication)
    access_point: bool = True  # spec.access.mode AccessPoint: routes name the address clients used (serve --access-point)
    service_type: str = "ClusterIP"
    service_annotations: dict = field(default_factory=dict)
    tls: Tls | None = None

    @property
    def pods(self) -> int:
        """Pods of the StatefulSet: every node's group members (pod i is member i % R of group i // R)."""
        return self.replicas * self.replication.replicas

    def group_of(self, ordinal: int) -> str:
        return f"{self.name}-g{ordinal // self.replication.replicas}"

    def groups(self, pods: int | None = None) -> dict[str, list[str]]:
        """Group name -> its members' pod names, in ordinal order."""
        out: dict[str, list[str]] = {}
        for i in range(self.pods if pods is None else pods):
            out.setdefault(self.group_of(i), []).append(self.pod_name(i))
        return out

    @property
    def tls_secret(self) -> str:
        """The Secret the pods' certificate comes from (tls.crt, tls.key, ca.crt)."""
        return (self.tls and self.tls.secret_name) or f"{self.name}-tls"

    @property
    def ca_secret(self) -> str:
        """The operator's CA for this store (ca.crt, ca.key); with spec.tls.secretName, none."""
        return f"{self.name}-ca"

    @property
    def ca_cert_secret(self) -> str:
        """The CA certificate alone (ca.crt), what clients verify the pods with."""
        return f"{self.name}-ca-cert"

    @property
    def tls_server_name(self) -> str:
        """The name members and the operator verify in a pod's certificate: they dial pods by
        address, and a certificate renewed for a new pod address may not have landed yet."""
        return f"{self.name}.{self.namespace}.svc"

    def tls_dns_names(self) -> list[str]:
        """The names the operator's server certificate holds: the client Service's, each pod's
        under the headless Service, and the pod names."""
        svc, ns, hl = self.name, self.namespace, self.headless
        names = [svc, f"{svc}.{ns}", f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local"]
        names += [f"*.{hl}.{ns}.svc", f"*.{hl}.{ns}.svc.cluster.local", hl, f"{hl}.{ns}.svc"]
        return names + [self.pod_name(i) for i in range(self.pods)]

    @property
    def roles_config_map(self) -> str:
        return f"{self.name}-roles"

    @property
    def store_account(self) -> str:
        """The store pods' ServiceAccount (a replicated store's pods renew their group's Lease)."""
        return f"{self.name}-store"

    @property
    def hot(self) -> dict[str, str]:
        return {k: v for k, v in self.store.items() if k in HOT_KEYS}

    @property
    def restart_only(self) -> dict[str, str]:
        return {k: v for k, v in self.store.items() if k not in HOT_KEYS}

    @property
    def labels(self) -> dict[str, str]:
        return {**self.selector, "app.kubernetes.io/managed-by": "msgstore-operator"}

    @property
    def selector(self) -> dict[str, str]:
        """The store's pods, and nothing else: the chart labels its operator and test pods with
        the same name and instance (a store named after its Helm release), so the component
        tells them apart."""
        return {**self.store_labels, "app.kubernetes.io/component": "store"}

    @property
    def store_labels(self) -> dict[str, str]:
        """What every object of this store carries, including PVCs and pods made before the
        component label existed (a StatefulSet's selector cannot change)."""
        return {"app.kubernetes.io/name": "msgstore", "app.kubernetes.io/instance": self.name}

    @property
    def selector_text(self) -> str:
        """The selector as a string (the scale subresource's ``status.selector``)."""
        return ",".join(f"{k}={v}" for k, v in sorted(self.selector.items()))

    @property
    def headless(self) -> str:
        return f"{self.name}-headless"

    @property
    def config_map(self) -> str:
        return f"{self.name}-config"

    def store_conf(self) -> str:
        """The ConfigMap's store.conf: ``key=value`` lines, as RocketMQ's broker.conf."""
        return "".join(f"{k}={v}\n" for k, v in sorted(self.store.items()))

    def config_checksum(self) -> str:
        return hashlib.sha256(self.store_conf().encode()).hexdigest()[:16]

    def pod_name(self, ordinal: int) -> str:
        return f"{self.name}-{ordinal}"


def parse(body: Mapping[str, Any]) -> Spec:
    meta = body.get("metadata", {})
    spec = body.get("spec") or {}
    store_spec = spec.get("store") or {}
    store: dict[str, str] = {}
    for key in TYPED_STORE_KEYS:
        if key in store_spec and store_spec[key] is not None:
            store[key] = config_text(store_spec[key])
    for key, value in (store_spec.get("extra") or {}).items():
        if key in store:
            raise SpecError(f"spec.store.extra.{key}", f"set it as spec.store.{key} instead")
        store[key] = config_text(value)
    try:
        StoreConfig(store)  # the whole configuration, exactly as the pods will validate it
    except ConfigError as e:
        where = f"spec.store.{e.key}" if e.key in TYPED_STORE_KEYS else f"spec.store.extra.{e.key}"
        raise SpecError(where, e.reason) from None
    if store.get("authorizationEnabled") == "true" and not spec.get("adminTokenSecret"):
        raise SpecError("spec.store.authorizationEnabled", "needs spec.adminTokenSecret (users are managed with the admin token)")
    storage = spec.get("storage") or {}
    replicas = int(spec.get("replicas", 1))
    if replicas < 1:
        raise SpecError("spec.replicas", "must be at least 1")
    pdb = spec.get("podDisruptionBudget") or {}
    replication = _replication(spec.get("replication") or {})
    if replication.enabled:
        for key in ("brokerRole", "haMasterAddress"):
            if key in store:
                raise SpecError(f"spec.store.extra.{key}", "set by the operator from spec.replication (leave it out)")
        store.setdefault("inSyncReplicas", str(replication.in_sync_replicas if replication.mode == "SYNC" else 1))
        store.setdefault("slaveReadEnable", "true")
    return Spec(
        name=meta["name"],
        namespace=meta.get("namespace", "default"),
        uid=meta.get("uid", ""),
        replicas=replicas,
        image=spec.get("image") or DEFAULT_IMAGE,
        image_pull_policy=spec.get("imagePullPolicy"),
        port=int(spec.get("port", 10911)),
        resources=dict(spec.get("resources") or {}),
        storage_size=str(storage.get("size", "10Gi")),
        storage_class=storage.get("storageClassName"),
        retention=dict(storage.get("retentionPolicy") or {}),
        placement=dict(spec.get("placement") or {}),
        store=store,
        admin_secret=spec.get("adminTokenSecret"),
        max_unavailable=int(pdb.get("maxUnavailable", 1)),
        annotations=dict(meta.get("annotations") or {}),
        replication=replication,
        tls=_tls(spec["tls"], int(spec.get("port", 10911))) if spec.get("tls") is not None else None,
        **_access(spec.get("access") or {}),
    )


def _tls(t: Mapping[str, Any], port: int) -> Tls:
    if port > 65533:
        raise SpecError("spec.port", f"must be at most 65533 with spec.tls (the pods' health port is port + 2), got {port}")
    auth = str(t.get("clientAuthentication", "None"))
    if auth not in ("None", "Required"):
        raise SpecError("spec.tls.clientAuthentication", f"must be None or Required, got {auth!r}")
    validity = int(t.get("validityDays", 90))
    before = int(t.get("renewBeforeDays", max(1, validity // 3)))
    if not 2 <= validity <= 3650:
        raise SpecError("spec.tls.validityDays", f"must be between 2 and 3650, got {validity}")
    if not 0 < before < validity:
        raise SpecError("spec.tls.renewBeforeDays", f"must be at least 1 and less than validityDays ({validity}), got {before}")
    return Tls(t.get("secretName") or None, auth == "Required", validity, before)


def _access(a: Mapping[str, Any]) -> dict[str, Any]:
    mode = str(a.get("mode", "AccessPoint"))
    if mode not in ("AccessPoint", "Direct"):
        raise SpecError("spec.access.mode", f"must be AccessPoint or Direct, got {mode!r}")
    kind = str(a.get("serviceType", "ClusterIP"))
    if kind not in ("ClusterIP", "NodePort", "LoadBalancer"):
        raise SpecError("spec.access.serviceType", f"must be ClusterIP, NodePort or LoadBalancer, got {kind!r}")
    return {"access_point": mode == "AccessPoint", "service_type": kind, "service_annotations": dict(a.get("serviceAnnotations") or {})}


def _replication(r: Mapping[str, Any]) -> Replication:
    replicas = int(r.get("replicas", 1))
    if replicas < 1:
        raise SpecError("spec.replication.replicas", "must be at least 1")
    mode = str(r.get("mode", "SYNC"))
    if mode not in ("SYNC", "ASYNC"):
        raise SpecError("spec.replication.mode", f"must be SYNC or ASYNC, got {mode!r}")
    isr = int(r.get("inSyncReplicas", min(2, replicas)))
    if not 1 <= isr <= replicas:
        raise SpecError("spec.replication.inSyncReplicas", f"must be between 1 and replicas ({replicas}), got {isr}")
    after = int(r.get("failoverAfterSeconds", 10))
    if after < 1:
        raise SpecError("spec.replication.failoverAfterSeconds", "must be at least 1")
    unclean = r.get("uncleanElection", False)
    if not isinstance(unclean, bool):
        raise SpecError("spec.replication.uncleanElection", f"must be true or false, got {unclean!r}")
    return Replication(replicas, mode, isr, after, unclean)


_UNITS = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "": 1,
}


def quantity(text: str) -> int:
    """A storage quantity (``10Gi``, ``500M``, ``1.5Ti``) in bytes."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?", str(text).strip())
    if not m:
        raise ValueError(f"not a storage quantity: {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2) or ""])


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]
