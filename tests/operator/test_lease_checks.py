"""The observer's Lease checks: a master cut off from the API server stays Ready, so no pod
event says anything happened; the observer reads its group's Lease again when it would lapse
and reconciles the store at once when it has, instead of at the next periodic pass. kmock
serves the Lease; the observer's own code reads it."""

from __future__ import annotations

import asyncio
import time

import pytest

from msgstore_operator import handlers
from msgstore_operator import kube as kubemod
from msgstore_operator.lease_clock import CLOCK
from msgstore_operator.replication import micro_iso
from tests.operator.conftest import NS, ApiServer, serve_resources

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=ApiServer)]


def observer(kmock) -> handlers.Observer:
    serve_resources(kmock)
    return handlers.Observer(kubemod.connect(host=str(kmock.url).rstrip("/"), verify_ssl=False), NS)  # (its thread not started)


def put_lease(kmock, name: str, renew_time: str, duration: int = 3) -> None:
    kmock.objects["coordination.k8s.io/v1/leases", NS, name] = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": {"holderIdentity": "orders-0", "renewTime": renew_time, "leaseDurationSeconds": duration},
    }


def track(obs: handlers.Observer, key: str, checks: list[tuple[str, str, float]]) -> None:
    """As after a pass, with the next periodic pass an hour away (a poke brings it to 0.2 s)."""
    obs.track(key, busy=False, lease_checks=checks)
    obs._due[key] = time.monotonic() + 3600


def soon(obs: handlers.Observer, key: str) -> bool:
    return obs._due[key] < time.monotonic() + 1800


async def test_a_lease_renewed_since_is_looked_at_again_one_duration_after_the_renewal_was_seen(kmock):
    obs = observer(kmock)
    key, lease = f"{NS}/renewing", "renewing-g0"
    put_lease(kmock, lease, micro_iso(time.time() - 1))
    track(obs, key, [(NS, lease, time.time() - 0.01)])
    before = time.time()
    await asyncio.to_thread(obs._check_leases)
    assert not soon(obs, key)  # a renewal not seen before counts from now: nothing lapsed
    [(_, name, when)] = obs._leases[key]
    assert name == lease and before + 3 <= when <= time.time() + 3


async def test_a_lease_unrenewed_for_its_duration_brings_its_store_back_at_once(kmock):
    obs = observer(kmock)
    key, lease = f"{NS}/zombie", "zombie-g0"
    renewed = micro_iso(time.time() - 10)
    put_lease(kmock, lease, renewed)
    CLOCK.seen(NS, lease, f"uid-{lease}", renewed, time.time() - 3.5)  # a reconcile pass saw this renewal 3.5 s ago
    track(obs, key, [(NS, lease, time.time() - 0.01)])
    await asyncio.to_thread(obs._check_leases)
    assert soon(obs, key)  # reconciled now: the pass elects (plan_group judges the Lease lapsed by the same clock)
    assert obs._leases[key] == []  # that pass sets the next checks


async def test_checks_not_due_read_nothing_and_a_missing_lease_stops_its_checks(kmock):
    obs = observer(kmock)
    key = f"{NS}/gone"
    later = time.time() + 60
    track(obs, key, [(NS, "later-g0", later), (NS, "gone-g0", time.time() - 0.01)])
    await asyncio.to_thread(obs._check_leases)
    assert obs._leases[key] == [(NS, "later-g0", later)] and not soon(obs, key)
