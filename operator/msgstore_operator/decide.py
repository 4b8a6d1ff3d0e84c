"""The operator's decisions as plain functions of what it observed (no I/O here)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from .pods import PodView


@dataclass(frozen=True)
class RollStep:
    action: str  # "done" | "wait" | "delete"
    pod: str | None = None
    reason: str = ""


def roll_step(pods: list[PodView], desired_hash: str, replicas: int, rolling: bool = False, last: frozenset[str] = frozenset()) -> RollStep:
    """One step of a rolling restart: highest ordinal first, one pod at a time, and only while
    every other pod is Ready with its recovery finished. A roll under way (``rolling``) is done
    only when the last restarted pod is back, Ready and recovered.

    An outdated pod that is not Ready goes first, without waiting for it: it serves nothing
    already, and it may never become Ready (a broken image the user has since reverted), so
    waiting for it would wedge the roll that is meant to repair it.

    Pods named in ``last`` (replica groups' masters) go after every other outdated pod."""
    current = {p.ordinal: p for p in pods if 0 <= p.ordinal < replicas}
    outdated = sorted((p for p in current.values() if p.restart_hash != desired_hash), key=lambda p: (p.name in last, -p.ordinal))
    if not outdated and not rolling:
        return RollStep("done")
    broken = [p for p in outdated if not p.ready and not p.deleting]
    healthy_otherwise = all(
        (p := current.get(o)) is not None and not p.deleting and (p in broken or (p.ready and p.recovered)) for o in range(replicas)
    )
    if broken and healthy_otherwise:
        return RollStep(
            "delete",
            broken[0].name,
            f"replacing {broken[0].name} (outdated and not ready" + (f": {broken[0].pending}" if broken[0].pending else "") + ")",
        )
    for ordinal in range(replicas - 1, -1, -1):
        p = current.get(ordinal)
        if p is None or p.deleting:
            return RollStep("wait", reason=f"waiting for pod {ordinal} to be recreated")
        if not p.ready:
            return RollStep("wait", p.name, f"waiting for {p.name} to become ready")
        if not p.recovered:
            state = p.recovery.get("mode", "?") + " recovery " + p.recovery.get("state", "unknown")
            return RollStep("wait", p.name, f"waiting for {p.name} to finish recovering ({state})")
    if not outdated:
        return RollStep("done")
    return RollStep("delete", outdated[0].name, f"restarting {outdated[0].name} (outdated)")


def scale_down_blocker(removed: list[PodView]) -> str | None:
    """Why nodes that would be removed cannot go yet (None when they can)."""
    for p in sorted(removed, key=lambda p: p.ordinal):
        if p.store is None:
            return f"{p.name} does not answer ({p.error or 'no address'}); its messages cannot be checked"
        lag = {g: n for g, n in (p.store.get("consumer_lag") or {}).items() if int(n) > 0}
        if lag:
            live = p.store.get("group_members") or {}
            worst = ", ".join(f"{g}: {n}{_members_note(int(live.get(g, 0)))}" for g, n in sorted(lag.items()))
            return f"{p.name} holds messages not yet consumed by {worst}"
        held = int(p.store.get("messages_held", 0))
        if held and not p.store.get("consumer_lag"):
            return f"{p.name} holds {held} messages and no consumer group has read them"
    return None


def _members_note(n: int) -> str:
    return f" ({n} live member{'s' if n != 1 else ''})" if n else " (no live member)"


def pending_pods(pods: list[PodView]) -> list[str]:
    """Pods that do not run, each with the reason Kubernetes gives."""
    return [f"{p.name}: {p.pending}" for p in sorted(pods, key=lambda p: p.ordinal) if p.pending and not p.deleting]


def unpullable_images(pods: list[PodView]) -> str:
    """What to tell a user whose pods cannot pull their image: which image, which pods, and
    what to do (the chart's default image is not published anywhere)."""
    by_image: dict[str, list[str]] = {}
    for p in sorted(pods, key=lambda p: p.ordinal):
        if p.unpullable and not p.deleting:
            by_image.setdefault(p.unpullable, []).append(p.name)
    return "; ".join(
        f"image {image} cannot be pulled for {', '.join(names)}: build it (make image), push it where the cluster pulls "
        "from (or kind load it) and set spec.image (the chart's image.repository and image.tag); msgstore's default "
        "image is not published"
        for image, names in by_image.items()
    )


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(conditions: list[dict[str, Any]], ctype: str, status: bool, reason: str, message: str = "") -> bool:
    """Update one condition in place (lastTransitionTime only moves on a change); True on a change."""
    value = "True" if status else "False"
    for c in conditions:
        if c["type"] == ctype:
            changed = c["status"] != value
            if changed:
                c["lastTransitionTime"] = now()
            c.update(status=value, reason=reason, message=message)
            return changed
    conditions.append({"type": ctype, "status": value, "reason": reason, "message": message, "lastTransitionTime": now()})
    return True


def condition(conditions: list[dict[str, Any]], ctype: str) -> dict[str, Any] | None:
    return next((c for c in conditions if c["type"] == ctype), None)


def disk_pressure(pods: list[PodView], max_used_percent: int) -> list[str]:
    out = []
    for p in pods:
        st = p.store or {}
        usage = st.get("disk_usage", -1)
        if st.get("disk_full") or (usage is not None and usage >= max_used_percent / 100):
            out.append(f"{p.name} at {usage:.0%}" + (" (writes refused)" if st.get("disk_full") else ""))
    return out


def pod_figures(p: PodView, desired_hash: str) -> dict[str, Any]:
    st = p.store or {}
    rec = st.get("recovery", {})
    usage = st.get("disk_usage")
    out = {"name": p.name, "ready": p.ready, "upToDate": p.restart_hash == desired_hash}
    if p.ip:
        out["ip"] = p.ip
    if st:
        out.update(
            {
                "recoveryMode": rec.get("mode", ""),
                "recoveryState": rec.get("state", ""),
                "recoveryMs": int(rec.get("duration_ms", 0)),
                "diskUsagePercent": -1 if usage is None or usage < 0 else round(usage * 100),
                "diskFull": bool(st.get("disk_full")),
                "minOffset": int(st.get("min_phy_offset", 0)),
                "maxOffset": int(st.get("max_phy_offset", 0)),
                "configGeneration": int(st.get("config_generation", 0)),
                "messagesHeld": int(st.get("messages_held", 0)),
            }
        )
    if p.error:
        out["error"] = p.error
    return out
