"""The MessageStore CustomResourceDefinition, built here so that ``spec.store`` comes from the
store's own settings table (``msgstore.store.config.KEYS``): type, bounds, choices, patterns,
description and the ratio-order rules. ``scripts/render_deploy.py`` writes it into the chart
(and the chart's values schema's ``store.config``); a test fails when the files are stale.
"""

from __future__ import annotations

from typing import Any

from msgstore.store.config import KEYS, RATIO_ORDER, TYPED_KEYS, json_schema

from .spec import GROUP, KIND, PLURAL, VERSION

QUANTITY = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$"


def _free_form(description: str) -> dict[str, Any]:
    return {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "description": description}


def store_properties() -> dict[str, Any]:
    """``spec.store``: every typed setting, and ``extra`` for the rest (by reference name)."""
    props = {key: json_schema(key) for key in TYPED_KEYS}
    props["extra"] = {
        "type": "object",
        "description": "Other store keys, by reference name (values as strings).",
        "additionalProperties": {"type": "string"},
    }
    return props


def ratio_rules() -> list[dict[str, str]]:
    return [
        {"rule": f"!has(self.{a}) || !has(self.{b}) || self.{a} >= self.{b}", "message": f"{a} must be >= {b}"}
        for a, b in zip(RATIO_ORDER, RATIO_ORDER[1:])
    ]


# users are made with the admin token: a store checking callers without one would have an open admin API
SECRET_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"  # a DNS-1123 subdomain
# followers of a replicated store dial their master as their own template says: a roll that
# switches TLS would leave restarted followers unable to reach the old master (and the masters
# are restarted last, after a switchover to a connected follower)
TLS_SWITCH_RULE = {
    "rule": "!has(self.replication) || !has(self.replication.replicas) || self.replication.replicas <= 1 || "
    "(has(self.tls) == has(oldSelf.tls) && (!has(self.tls) || !has(oldSelf.tls) || "
    "(has(self.tls.clientAuthentication) ? self.tls.clientAuthentication : 'None') == "
    "(has(oldSelf.tls.clientAuthentication) ? oldSelf.tls.clientAuthentication : 'None')))",
    "message": "spec.tls cannot be switched on or off, nor spec.tls.clientAuthentication changed, on a replicated store: "
    "members would dial each other the other way during the roll (set it when creating the store)",
}
TLS_PORT_RULE = {
    "rule": "!has(self.tls) || !has(self.port) || self.port <= 65533",
    "message": "spec.port must be at most 65533 with spec.tls (the pods' health port is port + 2)",
}
# pods map to replica groups by the members per group (pod i is in group i // members): a change
# would make a follower of one group's log a member of another, and adding or removing
# replication on a store with data turns independent nodes into followers of each other
MEMBERS_FIXED_RULE = {
    "rule": "(has(self.replication) && has(self.replication.replicas) ? self.replication.replicas : 1) == "
    "(has(oldSelf.replication) && has(oldSelf.replication.replicas) ? oldSelf.replication.replicas : 1)",
    "message": "spec.replication.replicas cannot change, nor replication be switched on or off, on an existing store: pods "
    "map to replica groups by it, so a change would put one group's log in another (make another MessageStore)",
}
# a StatefulSet's volumeClaimTemplates cannot change, and a bound volume keeps its class
STORAGE_CLASS_RULE = {
    "rule": "(has(self.storage) && has(self.storage.storageClassName) ? self.storage.storageClassName : '') == "
    "(has(oldSelf.storage) && has(oldSelf.storage.storageClassName) ? oldSelf.storage.storageClassName : '')",
    "message": "spec.storage.storageClassName cannot change: volumes keep the class they were made with (to start again "
    "with another, delete the MessageStore and its PersistentVolumeClaims, data-<name>-N, and make it again)",
}


def fixed_size_rules() -> list[dict[str, str]]:
    """Segments keep the size they were written with: a store refuses commit-log segments of
    another size (as RocketMQ's MappedFileQueue.load does), so a change crash-loops every pod,
    and consume-queue files of another size are resized and their queues rebuilt. Nor may the
    sizes come in through ``extra``, past these rules."""
    rules = []
    for key in sorted(k for k in TYPED_KEYS if KEYS[k].fixed):
        d = KEYS[key].default
        rules.append(
            {
                "rule": f"(has(self.store) && has(self.store.{key}) ? self.store.{key} : {d}) == "
                f"(has(oldSelf.store) && has(oldSelf.store.{key}) ? oldSelf.store.{key} : {d})",
                "message": f"spec.store.{key} cannot change: segments keep the size they were written with (a store refuses "
                "commit-log segments of another size; consume queues of another size are rebuilt)",
            }
        )
        rules.append(
            {
                "rule": f"!has(self.store) || !has(self.store.extra) || !('{key}' in self.store.extra)",
                "message": f"spec.store.extra.{key}: set it as spec.store.{key}",
            }
        )
    return rules


