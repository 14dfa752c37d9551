"""``serve``: the session API over HTTP (``trio_agent.serve``, the ``[serve]``
extra) with your own agent, until SIGTERM or Ctrl-C drains it."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import trio

from ._app import load_agent
from ._drive import EXIT_OK
from ._errors import UsageError
from ._signals import drain_on_signals

__all__ = ["serve"]


def serve(args: argparse.Namespace) -> int:
    try:
        from ..serve import Server
    except ImportError as exc:
        raise UsageError(
            f"serve needs the [serve] extra (pip install 'trio-agent[serve]'): {exc}"
        ) from None
    app = load_agent(args.agent)
    token = args.token if args.token is not None else os.environ.get("TRIO_AGENT_TOKEN") or None
    server = Server(
        app.maker(),
        store=args.store,
        dsn=args.dsn,
        schema=args.schema,
        host=args.host,
        port=args.port,
        token=token,
        on_disconnect=args.on_disconnect,
        drain_seconds=args.drain_seconds,
        keepalive_seconds=args.keep_alive or None,
        idle_seconds=args.idle_seconds or None,
    )

    where = args.store if args.store is not None else repr(server.hub.place.store)

    async def body() -> int:
        with trio.CancelScope() as cancel:
            async with trio.open_nursery() as nursery:

                async def run(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                    await server.run(task_status=task_status)
                    nursery.cancel_scope.cancel()  # stopped: the signals task too

                nursery.start_soon(
                    drain_on_signals, "serve", lambda: server.hub.draining, server.stop, cancel
                )
                urls = await nursery.start(run)
                print(
                    f"trio-agent serve: listening on {' '.join(urls)}; sessions in "
                    f"{where}; --agent {args.agent}",
                    file=sys.stderr,
                    flush=True,
                )
        print("trio-agent serve: stopped", file=sys.stderr)
        return EXIT_OK

    return trio.run(body)
