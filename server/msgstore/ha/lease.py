"""The arbiter on Kubernetes (``arbiter.py``): the group's Lease (``coordination.k8s.io/v1``).
The API server, an existing linearizable store, says who may acknowledge writes, not anything
of ours.

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

It talks to the API server with the official (blocking) client from a thread of its own
(in-cluster credentials, else ``KUBECONFIG``); the pods' ServiceAccount may only get and update
their group's Lease. Members never elect here: the operator does (``can_elect`` is False).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import logging
from dataclasses import replace

from .arbiter import Arbiter, ArbiterError, Conflict, Record

log = logging.getLogger(__name__)

EPOCH = "msgstore.io/epoch"  # the term the holder must be master of
IN_SYNC = "msgstore.io/in-sync"  # the holder's in-sync set (comma-separated member names, itself included)
ADDRESS = "msgstore.io/address"  # where the holder serves (host:port)
END_OFFSET = "msgstore.io/end-offset"  # the holder's commit-log end at its last renewal (a replaced volume shows)


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


class KubeLease(Arbiter):
    can_elect = False

    def __init__(self, namespace: str, name: str):
        self.namespace = namespace
        self.name = name
        self.where = f"Lease {namespace}/{name}"
        self.duration = 15.0  # the Lease's, as last read
        self._api = None
        self._api_error: type[Exception] = Exception
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="lease")
        self._object = None  # the Lease as last read (replaced whole on renewal)

    async def _in_thread(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _read(self):
        if self._api is None:
            self._api, self._api_error = _api()
        return self._api.read_namespaced_lease(self.name, self.namespace, _request_timeout=5)

    async def read(self) -> Record | None:
        try:
            lease = await self._in_thread(self._read)
        except LeaseUnavailable:
            raise
        except Exception as e:
            if getattr(e, "status", None) == 404:
                return None
            raise ArbiterError(f"reading {self.where}: {e.__class__.__name__}: {str(e)[:200]}") from e
        self._object = lease
        spec, meta = lease.spec, lease.metadata
        annotations = dict(meta.annotations or {})
        try:
            epoch = int(annotations.get(EPOCH, "0"))
        except ValueError:
            epoch = 0
        end = str(annotations.get(END_OFFSET, "0"))
        self.duration = float(spec.lease_duration_seconds or 15)
        return Record(
            holder=spec.holder_identity or "",
            epoch=epoch,
            in_sync=tuple(m for m in str(annotations.get(IN_SYNC, "")).split(",") if m),
            address=str(annotations.get(ADDRESS, "")),
            end_offset=int(end) if end.isdigit() else 0,
            version=meta.resource_version,
        )

    def _replace(self, mine: Record):
        lease = self._object
        meta = lease.metadata
        annotations = dict(meta.annotations or {})
        annotations[IN_SYNC] = ",".join(mine.in_sync)
        annotations[ADDRESS] = mine.address
        annotations[END_OFFSET] = str(mine.end_offset)
        meta.annotations = annotations
        lease.spec.renew_time = micro_time()
        try:
            done = self._api.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=5)
        except self._api_error as e:
            if e.status == 409:  # changed meanwhile (an election?)
                raise Conflict(f"{self.where} changed since it was read") from None
            raise
        return done.metadata.resource_version

    async def renew(self, seen: Record | None, mine: Record) -> Record:
        """The holder's renewal: renewTime now, and its in-sync set, address and end, by
        compare-and-swap on the resourceVersion just read."""
        if seen is None or self._object is None or self._object.metadata.resource_version != seen.version:
            raise Conflict(f"{self.where} was not read just before renewing")
        try:
            version = await self._in_thread(self._replace, mine)
        except Conflict:
            raise
        except Exception as e:
            raise ArbiterError(f"renewing {self.where}: {e.__class__.__name__}: {str(e)[:200]}") from e
        return replace(mine, version=version)

    async def close(self) -> None:
        self._pool.shutdown(wait=False)
