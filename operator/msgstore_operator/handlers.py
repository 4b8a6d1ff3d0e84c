"""Kopf handlers: thin wrappers around :class:`Reconciler`, plus a periodic pass of our own.

Create, update and resume reconcile at once. Everything that needs coming back (per-pod
figures, the next step of a roll or a scale-down) is the :class:`Observer`'s: a thread that
lists the MessageStores and reconciles each every ``INTERVAL`` seconds, or every second while
one has work in progress. It replaces a Kopf timer on purpose: Kopf puts a finalizer on every
object that has a timer, and a finalizer whose operator is gone (``helm uninstall`` removes
the operator together with the chart's store) leaves the object Terminating forever. Nothing
here needs cleaning up on deletion (the owned objects go by garbage collection), so the
operator sets no finalizer at all. One lock per MessageStore keeps a handler and the observer
from reconciling the same object at the same time.

Kopf keeps its bookkeeping under ``kopf.msgstore.io/``: Kopf ignores every annotation under
the prefix it stores its own under, so with ``msgstore.io/`` the user's action annotations
(``msgstore.io/restart`` ...) never reached the update handler.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import kopf

from . import kube as kubemod
from . import metrics
from .lease_clock import CLOCK
from .reconcile import Outcome, Reconciler
from .replication import LeaseView
from .spec import GROUP, PLURAL, VERSION

log = logging.getLogger(__name__)

INTERVAL = float(os.environ.get("MSGSTORE_OPERATOR_INTERVAL", "10"))
BUSY_INTERVAL = min(1.0, INTERVAL)  # while a roll or a scale step waits for pods
POKE_DELAY = 0.2  # after a pod event
RESOURCE = dict(group=GROUP, version=VERSION, plural=PLURAL)
KOPF_PREFIX = "kopf.msgstore.io"
FINALIZER = "msgstore.io/finalizer"  # Kopf's, should it ever need one (nothing here does)
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
    settings.watching.server_timeout = int(os.environ.get("MSGSTORE_WATCH_TIMEOUT", "270"))
    settings.watching.client_timeout = settings.watching.server_timeout + 30
    settings.watching.connect_timeout = 30
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=KOPF_PREFIX, key="last-handled")
    settings.persistence.finalizer = FINALIZER
    settings.posting.level = logging.INFO
    settings.execution.max_workers = 8
    settings.scanning.disabled = True  # no cluster-wide CRD listing: the resource is known
    if getattr(memo, "kube", None) is None:
        memo.kube = kubemod.connect()
    memo.observer = Observer(memo.kube, os.environ.get("WATCH_NAMESPACE") or None)
    memo.observer.start()


@kopf.on.cleanup()
def stop_observer(memo: kopf.Memo, **_) -> None:
    observer = getattr(memo, "observer", None)
    if observer is not None:
        observer.stop()


def _key(meta: dict[str, Any]) -> str:
    return f"{meta.get('namespace')}/{meta['name']}"


def _lock(key: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


def status_patch(old: Any, new: Any) -> Any:
    """A merge patch that turns ``old`` into ``new``: keys ``new`` dropped are set to null (a
    plain merge patch never removes a key, so a finished roll's ``finished`` outlived it)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    out = {k: status_patch(old.get(k), v) for k, v in new.items()}
    out.update({k: None for k in old if k not in new})
    return out


def reconcile_one(kube: kubemod.Kube, namespace: str | None, name: str) -> Outcome:
    """Under the object's lock: read it fresh, reconcile, write status and annotations, post
    Events. Reading fresh matters: a pass must never build on a status an earlier pass replaced."""
    with _lock(f"{namespace}/{name}"):
        try:
            fresh = kube.get("MessageStore", namespace, name)
        except kubemod.NotFound:
            metrics.forget(namespace or "", name)
            return Outcome({})
        if fresh["metadata"].get("deletionTimestamp"):
            metrics.forget(namespace or "", name)
            return Outcome({})
        out = Reconciler(kube).reconcile(fresh)
        kube.patch("MessageStore", namespace, name, {"status": status_patch(fresh.get("status") or {}, out.status)}, sub="status")
        metrics.observe(namespace or "", name, out.status)
        meta: dict[str, Any] = {}
        if out.annotations:
            meta["annotations"] = out.annotations
        if out.finalizers is not None:
            meta.update(finalizers=out.finalizers, resourceVersion=fresh["metadata"].get("resourceVersion"))
        if meta:
            kube.patch("MessageStore", namespace, name, {"metadata": meta})
    for etype, reason, message in out.events:
        try:
            kube.event(fresh, etype, reason, message)
        except Exception as e:  # an Event is worth a log line, not a failed pass
            log.warning("could not post event %s: %s", reason, e)
    return out


@kopf.on.resume(**RESOURCE)
@kopf.on.create(**RESOURCE)
@kopf.on.update(**RESOURCE)
def reconcile(body, memo, **_) -> None:
    meta = body["metadata"]
    out = reconcile_one(memo.kube, meta.get("namespace"), meta["name"])
    observer = getattr(memo, "observer", None)
    if observer is not None:
        observer.track(_key(meta), busy=out.waiting is not None, lease_checks=out.lease_checks)


@kopf.on.event("", "v1", "pods", labels={"app.kubernetes.io/managed-by": "msgstore-operator"})
def pod_changed(body, memo, **_) -> None:
    """A store pod changed (started, became Ready, died): look at its store soon, instead of
    at the next periodic pass (a roll's next step, an abnormal recovery to report)."""
    meta = body.get("metadata", {})
    instance = (meta.get("labels") or {}).get("app.kubernetes.io/instance")
    observer = getattr(memo, "observer", None)
    if instance and observer is not None:
        observer.poke(f"{meta.get('namespace')}/{instance}")


@kopf.on.event(GROUP, VERSION, "messagestoreusers")
@kopf.on.event(GROUP, VERSION, "messagestoretopics")
@kopf.on.event(GROUP, VERSION, "messagestoregroups")
def declared_changed(body, memo, **_) -> None:
    """A MessageStoreUser, Topic or Group was made, changed or deleted: its store's next pass
    puts it on the store (or takes it off), soon. No finalizer: a deletion is noticed from the
    store's side (declared.py)."""
    meta, store = body.get("metadata", {}), (body.get("spec") or {}).get("store")
    observer = getattr(memo, "observer", None)
    if store and observer is not None:
        observer.poke(f"{meta.get('namespace')}/{store}")


class Observer:
    """Reconciles every MessageStore periodically, and the busy ones every second. Between
    passes it reads each group's Lease again when it would lapse unless renewed (the
    reconcile's ``lease_checks``), and reconciles the store at once when it has: a master
    cut off from the API server stays Ready, so no pod event says anything happened, and
    its replacement must not wait for the next periodic pass."""

    def __init__(self, kube: kubemod.Kube, namespace: str | None):
        self.kube = kube
        self.namespace = namespace
        self._due: dict[str, float] = {}  # key -> monotonic time of its next pass
        self._due_lock = threading.Lock()  # Kopf's threads poke, the observer's thread reads
        self._leases: dict[str, list[tuple[str, str, float]]] = {}  # key -> (namespace, Lease, when to read it again)
        self._listed = 0.0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="msgstore-observer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(30)

    def track(self, key: str, busy: bool, lease_checks: list[tuple[str, str, float]] | None = None) -> None:
        with self._due_lock:
            self._due[key] = time.monotonic() + (BUSY_INTERVAL if busy else INTERVAL)
            if lease_checks is not None:
                self._leases[key] = list(lease_checks)

    def poke(self, key: str) -> None:
        """Reconcile ``key`` shortly (a burst of pod events makes one pass)."""
        with self._due_lock:
            self._due[key] = min(self._due.get(key, float("inf")), time.monotonic() + POKE_DELAY)

    def _run(self) -> None:
        while not self._stopped.wait(min(0.2, BUSY_INTERVAL)):
            try:
                self._cycle()
            except Exception:
                log.exception("observer pass failed")
                self._stopped.wait(BUSY_INTERVAL)

    def _check_leases(self) -> None:
        """Each Lease whose time came: renewed since (look again one duration after that
        renewal was first seen), or not (reconcile its store now: it has lapsed). Run between
        passes too, so a slow pass does not hold the checks up."""
        now = time.time()
        with self._due_lock:
            due = [(key, check) for key, checks in self._leases.items() for check in checks if check[2] <= now]
        for key, (namespace, name, _when) in due:
            try:
                self._check_lease(key, namespace, name)
            except Exception:  # one Lease that cannot be read or judged must not stop the others, nor the passes
                log.exception("checking Lease %s/%s failed; again in %.0f s", namespace, name, BUSY_INTERVAL)
                self._reschedule(key, namespace, name, time.time() + BUSY_INTERVAL)

    def _check_lease(self, key: str, namespace: str, name: str) -> None:
        lease = LeaseView.of(self.kube.get_or_none("Lease", namespace, name))
        if lease is None or not lease.renew_time:
            self._reschedule(key, namespace, name, None)
            return
        looked = time.time()
        lapses = CLOCK.seen(namespace, name, lease.uid, lease.renew_time, looked) + lease.duration
        if lapses <= looked:
            log.info("Lease %s/%s not renewed since %s: reconciling %s now", namespace, name, lease.renew_time, key)
            self._reschedule(key, namespace, name, None)  # (the pass sets the next checks)
            self.poke(key)
        else:
            self._reschedule(key, namespace, name, lapses)

    def _reschedule(self, key: str, namespace: str, name: str, when: float | None) -> None:
        """The Lease's next check at ``when`` (None: none until the store's next pass)."""
        with self._due_lock:
            checks = [c for c in self._leases.get(key, []) if (c[0], c[1]) != (namespace, name)]
            if when is not None:
                checks.append((namespace, name, when))
            if key in self._leases:
                self._leases[key] = checks

    def _cycle(self) -> None:
        now = time.monotonic()
        if now - self._listed >= INTERVAL:
            self._listed = now
            keys = {_key(s["metadata"]) for s in self.kube.list("MessageStore", self.namespace)}
            with self._due_lock:
                for key in keys:
                    self._due.setdefault(key, now)
                for key in [k for k in self._due if k not in keys]:
                    del self._due[key]
                    self._leases.pop(key, None)
                    metrics.forget(*key.split("/", 1))  # a deleted store's figures go with it
        self._check_leases()
        with self._due_lock:
            due = sorted(self._due.items(), key=lambda kv: kv[1])
        for key, when in due:
            if self._stopped.is_set() or when > time.monotonic():
                continue
            self._check_leases()
            namespace, name = key.split("/", 1)
            try:
                out = reconcile_one(self.kube, namespace, name)
                self.track(key, busy=out.waiting is not None, lease_checks=out.lease_checks)
            except Exception:
                log.exception("reconciling %s failed; retrying in %.0f s", key, INTERVAL)
                self.track(key, busy=False)
