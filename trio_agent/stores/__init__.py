"""Where session ledgers live: a JSONL file per session (the default), or SQLite.

Both write records in order and load them back checked, and both give a
session one writer at a time: the writer holds an flock (released by the
kernel when its process dies, kill -9 included), and a second one is
refused at once with ``SessionLockedError`` naming the holder. Writing
never blocks the trio thread on a disk flush: JSONL writes each line to the
OS inline and fsyncs in a small shared thread pool (group commit); SQLite
runs ``sqlite3`` in a worker thread.
"""

from ._base import LoadedSession as LoadedSession
from ._base import SessionStore as SessionStore
from ._base import parse_jsonl as parse_jsonl
from ._jsonl import JsonlStore as JsonlStore
from ._postgres import PostgresStore as PostgresStore
from ._sqlite import SqliteStore as SqliteStore

__all__ = [
    "JsonlStore",
    "LoadedSession",
    "PostgresStore",
    "SessionStore",
    "SqliteStore",
    "parse_jsonl",
]
