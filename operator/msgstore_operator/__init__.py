"""The msgstore Kubernetes operator (Kopf): MessageStore custom resources → StatefulSets and more.

The decisions are plain functions (``spec``, ``render``, ``decide``); ``reconcile`` does the
I/O through ``kube`` and the stores' admin API; ``handlers`` wires it into Kopf.
"""
