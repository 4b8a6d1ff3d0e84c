"""The arbiter off Kubernetes: etcd (``msgstore serve --arbiter etcd://HOST:2379[,HOST:2379]/PREFIX``).

One key per replica group, ``PREFIX/groups/GROUP``, holds the record (``arbiter.Record`` as
JSON). It is written only by compare-and-swap on its ``mod_revision``: the master renewing
(its in-sync set, address, end) and an election taking it. The record is not attached to a
lease (it must outlive its master: the next election reads its in-sync set); instead it names
the master's etcd lease, which the master keeps alive, and an election may take the record
only once that lease is gone (``LeaseTimeToLive`` says -1) or the master was fenced. etcd
counts a lease's TTL on its own clock from the keep-alive it received, while the master stops
acknowledging two thirds of the TTL after it *sent* that keep-alive, so it has stopped before
anyone can see the lease expire.

The client is ``aetcd`` (asyncio, over grpcio and etcd's own v3 gRPC API; python-etcd3 is no
longer maintained and its generated code does not load with current protobuf). Several
endpoints are tried in turn: a request that one cannot answer (down, cut off from its
cluster's leader) goes to the next.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.parse
from dataclasses import dataclass, replace

from .arbiter import Arbiter, ArbiterError, Conflict, Record

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "/msgstore"
DEFAULT_TTL_S = 10
CALL_TIMEOUT_S = 2  # one request to one endpoint


@dataclass(frozen=True)
class EtcdTarget:
    endpoints: tuple[tuple[str, int], ...]
    prefix: str = DEFAULT_PREFIX

    @staticmethod
    def parse(url: str) -> EtcdTarget:
        """``etcd://HOST:PORT[,HOST:PORT...][/PREFIX]``; a ValueError names what is wrong."""
        if not url.startswith("etcd://"):
            raise ValueError(f"an arbiter is etcd://HOST:PORT[,HOST:PORT...][/PREFIX], got {url!r}")
        rest = url[len("etcd://") :]
        hosts, _, path = rest.partition("/")
        endpoints = []
        for part in hosts.split(","):
            host, sep, port = part.strip().rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"etcd endpoint {part!r} in {url!r} is not HOST:PORT")
            endpoints.append((host.strip("[]"), int(port)))
        prefix = "/" + urllib.parse.unquote(path).strip("/") if path.strip("/") else DEFAULT_PREFIX
        return EtcdTarget(tuple(endpoints), prefix)

    def __str__(self) -> str:
        return "etcd://" + ",".join(f"{h}:{p}" for h, p in self.endpoints) + self.prefix


def encode(record: Record) -> bytes:
    return json.dumps(
        {
            "holder": record.holder,
            "epoch": record.epoch,
            "inSync": list(record.in_sync),
            "address": record.address,
            "endOffset": record.end_offset,
            "mode": record.mode,
            "lease": record.lease,
            "electedBy": record.elected_by,
            "electedAt": record.elected_at,
        },
        sort_keys=True,
    ).encode()


def decode(value: bytes, version: int) -> Record:
    try:
        d = json.loads(value)
        return Record(
            holder=str(d.get("holder") or ""),
            epoch=int(d.get("epoch") or 0),
            in_sync=tuple(str(m) for m in d.get("inSync") or ()),
            address=str(d.get("address") or ""),
            end_offset=int(d.get("endOffset") or 0),
            mode=str(d.get("mode") or ""),
            lease=int(d.get("lease") or 0),
            elected_by=str(d.get("electedBy") or ""),
            elected_at=int(d.get("electedAt") or 0),
            version=version,
        )
    except (ValueError, TypeError, AttributeError) as e:
        raise ArbiterError(f"the record is not what msgstore writes ({e}): {value[:200]!r}") from None


