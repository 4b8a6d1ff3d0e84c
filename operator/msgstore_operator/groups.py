"""MessageStoreGroup resources: a store's consumer groups kept in Git: order (FIFO), deliveries
before the dead-letter queue and the retry backoff, set on every node and put back when they
differ there (``GroupDrift``). A deleted resource's group goes back to the defaults (its
settings are forgotten; its consumers' positions stay). Groups used or set with the CLI and
named by no resource are left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from msgstore.broker.retry_policy import DEFAULT_MAX, DEFAULT_NEXT
from msgstore.client import StoreError
from msgstore.store.metadata import group_error

from .declared import Declared
from .pods import PodView
from .spec import SpecError

KIND = "MessageStoreGroup"
PLURAL = "messagestoregroups"
MANAGED = "managedGroups"
DEFAULT_MAX_DELIVERIES = DEFAULT_MAX + 1  # RocketMQ's retryMaxTimes 16, plus the first delivery
DEFAULT_BACKOFF_S = tuple(ms / 1000 for ms in DEFAULT_NEXT)  # RocketMQ's retry levels from 10 s


@dataclass(frozen=True)
class GroupSpec:
    name: str
    fifo: bool
    max_deliveries: int
    backoff_s: tuple[float, ...]  # customized (the last repeating; RocketMQ's levels when none is named); () with exponential
    exponential: tuple[float, float, float] | None  # initial, max, multiplier (seconds)


def parse_group(body: Mapping[str, Any]) -> GroupSpec:
    meta, spec = body.get("metadata", {}), body.get("spec") or {}
    name = spec.get("groupName") or meta["name"]
    err = group_error(name)
    if err:
        raise SpecError("spec.groupName", err)
    most = int(spec.get("maxDeliveries", DEFAULT_MAX_DELIVERIES))
    if not 1 <= most <= 1001:
        raise SpecError("spec.maxDeliveries", f"must be between 1 and 1001, got {most}")
    retry = spec.get("retry") or {}
    backoff = tuple(float(x) for x in retry.get("backoffSeconds") or ())
    exp = retry.get("exponential")
    if backoff and exp:
        raise SpecError("spec.retry", "give backoffSeconds or exponential, not both")
    for i, x in enumerate(backoff):
        if not 0 <= x <= 86400:
            raise SpecError(f"spec.retry.backoffSeconds[{i}]", f"must be between 0 and 86400 seconds, got {x}")
    exponential = None
    if exp:
        initial, top, mult = float(exp.get("initialSeconds", 1)), float(exp.get("maxSeconds", 7200)), float(exp.get("multiplier", 2))
        if not 0 < initial <= top <= 86400:
            raise SpecError("spec.retry.exponential", f"needs 0 < initialSeconds <= maxSeconds <= 86400, got {initial} and {top}")
        if not 1 <= mult <= 100:
            raise SpecError("spec.retry.exponential.multiplier", f"must be between 1 and 100, got {mult}")
        exponential = (initial, top, mult)
    if not backoff and exponential is None:
        backoff = DEFAULT_BACKOFF_S  # no retry named: the default levels (a CLI change is put back too)
    return GroupSpec(name, bool(spec.get("fifo", False)), most, backoff, exponential)


def _matches(group: GroupSpec, policy: Any) -> bool:
    """Whether a node's GroupPolicy is what the resource says (backoff compared in ms)."""
    if policy.fifo != group.fifo or policy.max_deliveries != group.max_deliveries:
        return False
    if group.exponential is not None:
        initial, top, mult = group.exponential
        return (policy.exponential_initial_ms, policy.exponential_max_ms, round(policy.exponential_multiplier, 6)) == (
            round(initial * 1000),
            round(top * 1000),
            round(mult, 6),
        )
    return not policy.exponential_initial_ms and list(policy.backoff_ms) == [round(x * 1000) for x in group.backoff_s]


def _applied(body: dict[str, Any]) -> bool:
    """The resource's spec was applied already (a difference now is drift, not its own edit)."""
    return (body.get("status") or {}).get("observedGeneration") == body["metadata"].get("generation")


class Groups(Declared):
    """One pass over the consumer groups of one store."""

    KIND = KIND

    def reconcile(self, pods: list[PodView], status: dict[str, Any]) -> None:
        resources = self.resources()
        managed = set(status.get(MANAGED) or [])
        if resources is None or (not resources and not managed):
            return
        addresses = self.unavailable(resources, pods, needs_token=False)
        if addresses is None:
            return
        with self.client(addresses) as client:
            kept = set(self.claimed(resources, managed, "groupName", lambda b, held: self._one(client, b, held)))
            for gone in sorted(managed - kept):
                try:
                    client.delete_group(gone)
                    self.events.append(("Normal", "GroupDeleted", f"group {gone}: settings back to the defaults (its {KIND} is gone)"))
                except StoreError as e:
                    kept.add(gone)  # tried again next pass
                    self.events.append(("Warning", "GroupDeleteFailed", f"group {gone}: {e.code.name}: {e.details}"))
        status[MANAGED] = sorted(kept)

    def _one(self, client: Any, body: dict[str, Any], wanted: dict[str, str]) -> str | None:
        """The group's name once it is applied (or waits for a node), else None."""
        try:
            group = self._apply(client, body, wanted)
        except StoreError as e:
            self.status(body, "StoreUnavailable", f"{e.code.name}: {e.details}")
            return None
        return group.name if group is not None else None

    def _apply(self, client: Any, body: dict[str, Any], wanted: dict[str, str]) -> GroupSpec | None:
        try:
            group = parse_group(body)
        except SpecError as e:
            self.status(body, "InvalidSpec", str(e))
            return None
        if group.name in wanted:
            self.status(body, "GroupTaken", f"spec.groupName: {group.name} is {KIND} {wanted[group.name]}'s")
            return None
        listed = client.nodes()
        if not all(n.ready for n in listed):  # a node down (a roll): its settings are put when it is back
            return group
        nodes = len(listed)
        policies = [g.policy for _, g in client.describe_groups(group.name) if g.name == group.name and g.HasField("policy")]
        if len(policies) < nodes or not all(_matches(group, p) for p in policies):
            client.update_group(
                group.name, max_deliveries=group.max_deliveries, backoff=group.backoff_s, exponential=group.exponential, fifo=group.fifo
            )
            drift = len(policies) == nodes and _applied(body) and (body.get("status") or {}).get("groupName") == group.name
            if drift:
                self.event(body, "Warning", "GroupDrift", f"group {group.name} put back as the resource says (changed outside it)")
            else:
                self.event(body, "Normal", "GroupPut", f"group {group.name} set on every node")
        self.status(body, "Ready", "", True, groupName=group.name)
        return group
