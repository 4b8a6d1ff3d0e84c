"""``msgstore pipeline archive|stats|verify``; Spark is imported only when one of them runs."""

from __future__ import annotations

import json
import os
import sys


def add_commands(sub) -> None:
    p = sub.add_parser("pipeline", help="Spark jobs: archive, stats, verify (needs the spark extra)")
    jobs = p.add_subparsers(dest="job", required=True)

    a = jobs.add_parser("archive", help="new messages to Parquet, partitioned by topic and date (incremental)")
    a.add_argument("--endpoints", required=True, help="any node's host:port (comma-separated for several)")
    a.add_argument("--topics", required=True, help="comma-separated")
    a.add_argument("--out", required=True, help="Parquet directory (appended to)")
    a.add_argument("--group", default="msgstore-archiver", help="consumer group that records the progress")
    a.add_argument("--allow-data-loss", action="store_true", help="skip offsets retention already deleted")

    s = jobs.add_parser("stats", help="per topic and hour: messages, bytes, size percentiles")
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument("--endpoints")
    src.add_argument("--path", help="store root or directory of segment files (offline)")
    s.add_argument("--topics", help="comma-separated (required with --endpoints)")
    s.add_argument("--out", help="directory for stats.csv and stats.png")

    v = jobs.add_parser("verify", help="check a data directory's queues and index against its records")
    v.add_argument("dir")

    for job in (a, s, v):
        job.add_argument("--master", help="Spark master URL (default local[*])")
        job.add_argument("--token", help="data-plane token, when the store requires one")
        job.add_argument(
            "--access-key", default=os.environ.get("MSGSTORE_ACCESS_KEY") or None, help="read as this user (env MSGSTORE_ACCESS_KEY)"
        )
        job.add_argument("--secret-file", help="the user's secret key (or env MSGSTORE_SECRET_KEY)")
    p.set_defaults(fn=run)


def _user(args) -> dict[str, str]:
    """A user's credentials from --access-key and --secret-file / MSGSTORE_SECRET_KEY."""
    from ..cli.common import credentials

    access_key, secret_key = credentials(args)
    return {"access_key": access_key, "secret_key": secret_key} if access_key and secret_key else {}


def run(args) -> int:
    try:
        from .session import spark_session
    except ImportError as e:
        print(f"error: Spark is not installed ({e}); pip install 'msgstore[spark]'", file=sys.stderr)
        return 2
    if args.job == "verify":
        from ..store.offline import check_store_dir

        check_store_dir(args.dir)  # (before Spark starts: an empty directory was "ok")
    spark = spark_session(args.master, app=f"msgstore-{args.job}", extra={"spark.ui.showConsoleProgress": "false"})
    try:
        return {"archive": _archive, "stats": _stats, "verify": _verify}[args.job](spark, args)
    except Exception as e:  # a job's refusal comes back wrapped in Spark's and Py4J's traces: its one line
        reason = job_error(str(e))
        if reason is None:
            raise
        print(f"error: {reason}", file=sys.stderr)
        return 1
    finally:
        spark.stop()


def job_error(text: str) -> str | None:
    """The msgstore refusal inside a failed Spark job's text (its last line naming one), in the
    command's terms; None when there is none (our bug or Spark's: the trace stays)."""
    found = None
    for line in text.splitlines():
        for kind in ("DataLossError: ", "OptionError: ", "StoreError: ", "msgstore source option "):
            at = line.find(kind)
            if at >= 0:
                found = line[at + len(kind) :] if kind.endswith(": ") else line[at:]
    if found is None:
        return None
    return found.replace("set failOnDataLoss=false to skip them", "--allow-data-loss skips them")


def _archive(spark, args) -> int:
    from .archive import archive

    res = archive(
        spark,
        args.endpoints.split(","),
        args.topics.split(","),
        args.out,
        group=args.group,
        fail_on_data_loss=not args.allow_data_loss,
        client_options={"token": args.token, **_user(args)},
    )
    if args.json:
        print(json.dumps({"rows": res.rows, "ranges": res.ranges}))
    else:
        print(f"archived {res.rows} messages to {args.out}" if res.rows else "nothing new to archive")
    return 0


def _stats(spark, args) -> int:
    from .stats import COLUMNS, compute, write

    reader = spark.read.format("msgstore")
    if args.path:
        reader = reader.option("path", args.path)
    else:
        if not args.topics:
            print("error: --topics is required with --endpoints", file=sys.stderr)
            return 2
        reader = reader.option("endpoints", args.endpoints)
    if args.topics:
        reader = reader.option("topics", args.topics)
    if args.token:
        reader = reader.option("token", args.token)
    for key, value in _user(args).items():
        reader = reader.option("accessKey" if key == "access_key" else "secretKey", value)
    rows = compute(reader.load())
    if args.json:
        print(json.dumps(rows))
    else:
        from ..output import table as _table

        print(_table(rows, COLUMNS) if rows else "no messages")
    if args.out:
        csv_path, png_path = write(rows, args.out)
        print(f"wrote {csv_path} and {png_path}", file=sys.stderr)
    return 0


def _verify(spark, args) -> int:
    from .verify import verify

    problems = verify(spark, args.dir)
    if args.json:
        print(json.dumps({"ok": not problems, "problems": problems}))
    else:
        for p in problems:
            print(f"PROBLEM  {p}")
        print("ok" if not problems else f"{len(problems)} problem(s)")
    return 0 if not problems else 1