AUTHORIZATION_RULE = {
    "rule": "!has(self.store) || !has(self.store.authorizationEnabled) || !self.store.authorizationEnabled || has(self.adminTokenSecret)",
    "message": "spec.store.authorizationEnabled needs spec.adminTokenSecret (users are managed with the admin token)",
}


def spec_schema() -> dict[str, Any]:
    retention = {"type": "string", "enum": ["Retain", "Delete"]}
    return {
        "type": "object",
        "x-kubernetes-validations": [
            AUTHORIZATION_RULE,
            TLS_SWITCH_RULE,
            TLS_PORT_RULE,
            MEMBERS_FIXED_RULE,
            STORAGE_CLASS_RULE,
            *fixed_size_rules(),
        ],
        "properties": {
            "replicas": {
                "type": "integer",
                "minimum": 1,
                "maximum": 64,
                "default": 1,
                "description": "Store nodes. Scaling down is refused while a node to remove holds unconsumed messages.",
            },
            "image": {"type": "string", "description": "Store image (default the operator's own image)."},
            "imagePullPolicy": {"type": "string", "enum": ["Always", "IfNotPresent", "Never"]},
            "port": {"type": "integer", "minimum": 1024, "maximum": 65535, "default": 10911},
            "resources": _free_form("Container resources (a core/v1 ResourceRequirements)."),
            "storage": {
                "type": "object",
                "properties": {
                    "size": {
                        "type": "string",
                        "pattern": QUANTITY,
                        "default": "10Gi",
                        "description": "Volume size per node; growing it expands the volumes where the StorageClass allows.",
                    },
                    "storageClassName": {"type": "string"},
                    "retentionPolicy": {"type": "object", "properties": {"whenDeleted": retention, "whenScaled": retention}},
                },
            },
            "placement": {
                "type": "object",
                "properties": {
                    "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"}},
                    "tolerations": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                    "affinity": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "topologySpreadConstraints": {
                        "type": "array",
                        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    },
                    "priorityClassName": {"type": "string"},
                },
            },
            "store": {
                "type": "object",
                "description": "Store settings (reference names); hot ones apply without a restart.",
                "x-kubernetes-validations": ratio_rules(),
                "properties": store_properties(),
            },
            "adminTokenSecret": {
                "type": "object",
                "required": ["name"],
                "description": "A Secret holding the admin token the store requires on its admin API.",
                "properties": {"name": {"type": "string"}, "key": {"type": "string", "default": "token"}},
            },
            "podDisruptionBudget": {"type": "object", "properties": {"maxUnavailable": {"type": "integer", "minimum": 0, "default": 1}}},
            "replication": replication_schema(),
            "access": access_schema(),
            "tls": tls_schema(),
        },
    }


def tls_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "TLS for client and replication traffic. Without secretName the operator issues a CA (Secret "
        "<name>-ca) and the pods' certificate (Secret <name>-tls: tls.crt, tls.key, ca.crt; names: the client Service, "
        "each pod's name and address) and renews it before it expires; pods pick a renewal up without a restart.",
        "x-kubernetes-validations": [
            {
                "rule": "!has(self.renewBeforeDays) || self.renewBeforeDays < (has(self.validityDays) ? self.validityDays : 90)",
                "message": "spec.tls.renewBeforeDays must be less than spec.tls.validityDays",
            },
            {
                "rule": "!has(self.secretName) || (!has(self.validityDays) && !has(self.renewBeforeDays))",
                "message": "spec.tls.validityDays and renewBeforeDays are for certificates the operator issues: with "
                "spec.tls.secretName, whoever writes that Secret (cert-manager) renews it",
            },
        ],
        "properties": {
            "secretName": {
                "type": "string",
                "pattern": SECRET_NAME,
                "maxLength": 253,
                "description": "Use this Secret instead (cert-manager's layout: tls.crt, tls.key, ca.crt). Its certificate "
                "must name <name>.<namespace>.svc: members and the operator verify that name.",
            },
            "clientAuthentication": {
                "type": "string",
                "enum": ["None", "Required"],
                "default": "None",
                "description": "Required: every client presents a certificate the CA signed (mutual TLS).",
            },
            "validityDays": {
                "type": "integer",
                "minimum": 2,
                "maximum": 3650,
                "description": "Lifetime of an issued certificate (default 90; the CA's is ten years).",
            },
            "renewBeforeDays": {
                "type": "integer",
                "minimum": 1,
                "description": "Renew this long before it expires (default a third of validityDays).",
            },
        },
    }


