"""``fork``: start a new session from a recorded one's history through the end of
a turn (``Agent.fork``), in the same store or another; the source is only read.

Where a session lives is said as ``show`` says it: a ``.jsonl`` ledger, or a
session id with ``--store`` (a directory of ledgers, or a SQLite database) or
``--dsn`` (PostgreSQL); ``--to-store``/``--to-dsn`` name another store for the
new session (default: the source's). A turn that is not there, or a new id
that is taken, is said so (exit 1), and nothing is written.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

import trio

from ..session._agent import Agent
from ..stores import JsonlStore, SqliteStore
from ._drive import EXIT_OK
from ._errors import UsageError
from ._output import visible
from ._stored import is_sqlite

__all__ = ["fork"]


def _source(args: argparse.Namespace) -> tuple[Any, str, str]:
    """The source's store, its session id, and how the store is named on a command
    line (to name the new session the same way)."""
    if args.store is None and args.dsn is None:
        file = Path(args.session)
        if file.suffix != ".jsonl" or not file.stem:
            raise UsageError(
                f"a ledger is a .jsonl file, got {args.session!r} (a session id needs "
                "--store or --dsn)"
            )
        if not file.is_file():
            raise UsageError(f"no ledger at {args.session}")
        return JsonlStore(file.parent), file.stem, ""
    if args.dsn is not None:
        return _postgres(args.dsn, args.schema, create=False), args.session, "--dsn"
    path = Path(args.store)
    if not path.exists():
        raise UsageError(f"no store at {args.store}")
    return _store_at(path), args.session, f"--store {shlex.quote(args.store)}"


def _target(args: argparse.Namespace, source: Any) -> tuple[Any, str]:
    if args.to_dsn is not None:
        return _postgres(args.to_dsn, args.schema, create=True), "--dsn"
    if args.to_store is None:
        return source, ""
    path = Path(args.to_store)
    return _store_at(path), f"--store {shlex.quote(args.to_store)}"


def _store_at(path: Path) -> Any:
    """A directory (made if missing) is a JSONL store; a file a SQLite database (made
    if missing, when named ``.db``/``.sqlite``)."""
    if path.is_dir() or (not path.exists() and path.suffix not in (".db", ".sqlite")):
        return JsonlStore(path)
    if path.exists() and not is_sqlite(path):
        raise UsageError(f"{path} is neither a directory of ledgers nor a SQLite database")
    return SqliteStore(path)


def _postgres(dsn: str, schema: str, *, create: bool) -> Any:
    from ..stores import PostgresStore

    return PostgresStore(dsn, schema=schema, create_schema=create)


async def _close(store: Any) -> None:
    close = getattr(store, "aclose", None)
    if close is not None:
        await close()


def fork(args: argparse.Namespace) -> int:
    """Fork; print the new session's id and how to go on with it."""
    if args.at_turn < 0:
        raise UsageError(f"--at-turn must be 0 or more, got {args.at_turn}")
    source, session_id, source_name = _source(args)
    target, target_name = _target(args, source)

    async def body() -> str:
        try:
            return await Agent.fork(
                source,
                session_id,
                at_turn=args.at_turn,
                new_session_id=args.new_id,
                to_store=None if target is source else target,
            )
        finally:
            for store in {id(source): source, id(target): target}.values():
                await _close(store)

    new = trio.run(body)
    if isinstance(target, JsonlStore):  # a directory of ledgers: name the file
        again = f"trio-agent resume {shlex.quote(str(target.path(new)))}"
    else:  # resume reads .jsonl ledgers: in code, any store
        where = target_name or source_name
        shown = f"trio-agent show {shlex.quote(new)} {where}"
        again = f"Agent.resume(store, {new!r}, ...) (see it: {shown})"
    print(visible(f"forked {session_id} at turn {args.at_turn} into {new}"))
    print(visible(f"go on with: {again}"))
    sys.stdout.flush()
    return EXIT_OK
