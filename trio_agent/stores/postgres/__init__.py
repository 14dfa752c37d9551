"""The PostgreSQL store (the ``[postgres]`` extra): ``PostgresStore`` keeps each
session's records as rows, fences every write with the session's lease, and
commits the flushes of many sessions together.

``_store`` is the store (its schema, loading, taking and freeing leases, the
heartbeat); ``_commit`` the group commit.
"""

from __future__ import annotations

from ..._public import publish as _publish
from ._store import PostgresStore as PostgresStore

__all__ = ["PostgresStore"]

_publish(globals())  # each name says this page is its module (tracebacks, reprs, pickles)