def access_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "How clients reach the store: the client Service in front of every pod, and whether routes name it.",
        "properties": {
            "mode": {
                "type": "string",
                "enum": ["AccessPoint", "Direct"],
                "default": "AccessPoint",
                "description": "AccessPoint: routes name the address a client used (the Service, a port-forward, a load "
                "balancer) and the pod it reaches forwards each call to the queue's master; clients outside the "
                "cluster and RocketMQ 5 clients need only that address, and a failover is latency, not errors. "
                "Direct: routes name each pod's own address (one hop less; clients must reach every pod).",
            },
            "serviceType": {
                "type": "string",
                "enum": ["ClusterIP", "NodePort", "LoadBalancer"],
                "default": "ClusterIP",
                "description": "The client Service's type.",
            },
            "serviceAnnotations": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "Annotations of the client Service (a cloud load balancer's settings).",
            },
        },
    }


def values_access() -> dict[str, Any]:
    """The chart's ``store.access`` in values.schema.json: spec.access's fields."""
    return {**access_schema(), "additionalProperties": False}


def values_tls() -> dict[str, Any]:
    """The chart's ``store.tls`` in values.schema.json: ``enabled`` and spec.tls's fields."""
    schema = tls_schema()
    schema.pop("x-kubernetes-validations", None)
    schema["properties"] = {"enabled": {"type": "boolean", "description": "Render spec.tls."}, **schema["properties"]}
    return {**schema, "additionalProperties": False}


def replication_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "Every node becomes a replica group of `replicas` members (a master and its followers, each with its "
        "own volume); the operator fails over, to a member of the master's in-sync set, when a master is not Ready for "
        "failoverAfterSeconds and can no longer acknowledge (it was fenced, or its group's Lease expired).",
        "x-kubernetes-validations": [
            {"rule": "!has(self.inSyncReplicas) || self.inSyncReplicas <= self.replicas", "message": "inSyncReplicas must be <= replicas"}
        ],
        "properties": {
            "replicas": {
                "type": "integer",
                "minimum": 1,
                "maximum": 7,
                "default": 1,
                "description": "Members per group, master included (1: no replication).",
            },
            "mode": {
                "type": "string",
                "enum": ["SYNC", "ASYNC"],
                "default": "SYNC",
                "description": "SYNC: a put is acknowledged once inSyncReplicas members hold it; ASYNC: after the master's own flush.",
            },
            "inSyncReplicas": {"type": "integer", "minimum": 1, "description": "Members, master included, holding a SYNC put (default 2)."},
            "failoverAfterSeconds": {
                "type": "integer",
                "minimum": 1,
                "default": 10,
                "description": "How long a master may be not Ready; also its Lease's duration (at least 3 s): a master that "
                "cannot renew it stops acknowledging after two thirds of it.",
            },
            "uncleanElection": {
                "type": "boolean",
                "default": False,
                "description": "Elect a follower outside the in-sync set when none in it is ready (it may lack acknowledged "
                "messages; RocketMQ's enableElectUncleanMaster). Reported as an UncleanElection Warning.",
            },
        },
    }


def definition() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}", "labels": {"app.kubernetes.io/name": "msgstore"}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": ["mstore"],
                "categories": ["msgstore"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": [
                        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
                        {
                            "name": "Pods",
                            "type": "integer",
                            "description": "Pods Ready with their recovery done",
                            "jsonPath": ".status.readyReplicas",
                        },
                        {
                            "name": "Nodes",
                            "type": "integer",
                            "description": "Store nodes asked for (spec.replicas); replicated, each is a group of "
                            "spec.replication.replicas pods",
                            "jsonPath": ".spec.replicas",
                        },
                        {"name": "Disk%", "type": "integer", "jsonPath": ".status.diskUsagePercent"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A durable message store of spec.replicas independent nodes: each a pod with its own "
                            "volume or, with spec.replication, a replica group of pods.",
                            "properties": {
                                "spec": spec_schema(),
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            },
                        }
                    },
                }
            ],
        },
    }


