"""``serve``: run a store node."""

from __future__ import annotations

import asyncio
import sys

from . import allocator
from .common import store_settings, token_source

# How long a thread may hold the GIL while another waits for it. A node's event loop hands each
# put to a worker thread and back, and gRPC's own threads take turns with both: at Python's
# default 5 ms a wake-up could wait a whole interval. At 1 ms, 5,000 sends/s of 1 KiB were
# acknowledged at p50 4.5 ms instead of 7.7 (medians of six runs each, a consumer running), with
# batched-send and SYNC-replication rates unchanged within their noise (2026-11-28).
GIL_SWITCH_INTERVAL_S = 0.001


def cmd_serve(args) -> int:
    from .. import logs
    from ..api.member import ServerOptions, StartError
    from ..api.server import serve
    from ..store import metadata
    from ..store.config import ConfigError

    logs.setup(args.log_format, args.log_level)
    metadata.SET_ASIDE_UNREADABLE = args.set_aside_unreadable_config
    try:
        settings = store_settings(args)
        from ..store import StoreConfig

        StoreConfig(settings)  # fail fast, naming the key
    except (ConfigError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    peers = [p for p in (args.peers or "").split(",") if p.strip()]
    options = ServerOptions(
        data_dir=args.data_dir,
        host=args.host,
        port=args.port,
        advertise=args.advertise,
        access_points=None if args.access_point is None else [a.strip() for a in args.access_point.split(",") if a.strip()],
        node_name=args.node_name,
        settings=settings,
        admin_token=token_source(args.admin_token_file, args.admin_token_env),
        data_token=token_source(args.token_file, None),
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        tls_ca=args.tls_ca,
        tls_server_name=args.tls_server_name,
        health_port=None if args.health_port < 0 else args.health_port,
        peers=peers,
        peers_dns=args.peers_dns,
        peers_file=args.peers_file,
        metrics_port=None if args.metrics_port < 0 else args.metrics_port,
        metrics_host=args.metrics_host,
        grace_s=args.grace,
        lock_wait_s=args.lock_wait,
        group=args.group,
        replica_of=args.replica_of,
        roles_file=args.roles_file,
        arbiter=args.arbiter,
        arbiter_ttl_s=args.arbiter_ttl,
        failover_after_s=args.failover_after,
    )
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    allocator.tune()
    try:
        return asyncio.run(serve(options))
    except KeyboardInterrupt:
        return 0
    except (StartError, metadata.UnreadableConfig) as e:  # one line, not a traceback
        print(f"error: {e}", file=sys.stderr)
        return 2
