"""msgstore: a durable, RocketMQ-compatible message store for Kubernetes."""

import os

# gRPC's core runs its fork handlers in any process that has used gRPC (1.81.1 onwards; we run
# 1.85.1; grpc/grpc#43055): the child's handler restarts gRPC's poller, subprocess then closes
# its epoll descriptor before exec, and 1-2 % of such children abort (SIGABRT, "epoll_wait
# error: Bad file descriptor"). PySpark starts its JVM with fork and exec (a Popen with a
# preexec_fn), and so lost a CI run's Spark session. Off, gRPC cannot be used in a child forked
# without exec, which nothing here does. gRPC reads this when it is imported: set here, before
# any of our modules imports it; a caller's own setting is kept.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

__version__ = "0.1.0"
