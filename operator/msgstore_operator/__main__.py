"""``msgstore-operator`` (or ``python -m msgstore_operator``): run the operator.

One replica (``standalone``: no peering objects needed); every namespace, or only
``WATCH_NAMESPACE``; a liveness endpoint on :8080/healthz.
"""

from __future__ import annotations

import argparse
import os
import sys

ENVIRONMENT = """environment:
  WATCH_NAMESPACE             watch this namespace only (default: every namespace)
  MSGSTORE_IMAGE              store image when a MessageStore names none
  MSGSTORE_OPERATOR_INTERVAL  seconds between passes over every store (default 10)
  MSGSTORE_LIVENESS           liveness endpoint (default http://0.0.0.0:8080/healthz)
  MSGSTORE_OPERATOR_METRICS   HOST:PORT for Prometheus metrics (stores Ready, rolls running); unset: none (the chart: 0.0.0.0:8081)
  MSGSTORE_LOG_FORMAT         json (default) or plain
  MSGSTORE_OPERATOR_VERBOSE   1 for debug logs
Credentials: in-cluster (the pod's ServiceAccount), else the kubeconfig."""


def parser() -> argparse.ArgumentParser:
    from msgstore import __version__

    p = argparse.ArgumentParser(
        prog="msgstore-operator",
        description="The Kubernetes operator for MessageStore objects.",
        epilog=ENVIRONMENT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"msgstore-operator {__version__}")
    return p


def main(argv: list[str] | None = None) -> int:
    parser().parse_args(argv)
    import kopf

    from . import handlers  # noqa: F401  (registers the handlers)

    kopf.configure(
        verbose=os.environ.get("MSGSTORE_OPERATOR_VERBOSE") == "1",
        log_format=kopf.LogFormat.JSON if os.environ.get("MSGSTORE_LOG_FORMAT", "json") == "json" else kopf.LogFormat.PLAIN,
    )
    namespace = os.environ.get("WATCH_NAMESPACE")
    listen = os.environ.get("MSGSTORE_OPERATOR_METRICS", "")
    if listen:
        from . import metrics

        host, _, port = listen.rpartition(":")
        metrics.serve(int(port), host or "0.0.0.0")
    kopf.run(
        standalone=True,
        clusterwide=not namespace,
        namespaces=[namespace] if namespace else (),
        liveness_endpoint=os.environ.get("MSGSTORE_LIVENESS", "http://0.0.0.0:8080/healthz"),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
