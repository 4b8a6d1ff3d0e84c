"""The master's hold on its group's Lease (``coordination.k8s.io/v1``) on Kubernetes: the API
server, an existing linearizable store, is the arbiter of who may acknowledge writes, not
anything of ours.

The operator creates one Lease per replica group and writes into it who holds it and at what
epoch (``msgstore.io/epoch``) — at creation and at every election, before it promotes anyone.
The holder, the master pod's store process, renews it every ``retry`` seconds while the Lease
still names it at its own epoch, and publishes its in-sync set there (``msgstore.io/in-sync``),
which is where the operator elects from. client-go leader election's rule keeps two masters
from acknowledging at once: the holder acknowledges only until ``renew deadline`` after it
*sent* its last successful renewal, the deadline being shorter than the lease's duration, and
the operator elects only once it has seen the lease go unrenewed for the whole duration (by
its own clock, so clocks need not agree). A master that finds the Lease naming someone else, or
a newer epoch, is deposed (``gate.py``) at once.

It talks to the API server with the official client from a thread of its own (in-cluster
credentials, else ``KUBECONFIG``); the pods' ServiceAccount may only get and update their
group's Lease.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

EPOCH = "msgstore.io/epoch"  # the term the holder must be master of
IN_SYNC = "msgstore.io/in-sync"  # the holder's in-sync set (comma-separated member names, itself included)
ADDRESS = "msgstore.io/address"  # where the holder serves (host:port)
END_OFFSET = "msgstore.io/end-offset"  # the holder's commit-log end at its last renewal (a replaced volume shows)
RENEW_FRACTION = 2 / 3  # renew deadline / lease duration (client-go: 10 s of 15)


class LeaseUnavailable(RuntimeError):
    """The Kubernetes client or credentials are missing."""


def micro_time(t: datetime.datetime | None = None) -> str:
    """A Lease's MicroTime: RFC 3339 with microseconds, in UTC."""
    return (t or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _api():
    try:
        import kubernetes
    except ImportError as e:  # pragma: no cover - the image and the operator extra have it
        raise LeaseUnavailable("a Lease needs the kubernetes package (pip install 'msgstore[operator]')") from e
    try:
        kubernetes.config.load_incluster_config()
        api_client = kubernetes.client.ApiClient()
    except kubernetes.config.ConfigException:
        try:
            api_client = kubernetes.config.new_client_from_config()
        except Exception as e:
            raise LeaseUnavailable(f"no Kubernetes credentials for the Lease (in-cluster or KUBECONFIG): {e}") from e
    return kubernetes.client.CoordinationV1Api(api_client), kubernetes.client.rest.ApiException


class LeaseKeeper:
    def __init__(self, namespace: str, name: str, identity: str, address: str):
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.address = address
        self.valid_until = 0.0  # monotonic: acknowledge only before this
        self.duration = 0.0  # the Lease's, as last read
        self.wanted: list[str] = [identity]  # the in-sync set to publish (set on the event loop)
        self.published: list[str] = []
        self.last_error = ""
        self.epoch: Callable[[], int] = lambda: 0  # the member's epoch
        self.is_master: Callable[[], bool] = lambda: False
        self.end_offset: Callable[[], int] = lambda: 0
        self.on_deposed: Callable[[str, int], None] = lambda reason, epoch: None
        self.on_published: Callable[[list[str]], None] = lambda members: None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._api = None

    @property
    def where(self) -> str:
        return f"Lease {self.namespace}/{self.name}"

    # ------------------------------------------------------------------ the loop's side

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=self._run, name="lease", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()

    def publish(self, members: list[str]) -> None:
        """The in-sync set changed: the controller must see it before a put is acknowledged
        without a member that left (the tracker waits for :attr:`on_published`)."""
        self.wanted = [self.identity, *members]
        self._wake.set()

    def taken_office(self) -> None:
        """A new term: nothing is acknowledged until the Lease is renewed at the new epoch."""
        self.valid_until = 0.0
        self.wanted = [self.identity]
        self._wake.set()

    def refusal(self) -> str:
        if time.monotonic() < self.valid_until:
            return ""
        why = f": {self.last_error}" if self.last_error else ""
        return f"{self.identity} holds no fresh renewal of {self.where} (the arbiter of who is master){why}"

    def _call_soon(self, fn, *args) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(fn, *args)

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        while not self._stopped.is_set():
            retry = 2.0
            if self.is_master():
                try:
                    retry = self.renew()
                except Exception as e:  # the API server is away: the deadline runs out by itself
                    self.last_error = f"renewing failed: {e.__class__.__name__}: {str(e)[:200]}"
                    log.warning("%s: %s", self.where, self.last_error)
                    retry = 0.5
            self._wake.wait(retry)
            self._wake.clear()

    def renew(self) -> float:
        """One renewal (or the finding that this member no longer holds the Lease); returns
        how long to wait before the next."""
        if self._api is None:
            self._api, self._api_error = _api()
        sent = time.monotonic()
        lease = self._api.read_namespaced_lease(self.name, self.namespace, _request_timeout=5)
        spec, meta = lease.spec, lease.metadata
        annotations = dict(meta.annotations or {})
        holder = spec.holder_identity or ""
        try:
            epoch = int(annotations.get(EPOCH, "0"))
        except ValueError:
            epoch = 0
        mine = self.epoch()
        self.duration = float(spec.lease_duration_seconds or 15)
        retry = min(2.0, self.duration / 5)
        if holder != self.identity or epoch > mine:
            self.valid_until = 0.0
            self.last_error = f"it names {holder or 'nobody'} at epoch {epoch}"
            self._call_soon(self.on_deposed, f"{self.where} names {holder or 'nobody'} at epoch {epoch}: this member was replaced", epoch)
            return retry
        if epoch < mine:
            self.valid_until = 0.0
            self.last_error = f"it names epoch {epoch}, this member is at epoch {mine}: only the operator elects here"
            return retry
        wanted = list(self.wanted)
        annotations[IN_SYNC] = ",".join(wanted)
        annotations[ADDRESS] = self.address
        annotations[END_OFFSET] = str(self.end_offset())
        meta.annotations = annotations
        spec.renew_time = micro_time()
        try:
            self._api.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=5)
        except self._api_error as e:
            if e.status == 409:  # changed meanwhile (an election?): read it again at once
                return 0.0
            raise
        self.valid_until = sent + self.duration * RENEW_FRACTION
        self.last_error = ""
        if wanted != self.published:
            self.published = wanted
            self._call_soon(self.on_published, [m for m in wanted if m != self.identity])
        return retry
