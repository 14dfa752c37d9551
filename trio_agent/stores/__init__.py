"""Where session ledgers live: a JSONL file per session (the default), SQLite,
or PostgreSQL.

All write records in order and load them back checked, and all give a
session one writer at a time: for JSONL and SQLite the writer holds an flock
(released by the kernel when its process dies, kill -9 included); for
PostgreSQL a lease whose epoch fences every write (``LeaseLostError``). A
second writer is refused at once with ``SessionLockedError`` naming the
holder. Writing never blocks the trio thread: JSONL writes each line to the
OS inline and fsyncs in a small shared thread pool (group commit); SQLite and
PostgreSQL run their drivers in worker threads. Each writes a ``snapshot``
record now and then (``SnapshotPolicy``), so a resume replays from the last one
(``load_tail``) instead of from the start. Each store is imported when first
named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._public import lazy as _lazy

if TYPE_CHECKING:
    from ..ledger._policy import SnapshotPolicy as SnapshotPolicy
    from ._base import LoadedSession as LoadedSession
    from ._base import SessionStore as SessionStore
    from ._base import parse_jsonl as parse_jsonl
    from ._jsonl import JsonlStore as JsonlStore
    from ._sqlite import SqliteStore as SqliteStore
    from .postgres import PostgresStore as PostgresStore

__all__ = [
    "JsonlStore",
    "LoadedSession",
    "PostgresStore",
    "SessionStore",
    "SnapshotPolicy",
    "SqliteStore",
    "parse_jsonl",
]

# Each store is imported when first named, with what it needs (``sqlite3``, the
# PostgreSQL driver's glue): an agent that keeps its session in memory, or in
# JSONL, loads none of the others. Each name is published as this page's.
__getattr__ = _lazy(
    globals(),
    {
        "JsonlStore": "._jsonl",
        "LoadedSession": "._base",
        "PostgresStore": ".postgres",
        "SessionStore": "._base",
        "SnapshotPolicy": "..ledger._policy",
        "SqliteStore": "._sqlite",
        "parse_jsonl": "._base",
    },
)