class EtcdArbiter(Arbiter):
    can_elect = True

    def __init__(self, target: EtcdTarget, group: str, ttl_s: int = DEFAULT_TTL_S):
        if ttl_s < 2:
            raise ValueError(f"the arbiter's lease must last at least 2 s, got {ttl_s}")
        self.target = target
        self.group = group
        self.key = f"{target.prefix}/groups/{group}".encode()
        self.duration = float(ttl_s)
        self.where = f"{target}/groups/{group}"
        self.requests = 0  # made to etcd (figures: the arbiter's load)
        self._clients: list = [None] * len(target.endpoints)
        self._first = 0  # the endpoint that answered last
        self._lease = 0  # this member's lease while it holds the record
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------ calls, endpoint by endpoint

    def _client(self, i: int):
        import aetcd

        c = self._clients[i]
        if c is None:
            host, port = self.target.endpoints[i]
            c = self._clients[i] = aetcd.Client(host, port, timeout=CALL_TIMEOUT_S)
        return c

    async def _call(self, what: str, fn):
        """``fn(client)`` on the first endpoint that answers; ArbiterError when none does."""
        import aetcd.exceptions as ex

        errors = []
        n = len(self.target.endpoints)
        for k in range(n):
            i = (self._first + k) % n
            client = self._client(i)
            self.requests += 1
            try:
                await client.connect()
                out = await asyncio.wait_for(fn(client), CALL_TIMEOUT_S + 0.5)
            except (ex.ClientError, TimeoutError, OSError) as e:
                host, port = self.target.endpoints[i]
                errors.append(f"{host}:{port}: {type(e).__name__} {str(e)[:120]}".strip())
                continue
            except Exception as e:  # a grpc error aetcd does not map (transactions are not wrapped)
                host, port = self.target.endpoints[i]
                errors.append(f"{host}:{port}: {type(e).__name__} {str(e)[:120]}".strip())
                continue
            self._first = i
            return out
        raise ArbiterError(f"{what}: no etcd endpoint answered ({'; '.join(errors)})")

    # ------------------------------------------------------------------ the record

    async def read(self) -> Record | None:
        got = await self._call("reading the record", lambda c: c.get(self.key))
        if got is None:
            return None
        return decode(got.value, got.mod_revision)

    def _swap(self, seen: Record | None, new: Record):
        async def txn(c):
            tx = c.transactions
            if seen is None:
                compare = [tx.create(self.key) == 0]
            else:
                compare = [tx.mod(self.key) == int(seen.version)]
            ok, responses = await c.transaction(compare=compare, success=[tx.put(self.key, encode(new))], failure=[])
            if not ok:
                return None
            return int(responses[0].response_put.header.revision)  # the key's new mod_revision

        return txn

    async def _write(self, seen: Record | None, new: Record, what: str) -> Record:
        revision = await self._call(what, self._swap(seen, new))
        if revision is None:
            raise Conflict(f"{self.where} changed while {what}")
        return replace(new, version=revision)

    async def renew(self, seen: Record | None, mine: Record) -> Record:
        async with self._lock:
            if self._lease and seen is not None and seen.lease == self._lease:
                ttl = await self._call("keeping the lease alive", lambda c: c.refresh_lease(self._lease))
                if ttl is None or ttl.TTL <= 0:
                    log.warning("%s: lease %x expired before it was renewed; taking a new one", self.where, self._lease)
                    self._lease = 0
                    raise ArbiterError("the lease expired before it was renewed (the arbiter was out of reach too long)")
                want = replace(mine, lease=self._lease)
                if replace(want, end_offset=seen.end_offset) == seen:  # nothing new to publish (the end alone is not worth a write)
                    return seen
                return await self._write(seen, want, "publishing the in-sync set")
            lease = await self._call("taking a lease", lambda c: c.lease(int(self.duration)))
            self._lease = lease.id
            return await self._write(seen, replace(mine, lease=self._lease), "naming the new lease")

    async def holder_alive(self, record: Record) -> bool:
        """Dead only when etcd says the lease is gone (TTL -1): its TTL counts whole seconds
        rounded down, so 0 is a lease in its last second, which a keep-alive can still renew."""
        if not record.lease:
            return False
        info = await self._call("asking for the holder's lease", lambda c: c.get_lease_info(record.lease, keys=False))
        return int(info.TTL) >= 0

    async def take(self, seen: Record | None, new: Record) -> Record:
        return await self._write(seen, replace(new, lease=0), f"electing {new.holder} at epoch {new.epoch}")

    async def resign(self, record: Record) -> None:
        if self._lease and record.lease == self._lease:
            lease, self._lease = self._lease, 0
            await self._call("revoking the lease", lambda c: c.revoke_lease(lease))

    async def close(self) -> None:
        for c in self._clients:
            if c is not None:
                try:
                    await c.close()
                except Exception:
                    pass
        self._clients = [None] * len(self.target.endpoints)


def from_url(url: str, group: str, ttl_s: int = DEFAULT_TTL_S) -> EtcdArbiter:
    return EtcdArbiter(EtcdTarget.parse(url), group, ttl_s)
