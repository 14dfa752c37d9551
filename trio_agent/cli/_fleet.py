"""``worker`` and ``submit``: the command line's part of the fleet (``trio_agent.fleet``),
and reading a session from PostgreSQL for ``show --dsn``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import msgspec
import trio

from .._settings import ModelSettings
from ..fleet._inbox import submit, wait_for_turn
from ..fleet._worker import Worker
from ..session._agent import Agent
from ..stores._base import LoadedSession
from ..stores.postgres._store import PostgresStore
from ..tools._tool import ToolSource
from ._app import load_agent, refuse_beside
from ._commands import sandbox_line, shared, workspace_for
from ._config import RunConfig, given, resolve
from ._drive import EXIT_FAILED, EXIT_OK
from ._mcp import all_tools, open_servers
from ._output import describe_end
from ._parser import DEFAULT_SYSTEM
from ._signals import drain_on_signals

__all__ = ["read_session", "submit_command", "worker"]


def _store(dsn: str, schema: str, **options: Any) -> PostgresStore:
    return PostgresStore(dsn, schema=schema, **options)


def read_session(dsn: str, schema: str, session_id: str) -> tuple[LoadedSession, str | None]:
    """The session's records and its lease's live holder (None: nobody)."""

    async def read() -> tuple[LoadedSession, str | None]:
        store = _store(dsn, schema, create_schema=False)
        try:
            loaded = await store.load(session_id)
            holder = await store.run("read the lease", store.lease_holder, session_id)
            return loaded, holder
        finally:
            await store.aclose()

    return trio.run(read)


def submit_command(args: argparse.Namespace) -> int:
    """Queue the message; print its input number (and with ``--wait`` the answer)."""

    async def body() -> int:
        store = _store(args.dsn, args.schema, create_schema=False, listen_dsn=args.listen_dsn)
        try:
            number = await submit(store, args.session, args.message, create=args.create)
            print(number, flush=True)
            if not args.wait:
                return EXIT_OK
            result = await wait_for_turn(store, args.session, number)
        finally:
            await store.aclose()
        print(result.final_text)
        if result.end.reason != "completed":
            print(f"turn {result.turn} {describe_end(result.end)}", file=sys.stderr)
            return EXIT_FAILED
        return EXIT_OK

    return trio.run(body)


def _session_maker(
    args: argparse.Namespace,
    root: Path,
    model: Any,
    sources: list[ToolSource],
    settings: ModelSettings | None,
    config: RunConfig,
    metadata: dict[str, Any],
) -> Any:
    """``make_agent``: each session with the workspace tools in ``root/SESSION``, a new
    one recording ``metadata`` (the configuration, sealed before trio started)."""

    async def make_agent(store: PostgresStore, session_id: str, new: bool) -> Agent:
        where = root / session_id
        await trio.to_thread.run_sync(lambda: where.mkdir(exist_ok=True))
        tools = workspace_for(where, args).tools()
        options = shared(model, tools, sources, settings, config)
        if new:
            return Agent(**options, metadata=metadata, store=store, session_id=session_id)
        return await Agent.resume(store, session_id, **options)

    return make_agent


def worker(args: argparse.Namespace) -> int:
    store_options = {"lease_seconds": args.lease_seconds, "listen_dsn": args.listen_dsn}
    if args.agent is not None:
        refuse_beside(args)
        app = load_agent(args.agent)
        store = _store(args.dsn, args.schema, **store_options)

        async def run_app() -> int:
            try:
                return await _work(args, store, app.maker(), f"--agent {args.agent}")
            finally:
                await store.aclose()

        return trio.run(run_app)
    why = "worker needs a model and a workspace root, or your own agent (--agent MODULE:NAME)"
    config = resolve(given(args), system=DEFAULT_SYSTEM, why=why)
    model = config.model_object()
    config = msgspec.structs.replace(config, base_url=model.base_url)  # as it is used
    assert config.workspace is not None  # needed by resolve
    root = Path(config.workspace)
    if not root.is_dir():
        raise ValueError(f"workspace root {root} is not a directory")
    workspace = workspace_for(root, args)
    names = list(workspace.tools().names())
    early = None if config.mcp else config.settings(names)  # a usage error before trio
    metadata = config.metadata()  # sealed: the key is read (or made) before trio runs
    store = _store(args.dsn, args.schema, **store_options)

    async def body() -> int:
        try:
            async with open_servers(config.mcp, config.mcp_env, cwd=str(root)) as servers:
                settings = early
                if servers:
                    every = all_tools(list(workspace.tools()), servers)
                    settings = config.settings([tool.name for tool in every])
                make = _session_maker(args, root, model, list(servers), settings, config, metadata)
                return await _work(args, store, make, sandbox_line(workspace))
        finally:
            await model.aclose()
            await store.aclose()

    return trio.run(body)


async def _work(args: argparse.Namespace, store: PostgresStore, make: Any, what: str) -> int:
    """Run a fleet worker with ``make`` until it drains (SIGTERM, Ctrl-C), saying
    when it starts (with ``what`` it runs) and stops."""
    fleet_worker = Worker(
        store, make, concurrency=args.concurrency, drain_seconds=args.drain_seconds
    )
    with trio.CancelScope() as cancel:
        async with trio.open_nursery() as nursery:

            async def work(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                await fleet_worker.run(task_status=task_status)
                nursery.cancel_scope.cancel()  # drained: the signals task too

            nursery.start_soon(
                drain_on_signals,
                "worker",
                lambda: fleet_worker.draining,
                fleet_worker.drain,
                cancel,
            )
            await nursery.start(work)
            print(
                f"trio-agent worker {store.holder}: {args.concurrency} sessions at "
                f"a time from {store!r}; {what}",
                file=sys.stderr,
                flush=True,
            )
    print(
        f"trio-agent worker {store.holder}: stopped after {fleet_worker.turns} turn(s)",
        file=sys.stderr,
    )
    return EXIT_OK
