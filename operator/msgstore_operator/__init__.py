"""The msgstore Kubernetes operator (Kopf): MessageStore custom resources → StatefulSets and more.

The decisions are plain functions (``spec``, ``render``, ``decide``); ``reconcile`` does the
I/O through ``kube`` and the stores' admin API; ``handlers`` wires it into Kopf.
"""

# msgstore's package sets gRPC's environment (fork support off: see msgstore/__init__.py), which
# gRPC reads when it is first imported: before any module of ours imports grpc itself
import msgstore  # noqa: F401  (imported for that side effect)