RESOURCE_PATTERN = r"^((topic|group):[A-Za-z0-9_%|-]{1,255}\*?|(topic|group):\*|cluster|\*)$"


def user_definition() -> dict[str, Any]:
    """MessageStoreUser: a user of one MessageStore and its permissions (store-format.md §20)."""
    entry = {
        "type": "object",
        "required": ["resource", "actions"],
        "properties": {
            "resource": {
                "type": "string",
                "pattern": RESOURCE_PATTERN,
                "description": "topic:NAME, topic:PREFIX*, group:NAME, group:PREFIX*, cluster or *.",
            },
            "actions": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "enum": ["pub", "sub", "create", "update", "delete", "get", "list", "all"]},
                "x-kubernetes-list-type": "set",
            },
            "decision": {"type": "string", "enum": ["Allow", "Deny"], "default": "Allow", "description": "A matching Deny always wins."},
            "sourceIps": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Addresses or CIDR ranges the entry applies to (none: any).",
            },
        },
    }
    spec = {
        "type": "object",
        "required": ["store"],
        "x-kubernetes-validations": [
            {
                "rule": "!has(self.superUser) || !self.superUser || !has(self.entries) || size(self.entries) == 0",
                "message": "spec.entries: a super user may do everything, its entries would mean nothing",
            },
            STORE_FIXED,
        ],
        "properties": {
            "store": {"type": "string", "minLength": 1, "description": "The MessageStore (same namespace)."},
            "accessKey": {
                "type": "string",
                "pattern": r"^[A-Za-z0-9_.@-]{3,64}$",
                "description": "The user's access key (default: the resource's name).",
            },
            "secretName": {
                "type": "string",
                "pattern": SECRET_NAME,
                "maxLength": 253,
                "description": "The Secret the operator writes accessKey, secretKey and endpoint into (default "
                "<name>-credentials); deleting it makes a new secret key. A Secret of that name the operator did not "
                "create is refused.",
            },
            "superUser": {"type": "boolean", "default": False, "description": "Every permission on the store."},
            "entries": {"type": "array", "maxItems": 256, "items": entry, "description": "What the user may do."},
        },
    }
    return _definition(
        "MessageStoreUser",
        "messagestoreusers",
        ["msuser"],
        "A user of a MessageStore: an access key, a secret key the operator writes into a Secret, and permissions.",
        spec,
        [
            {"name": "Store", "type": "string", "jsonPath": ".spec.store"},
            {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
            {"name": "Secret", "type": "string", "jsonPath": ".status.secretName"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )


# a resource moved to another store would leave what it made on the old one (and, for a topic
# with deleteWithData, drop its messages there)
STORE_FIXED = {"rule": "self.store == oldSelf.store", "message": "spec.store cannot change: make another resource"}


def topic_definition() -> dict[str, Any]:
    """MessageStoreTopic: a topic of one MessageStore (store-format.md §20.6)."""
    spec = {
        "type": "object",
        "required": ["store"],
        "x-kubernetes-validations": [
            {
                "rule": "!has(oldSelf.queues) || !has(self.queues) || self.queues >= oldSelf.queues",
                "message": "spec.queues cannot shrink: messages in the removed queues would be stranded",
            },
            {
                "rule": "!has(self.topicName) || !has(oldSelf.topicName) || self.topicName == oldSelf.topicName",
                "message": "spec.topicName cannot change: make another MessageStoreTopic",
            },
            STORE_FIXED,
        ],
        "properties": {
            "store": {"type": "string", "minLength": 1, "description": "The MessageStore (same namespace)."},
            "topicName": {
                "type": "string",
                "pattern": r"^[%|a-zA-Z0-9_-]{1,127}$",
                "description": "The topic (default: the resource's name).",
            },
            "queues": {
                "type": "integer",
                "minimum": 1,
                "maximum": 1024,
                "description": "Queues per node (default the store's defaultTopicQueueNums); may grow, never shrink.",
            },
            "permission": {"type": "string", "enum": ["ReadWrite", "ReadOnly", "WriteOnly"], "default": "ReadWrite"},
            "messageType": {
                "type": "string",
                "enum": ["NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"],
                "description": "RocketMQ 5's topic message type; RocketMQ 5 clients are told it in their routes and send "
                "only that type (unset: every type).",
            },
            "deleteWithData": {
                "type": "boolean",
                "default": False,
                "description": "Deleting this resource deletes the topic even where it holds messages (otherwise it is kept there).",
            },
        },
    }
    return _definition(
        "MessageStoreTopic",
        "messagestoretopics",
        ["mstopic"],
        "A topic of a MessageStore, made and kept as it says on every node.",
        spec,
        [
            {"name": "Store", "type": "string", "jsonPath": ".spec.store"},
            {"name": "Topic", "type": "string", "jsonPath": ".status.topicName"},
            {"name": "Queues", "type": "integer", "jsonPath": ".status.queues"},
            {"name": "Type", "type": "string", "jsonPath": ".spec.messageType"},
            {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        ],
    )


def group_definition() -> dict[str, Any]:
    """MessageStoreGroup: a consumer group's order and retry policy on one MessageStore."""
    seconds = {"type": "number", "minimum": 0, "maximum": 86400}
    spec = {
        "type": "object",
        "required": ["store"],
        "x-kubernetes-validations": [STORE_FIXED],
        "properties": {
            "store": {"type": "string", "minLength": 1, "description": "The MessageStore (same namespace)."},
            "groupName": {
                "type": "string",
                "pattern": r"^[A-Za-z0-9_%|-]{1,255}$",
                "description": "The consumer group (default: the resource's name).",
            },
            "fifo": {
                "type": "boolean",
                "default": False,
                "description": "Each message group (sent with a message group) delivered one message at a time, in order.",
            },
            "maxDeliveries": {
                "type": "integer",
                "minimum": 1,
                "maximum": 1001,
                "default": 17,
                "description": "Deliveries before a message goes to the dead-letter topic, the first included "
                "(RocketMQ's retryMaxTimes + 1).",
            },
            "retry": {
                "type": "object",
                "x-kubernetes-validations": [
                    {
                        "rule": "!has(self.backoffSeconds) || !has(self.exponential)",
                        "message": "spec.retry: give backoffSeconds or exponential, not both",
                    }
                ],
                "properties": {
                    "backoffSeconds": {
                        "type": "array",
                        "maxItems": 64,
                        "items": seconds,
                        "description": "The wait after delivery k is backoffSeconds[k-1], the last repeating.",
                    },
                    "exponential": {
                        "type": "object",
                        "properties": {
                            "initialSeconds": {**seconds, "minimum": 0.001, "default": 1},
                            "maxSeconds": {**seconds, "default": 7200},
                            "multiplier": {"type": "number", "minimum": 1, "maximum": 100, "default": 2},
                        },
                    },
                },
            },
        },
    }
    return _definition(
        "MessageStoreGroup",
        "messagestoregroups",
        ["msgroup"],
        "A consumer group's order and retry policy on a MessageStore.",
        spec,
        [
            {"name": "Store", "type": "string", "jsonPath": ".spec.store"},
            {"name": "Group", "type": "string", "jsonPath": ".status.groupName"},
            {"name": "FIFO", "type": "boolean", "jsonPath": ".spec.fifo"},
            {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        ],
    )


def _definition(kind: str, plural: str, short: list[str], description: str, spec: dict, columns: list) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": {"app.kubernetes.io/name": "msgstore"}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short,
                "categories": ["msgstore"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": description,
                            "properties": {"spec": spec, "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                        }
                    },
                }
            ],
        },
    }


def values_store_config() -> dict[str, Any]:
    """The chart's ``store.config`` in values.schema.json: the same typed settings."""
    props = {}
    for key in TYPED_KEYS:
        prop = json_schema(key)
        prop.pop("description", None)
        props[key] = prop
    return {
        "type": "object",
        "description": "store settings by reference name; the MessageStore CRD validates them again",
        "properties": props,
        "additionalProperties": False,
    }


def values_replication() -> dict[str, Any]:
    """The chart's ``store.replication`` in values.schema.json: spec.replication's fields."""
    schema = replication_schema()
    schema.pop("x-kubernetes-validations", None)
    return {**schema, "additionalProperties": False}


__all__ = [
    "definition",
    "values_store_config",
    "values_replication",
    "values_access",
    "values_tls",
    "user_definition",
    "topic_definition",
    "group_definition",
    "KEYS",
]
