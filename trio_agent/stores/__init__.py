"""Where session ledgers live: a JSONL file per session (the default), SQLite,
or PostgreSQL.

All write records in order and load them back checked, and all give a
session one writer at a time: for JSONL and SQLite the writer holds an flock
(released by the kernel when its process dies, kill -9 included); for
PostgreSQL a lease whose epoch fences every write (``LeaseLostError``). A
second writer is refused at once with ``SessionLockedError`` naming the
holder. Writing never blocks the trio thread: JSONL writes each line to the
OS inline and fsyncs in a small shared thread pool (group commit); SQLite and
PostgreSQL run their drivers in worker threads.
"""

from .._public import publish as _publish
from ._base import LoadedSession as LoadedSession
from ._base import SessionStore as SessionStore
from ._base import parse_jsonl as parse_jsonl
from ._jsonl import JsonlStore as JsonlStore
from ._sqlite import SqliteStore as SqliteStore
from .postgres._store import PostgresStore as PostgresStore

__all__ = [
    "JsonlStore",
    "LoadedSession",
    "PostgresStore",
    "SessionStore",
    "SqliteStore",
    "parse_jsonl",
]

_publish(globals())  # each name says this page is its module (tracebacks, reprs, pickles)
