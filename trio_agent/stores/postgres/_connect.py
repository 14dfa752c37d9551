"""How ``PostgresStore`` talks to PostgreSQL, directly or through a pooler such as
PgBouncer in transaction pooling mode (each transaction may run on another
server connection, shared with other clients).

So the store keeps no state in a server session: no startup ``options`` (a
pooler refuses them, or drops them without a word); its timeouts are ``SET
LOCAL`` at the start of every transaction (``transaction``), in one statement
string with the ``BEGIN``, so they cost no round trip of their own; advisory
locks only by transaction. Two things need a session, and are used only on a
connection that is not behind a pooler (``behind_pooler``: a pooler answers
the client's startup with a process id of its own, to route cancel requests,
never the server's): ``LISTEN``, and server-side prepared statements (psycopg
prepares a statement run 5 times on a connection; through a transaction
pooler it is unknown on the next server connection, or another client's of
the same name is found there: ``POOLED`` turns that off). On a direct
connection the hot statement (a flush) takes half the time prepared.

Importing this module gives psycopg's loggers a ``NullHandler``: a library's
dependencies are silent unless the application configures logging (without
it, logging's last resort would print the pool's reconnection warnings on
stderr while the database is away); records still reach the application's
handlers when it has some.
"""

from __future__ import annotations

import contextlib
import logging
import select
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from psycopg import Connection

__all__ = [
    "CONNECTION",
    "POOLED",
    "STATEMENT_TIMEOUT_MS",
    "LOCK_TIMEOUT_MS",
    "behind_pooler",
    "check_connection",
    "transaction",
]

for _name in ("psycopg", "psycopg.pool", "psycopg_pool"):
    logging.getLogger(_name).addHandler(logging.NullHandler())

STATEMENT_TIMEOUT_MS: Final = 60_000
"""A statement that hangs ends (the writer fails, a resume goes on)."""
LOCK_TIMEOUT_MS: Final = 30_000
"""So does a wait for a lock."""

_BEGIN: Final = (  # no parameters: sent as one simple query, one round trip
    f"BEGIN; SET LOCAL statement_timeout = {STATEMENT_TIMEOUT_MS}; "
    f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}"
)

_KEEPALIVES: Final[dict[str, Any]] = {
    "autocommit": True,  # transactions are ``transaction``'s, explicit
    "connect_timeout": 10,
    # keepalives find a peer gone without a word
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}

CONNECTION: Final[dict[str, Any]] = dict(_KEEPALIVES)
"""A connection straight to PostgreSQL (or one to ``LISTEN`` on)."""
POOLED: Final[dict[str, Any]] = {**_KEEPALIVES, "prepare_threshold": None}
"""A connection through a pooler (and the first one, that finds out which)."""


@contextlib.contextmanager
def transaction(connection: Connection[Any]) -> Iterator[Connection[Any]]:
    """One transaction on ``connection``, with the store's timeouts ``SET LOCAL``
    in it: committed when the block ends, rolled back when it raises (a rollback
    that fails too, the connection lost, leaves the block's error to be seen;
    the pool then drops the connection). The block must not commit itself."""
    connection.execute(_BEGIN)
    committed = False
    try:
        yield connection
        connection.commit()
        committed = True
    finally:
        if not committed and not connection.closed:
            with contextlib.suppress(Exception):
                connection.rollback()


def behind_pooler(connection: Connection[Any]) -> bool:
    """Whether ``connection`` reaches PostgreSQL through a pooler: the process id
    it was given at startup is not its server process's. (A pooler makes up
    its own, to route a cancel request; PostgreSQL gives its backend's.)"""
    row = connection.execute("SELECT pg_backend_pid()").fetchone()
    return row is None or row[0] != connection.info.backend_pid


def check_connection(connection: Connection[Any]) -> None:
    """Before a pooled connection is used: an idle connection has nothing to read, so
    one whose socket is readable heard from the server while idle (it was ended:
    a restart, ``pg_terminate_backend``) and is tested with an empty query, which
    raises when it is dead (the pool then uses another). No round trip otherwise."""
    try:
        readable = bool(select.select([connection.fileno()], [], [], 0)[0])
    except (OSError, ValueError):
        readable = True
    if readable:
        from psycopg_pool import ConnectionPool

        ConnectionPool.check_connection(connection)
