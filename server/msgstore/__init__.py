"""msgstore: a durable, RocketMQ-compatible message store for Kubernetes."""

import os

# gRPC's core (from 1.81, grpc/grpc#43055) runs fork handlers in a process that has used it,
# and about one child in a hundred, forked while gRPC is busy, aborts before it reaches exec
# (SIGABRT, "epoll_wait error: Bad file descriptor"): the JVM PySpark launches (its Popen has a
# preexec_fn, so a real fork), any such subprocess. gRPC Python never supported using gRPC in a
# forked child, so nothing is lost by turning the handlers off. gRPC reads this when it is
# imported: set here, before any of our modules imports it; a caller's own setting is kept.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

__version__ = "0.1.0"
