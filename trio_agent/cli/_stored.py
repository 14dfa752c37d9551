"""Reading a recorded session for ``show``, read-only, wherever a store keeps it:
a ``.jsonl`` ledger, a directory of them (``JsonlStore``), or a SQLite database
(``SqliteStore``); PostgreSQL is ``_fleet.read_session``.

A store is told by what it is: a directory is a JSONL store; a file is a SQLite
database when it starts with SQLite's header (whatever its name). A SQLite
database is opened read-only (``mode=ro``): reading a session never creates,
changes or takes over anything. Each mistake (no such store, no such session,
a file that is neither) is a usage error that says what the store holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from ..ledger._records import LedgerError
from ..stores._base import LoadedSession, check_session_id, parse_jsonl, stored_body
from ..stores._lock import holder_of
from ._errors import UsageError

__all__ = ["SQLITE_HEADER", "is_sqlite", "read_stored", "store_hint"]

SQLITE_HEADER: Final = b"SQLite format 3\x00"
LISTED: Final = 20  # session ids named in an error, at most


def is_sqlite(path: Path) -> bool:
    """Whether ``path`` is a file that starts as a SQLite database does."""
    try:
        with path.open("rb") as file:
            return file.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def store_hint(path: Path) -> str | None:
    """What to write instead when ``show`` is given a store as a ledger (None:
    ``path`` is no store)."""
    if path.is_dir():
        held = _listed(sorted(p.stem for p in path.glob("*.jsonl")))
        return (
            f"{path} is a directory of ledgers: name the session with --store {path} SESSION{held}"
        )
    if is_sqlite(path):
        held = _listed(_sqlite_sessions(path))
        return f"{path} is a SQLite store: name the session with --store {path} SESSION{held}"
    return None


def read_stored(store: str, session_id: str) -> tuple[LoadedSession, str | None]:
    """The session's records in ``store`` (a directory or a SQLite file), and who
    writes it now (None: nobody)."""
    try:
        check_session_id(session_id)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"SESSION: {exc}") from None
    path = Path(store)
    if path.is_dir():
        file = path / f"{session_id}.jsonl"
        try:
            data = file.read_bytes()
        except FileNotFoundError:
            held = _listed(sorted(p.stem for p in path.glob("*.jsonl")))
            raise UsageError(f"no session {session_id!r} in {path}{held}") from None
        return parse_jsonl(session_id, data), holder_of(file)
    if not path.exists():
        raise UsageError(f"--store {store}: no such directory or file")
    if not is_sqlite(path):
        raise UsageError(
            f"--store {store}: neither a directory of .jsonl ledgers nor a SQLite database"
            + (
                " (a .jsonl file is one session: `trio-agent show FILE.jsonl`)"
                if path.suffix == ".jsonl"
                else ""
            )
        )
    bodies = _sqlite_bodies(path, session_id)
    loaded = parse_jsonl(session_id, b"\n".join(bodies) + b"\n")
    return loaded, holder_of(Path(f"{path}.locks") / f"{session_id}.lock")


def _listed(sessions: list[str]) -> str:
    if not sessions:
        return " (it holds no session)"
    more = f", ... ({len(sessions)} in all)" if len(sessions) > LISTED else ""
    return f" (it holds: {', '.join(sessions[:LISTED])}{more})"


def _query(path: Path, sql: str, *parameters: str) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` in the database at ``path``, opened read-only; a usage
    error when it is no trio-agent store, a ``LedgerError`` when it cannot be read."""
    import sqlite3

    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise LedgerError(f"SQLite store {path}: cannot open it: {exc}") from None
    try:
        tables = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'records'"
        ).fetchall()
        if not tables:
            raise UsageError(
                f"{path} is a SQLite database, but no trio-agent store (no table records)"
            )
        return db.execute(sql, parameters).fetchall()
    except sqlite3.Error as exc:
        raise LedgerError(f"SQLite store {path}: cannot read it: {exc}") from None
    finally:
        db.close()


def _sqlite_sessions(path: Path) -> list[str]:
    try:
        rows = _query(path, "SELECT DISTINCT session_id FROM records ORDER BY session_id")
    except (UsageError, LedgerError):
        return []
    return [str(row[0]) for row in rows]


def _sqlite_bodies(path: Path, session_id: str) -> list[bytes]:
    rows = _query(path, "SELECT body FROM records WHERE session_id = ? ORDER BY seq", session_id)
    if not rows:
        held = _listed(_sqlite_sessions(path))
        raise UsageError(f"no session {session_id!r} in {path}{held}")
    return [stored_body(row[0]) for row in rows]
