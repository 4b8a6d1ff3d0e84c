"""``msgstore console``: the web console (msgstore/console) for a store, on a port of its own."""

from __future__ import annotations

import sys

from .common import connect, read_token


def cmd_console(args) -> int:
    try:
        from aiohttp import web

        from ..console.app import make_app
    except ImportError as e:
        print(f"error: the console needs its extra: pip install 'msgstore[console]' ({e})", file=sys.stderr)
        return 2
    from .. import logs
    from ..client import Client

    logs.setup("text", "INFO")
    if args.token_file or args.access_key:
        print("error: the console signs in as each person using it: give no --token-file or --access-key", file=sys.stderr)
        return 2
    admin_token = read_token(args.admin_token_file, args.admin_token_env)

    def make_client(access_key: str | None, secret_key: str | None, admin: bool = False) -> Client:
        """A user's client carries their keys and nothing else: the admin token is a full identity
        on the data plane too, so it goes only into the client of the read-only status views."""
        return connect(args, admin_token=admin_token if admin else None, access_key=access_key, secret_key=secret_key, send_streams=False)

    app = make_app(make_client, admin=admin_token is not None, kubernetes=args.kubernetes or "", sample_interval=args.sample_interval)
    print(f"msgstore console on http://{args.host}:{args.port} for {args.server}", file=sys.stderr, flush=True)
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None)
    return 0
