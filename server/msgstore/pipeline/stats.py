"""``msgstore pipeline stats``: per topic and hour, messages, bytes and body-size percentiles;
printed as a table, and written as CSV and a PNG chart when an output directory is given."""

from __future__ import annotations

import csv
import os

COLUMNS = ["topic", "hour", "messages", "bytes", "p50", "p90", "p99", "max_size"]


def compute(df) -> list[dict]:
    from pyspark.sql import functions as F

    size = F.length("body")
    rows = (
        df.groupBy("topic", F.date_trunc("hour", "store_timestamp").alias("hour"))
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.sum(size).alias("bytes"),
            F.percentile_approx(size, [0.5, 0.9, 0.99], 100000).alias("pct"),
            F.max(size).alias("max_size"),
        )
        .orderBy("topic", "hour")
        .collect()
    )
    return [
        {
            "topic": r["topic"],
            "hour": r["hour"].strftime("%Y-%m-%d %H:00"),
            "messages": r["messages"],
            "bytes": r["bytes"] or 0,
            "p50": r["pct"][0],
            "p90": r["pct"][1],
            "p99": r["pct"][2],
            "max_size": r["max_size"],
        }
        for r in rows
    ]


def write(rows: list[dict], out: str) -> tuple[str, str]:
    os.makedirs(out, exist_ok=True)
    csv_path = os.path.join(out, "stats.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    png_path = os.path.join(out, "stats.png")
    chart(rows, png_path)
    return csv_path, png_path


def chart(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hours = sorted({r["hour"] for r in rows})
    topics = sorted({r["topic"] for r in rows})
    fig, ax = plt.subplots(figsize=(max(6, len(hours) * 0.6 + 3), 4))
    bottom = [0] * len(hours)
    for t in topics:
        counts = {r["hour"]: r["messages"] for r in rows if r["topic"] == t}
        values = [counts.get(h, 0) for h in hours]
        ax.bar(hours, values, bottom=bottom, label=t)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_ylabel("messages")
    ax.set_title("messages per hour and topic")
    ax.legend(loc="upper left", fontsize="small")
    plt.setp(ax.get_xticklabels(), rotation=45, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
