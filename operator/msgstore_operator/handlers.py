"""Kopf handlers: thin wrappers around :class:`Reconciler`.

Create, update and resume reconcile at once and, while a roll or scale step is under way, ask
Kopf to come back (``TemporaryError``); a timer keeps the per-pod figures fresh. One lock per
MessageStore keeps a timer and a handler from reconciling the same object at the same time.
"""

from __future__ import annotations

import logging
import os
import threading

import kopf

from . import kube as kubemod
from .reconcile import Outcome, Reconciler
from .spec import GROUP, PLURAL, VERSION

INTERVAL = float(os.environ.get("MSGSTORE_OPERATOR_INTERVAL", "10"))
RESOURCE = dict(group=GROUP, version=VERSION, plural=PLURAL)
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
    settings.watching.server_timeout = int(os.environ.get("MSGSTORE_WATCH_TIMEOUT", "270"))
    settings.watching.client_timeout = settings.watching.server_timeout + 30
    settings.watching.connect_timeout = 30
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="msgstore.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="msgstore.io", key="last-handled")
    settings.posting.level = logging.INFO
    settings.execution.max_workers = 8
    settings.scanning.disabled = True  # no cluster-wide CRD listing: the resource is known
    if getattr(memo, "kube", None) is None:
        memo.kube = kubemod.connect()


def _lock(body) -> threading.Lock:
    key = f"{body['metadata'].get('namespace')}/{body['metadata']['name']}"
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


def _reconcile(body, memo) -> Outcome:
    """Under the object's lock: read it fresh, reconcile, write status and annotations. Kopf's
    own ``patch`` would land after the lock is released, and the next pass (a timer beside an
    update handler) would then build on a stale status."""
    meta = body["metadata"]
    with _lock(body):
        kube: kubemod.Kube = memo.kube
        try:
            fresh = kube.get("MessageStore", meta.get("namespace"), meta["name"])
        except kubemod.NotFound:
            return Outcome({})
        out = Reconciler(kube).reconcile(fresh)
        kube.patch("MessageStore", meta.get("namespace"), meta["name"], {"status": out.status}, sub="status")
        if out.annotations:
            kube.patch("MessageStore", meta.get("namespace"), meta["name"], {"metadata": {"annotations": out.annotations}})
    for etype, reason, message in out.events:
        kopf.event(body, type=etype, reason=reason, message=message)
    return out


@kopf.on.resume(**RESOURCE)
@kopf.on.create(**RESOURCE)
@kopf.on.update(**RESOURCE)
def reconcile(body, memo, **_) -> None:
    out = _reconcile(body, memo)
    if out.waiting:
        raise kopf.TemporaryError(out.waiting, delay=INTERVAL)


@kopf.timer(**RESOURCE, interval=INTERVAL, initial_delay=INTERVAL)
def observe(body, memo, **_) -> None:
    _reconcile(body, memo)
