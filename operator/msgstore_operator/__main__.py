"""``msgstore-operator`` (or ``python -m msgstore_operator``): run the operator.

One replica (``standalone``: no peering objects needed); WATCH_NAMESPACE limits it to one
namespace; a liveness endpoint on :8080/healthz.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    import kopf

    from . import handlers  # noqa: F401  (registers the handlers)

    kopf.configure(verbose=os.environ.get("MSGSTORE_OPERATOR_VERBOSE") == "1",
                   log_format=kopf.LogFormat.JSON if os.environ.get("MSGSTORE_LOG_FORMAT", "json") == "json" else kopf.LogFormat.PLAIN)
    namespace = os.environ.get("WATCH_NAMESPACE")
    kopf.run(standalone=True, clusterwide=not namespace, namespaces=[namespace] if namespace else (),
             liveness_endpoint=os.environ.get("MSGSTORE_LIVENESS", "http://0.0.0.0:8080/healthz"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
