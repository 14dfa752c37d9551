"""Sessions as rows of a PostgreSQL database, one writer per session by a fenced lease.

``psycopg`` 3 (the ``[postgres]`` extra) is synchronous here: its async API
is asyncio's, so every statement runs in a trio worker thread, through a
``psycopg_pool`` connection pool, at most ``max_connections`` at a time.

A writer holds the session's **lease**: a row (holder, epoch, expiry).
Taking a session (``create``, ``reopen``) increments its epoch, and only a
lease that is free or expired can be taken. Every flush checks, in its own
transaction and under a row lock on the lease, that the epoch is still the
writer's, and renews the expiry: a writer whose lease was taken over (it
was paused past the expiry, its worker lost the network) gets
``LeaseLostError`` and writes nothing, so two holders never interleave
records. Every ``psycopg`` failure reaches the caller as a ``LedgerError``.

Records are rows ``(session_id, seq, body)`` with ``(session_id, seq)``
unique; a flush is one transaction, committed with ``synchronous_commit``
off unless durability is asked for (then the commit waits for the WAL on
disk).
"""

from __future__ import annotations

import os
import re
import socket
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

import trio

from ..ledger import (
    LeaseLostError,
    LedgerError,
    SessionChangedError,
    SessionLockedError,
    SessionWriter,
    session_exists,
)
from ._base import LoadedSession, WriterState, check_session_id, parse_jsonl

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg_pool import ConnectionPool

__all__ = ["PostgresStore"]

T = TypeVar("T")

SCHEMA_VERSION: Final = 1
_SCHEMA_NAME: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}\Z")
Row = tuple[str, int, bytes]


def _schema_sql(schema: str) -> list[str]:
    return [
        f"CREATE SCHEMA IF NOT EXISTS {schema}",
        f"""CREATE TABLE IF NOT EXISTS {schema}.records (
            session_id text NOT NULL,
            seq bigint NOT NULL,
            body bytea NOT NULL,
            PRIMARY KEY (session_id, seq))""",
        f"""CREATE TABLE IF NOT EXISTS {schema}.leases (
            session_id text PRIMARY KEY,
            holder text NOT NULL,
            epoch bigint NOT NULL,
            expires timestamptz NOT NULL)""",
        f"""CREATE TABLE IF NOT EXISTS {schema}.meta (
            key text PRIMARY KEY,
            value text NOT NULL)""",
        f"""INSERT INTO {schema}.meta (key, value) VALUES ('schema_version', '{SCHEMA_VERSION}')
            ON CONFLICT (key) DO NOTHING""",
    ]


@final
class _Lease:
    """The writer's hold on its session: the epoch its appends are fenced by.
    ``release()`` (``WriterState`` calls it) marks it to be let go; the row is
    freed by the writer's close (a thread hop) or expires by itself."""

    __slots__ = ("epoch", "held")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.held = True

    def release(self) -> None:
        self.held = False


@final
class _PostgresWriter:
    """Buffers records; ``flush`` stores them in one fenced transaction.

    A flush is a round trip to the server, so the ledger does not flush before
    every event (``flush_per_event``): records are stored per step, and before
    the model is asked or a tool is dispatched, as the ledger's rule wants."""

    flush_per_event = False

    def __init__(self, store: PostgresStore, session_id: str, next_seq: int, lease: _Lease) -> None:
        self._store = store
        self._session_id = session_id
        self._next_seq = next_seq
        self._lease = lease
        self._state = WriterState(session_id, lease)
        self._pending: list[Row] = []

    def append(self, line: bytes) -> None:
        if not self._state.usable:
            self._state.check()
        self._pending.append((self._session_id, self._next_seq, line.rstrip(b"\n")))
        self._next_seq += 1

    def commit(self) -> None:
        """Store what was appended now, in the calling thread (a worker thread:
        the ``Agent`` creates sessions there)."""
        self._state.check()
        self._write(self._store.call, False)

    async def flush(self, durable: bool) -> None:
        if not self._state.usable:
            self._state.check()
        if not self._pending:
            return
        batch = list(self._pending)
        try:
            await self._store.run("write records", self._store.insert, self._lease, batch, durable)
        except LedgerError as exc:
            raise self._state.fail(exc) from exc.__cause__
        del self._pending[: len(batch)]  # only once stored: a cancelled flush keeps them

    def _write(self, call: Callable[..., Any], durable: bool) -> None:
        if self._pending:
            batch = list(self._pending)
            try:
                call("write records", self._store.insert, self._lease, batch, durable)
            except LedgerError as exc:
                raise self._state.fail(exc) from exc.__cause__
            del self._pending[: len(batch)]

    async def aclose(self) -> None:
        """Store what is pending, then free the lease (shielded: a cancelled close
        still lets the session go; an unfreed lease would only expire)."""
        if self._state.closed:
            return
        try:
            if self._state.usable:
                await self.flush(False)
        finally:
            self._state.close()
            with trio.CancelScope(shield=True):
                try:
                    await self._store.run(
                        "free the lease", self._store.free, self._session_id, self._lease
                    )
                except LedgerError:
                    pass  # it expires by itself


@final
class PostgresStore:
    """Session ledgers in PostgreSQL (``dsn``: a libpq connection string or URL),
    under ``schema`` (created with its tables on first use).

    ``lease_seconds``: how long a writer's hold on its session lasts without a
    flush renewing it; a session whose lease expired may be taken by another
    writer (``reopen``), and the old writer's next flush then raises
    ``LeaseLostError``. ``holder`` names this process in the lease (default:
    host and pid). ``close()``/``aclose()`` close the pool; a store that is
    collected closes it too.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "trio_agent",
        lease_seconds: float = 30.0,
        holder: str | None = None,
        max_connections: int = 8,
    ) -> None:
        if type(dsn) is not str or not dsn:
            raise ValueError("dsn must be a PostgreSQL connection string or URL")
        if type(schema) is not str or not _SCHEMA_NAME.match(schema):
            raise ValueError(f"schema must be a lower-case SQL name, got {schema!r}")
        if not (isinstance(lease_seconds, int | float) and 0 < lease_seconds < 86400):
            raise ValueError(f"lease_seconds must be a number of seconds, got {lease_seconds!r}")
        if type(max_connections) is not int or max_connections < 1:
            raise ValueError(f"max_connections must be an int >= 1, got {max_connections!r}")
        self.schema = schema
        self.lease_seconds = float(lease_seconds)
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}"
        self._dsn = dsn
        self._max = max_connections
        self._limiter = trio.CapacityLimiter(max_connections)
        self._pool: list[ConnectionPool] = []  # the open pool, shared with the finalizer
        self._pool_lock = threading.Lock()
        weakref.finalize(self, _close_pool, self._pool)

    def __repr__(self) -> str:
        return f"PostgresStore({_where(self._dsn)!r}, schema={self.schema!r})"

    # -- running work
    def call(self, what: str, function: Callable[..., T], *args: Any) -> T:
        """``function(connection, *args)`` in the calling thread with a pooled
        connection; every ``psycopg`` failure a ``LedgerError`` saying ``what``."""
        import psycopg

        try:
            with self._connections().connection() as connection:
                return function(connection, *args)
        except psycopg.Error as exc:
            raise LedgerError(f"{self!r}: cannot {what}: {exc}") from exc
        except OSError as exc:
            raise LedgerError(f"{self!r}: cannot {what}: {exc}") from exc

    async def run(self, what: str, function: Callable[..., T], *args: Any) -> T:
        """``call`` in a worker thread. Cancellation waits for it (a statement under
        way is not left half done)."""
        return await trio.to_thread.run_sync(
            self.call, what, function, *args, limiter=self._limiter
        )

    def _connections(self) -> ConnectionPool:
        """The pool, opened on first use: first one connection of our own (a server
        that cannot be reached fails at once, not after the pool's retries) makes
        the schema, then the pool."""
        with self._pool_lock:
            if not self._pool:
                import psycopg
                from psycopg_pool import ConnectionPool

                with psycopg.connect(self._dsn, autocommit=True, connect_timeout=10) as first:
                    self._create_schema(first)
                pool = ConnectionPool(
                    self._dsn,
                    min_size=0,
                    max_size=self._max,
                    open=False,
                    timeout=30.0,
                    kwargs={"autocommit": True},
                )
                pool.open(wait=False)
                self._pool.append(pool)
            return self._pool[0]

    def _create_schema(self, connection: Connection[Any]) -> None:
        with connection.transaction():
            connection.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.schema,))
            for statement in _schema_sql(self.schema):
                connection.execute(statement)
            row = connection.execute(
                f"SELECT value FROM {self.schema}.meta WHERE key = 'schema_version'"
            ).fetchone()
        if row is None or row[0] != str(SCHEMA_VERSION):
            raise LedgerError(
                f"{self!r}: schema {self.schema!r} is at version {row and row[0]}, this "
                f"trio-agent reads version {SCHEMA_VERSION}"
            )

    def close(self) -> None:
        """Close the connection pool (a later use opens it again)."""
        _close_pool(self._pool)

    async def aclose(self) -> None:
        """``close`` in a worker thread (shielded: it is short)."""
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self.close)

    # -- the work (run through ``call``/``run``)
    def take(self, connection: Connection[Any], session_id: str, new: bool, known: int) -> int:
        """Take the session's lease (free or expired), checking that the session
        does not exist (``new``) or still ends after ``known`` records; its epoch."""
        s = self.schema
        with connection.transaction():  # a failure below rolls the lease back too
            row = connection.execute(
                f"""INSERT INTO {s}.leases AS lease (session_id, holder, epoch, expires)
                    VALUES (%s, %s, 1, now() + make_interval(secs => %s))
                    ON CONFLICT (session_id) DO UPDATE
                        SET holder = excluded.holder, epoch = lease.epoch + 1,
                            expires = excluded.expires
                        WHERE lease.expires < now()
                    RETURNING epoch""",
                (session_id, self.holder, self.lease_seconds),
            ).fetchone()
            if row is None:
                raise self._locked(connection, session_id)
            (last,) = connection.execute(
                f"SELECT max(seq) FROM {s}.records WHERE session_id = %s", (session_id,)
            ).fetchone() or (None,)
            if new and last is not None:
                raise session_exists(session_id, repr(self))
            if not new and (-1 if last is None else last) != known - 1:
                raise SessionChangedError(
                    f"session {session_id!r} in {self!r} ends at record {last}, but it was "
                    f"loaded with {known} records: another writer wrote; load it again"
                )
            epoch: int = row[0]
            return epoch

    def _locked(self, connection: Connection[Any], session_id: str) -> SessionLockedError:
        row = connection.execute(
            f"""SELECT holder, ceil(extract(epoch FROM expires - now()))
                FROM {self.schema}.leases WHERE session_id = %s""",
            (session_id,),
        ).fetchone()
        holder, left = row if row is not None else ("?", "?")
        who = "this process" if holder == self.holder else repr(holder)
        return SessionLockedError(
            f"session {session_id!r} already has a writer: {who} holds the lease on "
            f"{session_id!r} in {self!r} (for {left} s more unless renewed)"
        )

    def insert(
        self, connection: Connection[Any], lease: _Lease, batch: Sequence[Row], durable: bool
    ) -> None:
        """Store ``batch`` in one transaction, fenced by ``lease``'s epoch (which is
        renewed): ``LeaseLostError``, with nothing written, when another writer
        took the session."""
        s = self.schema
        session_id = batch[0][0]
        with connection.transaction():
            if not durable:
                connection.execute("SET LOCAL synchronous_commit = off")
            row = connection.execute(
                f"""UPDATE {s}.leases SET expires = now() + make_interval(secs => %s)
                    WHERE session_id = %s AND epoch = %s
                    RETURNING epoch""",
                (self.lease_seconds, session_id, lease.epoch),
            ).fetchone()
            if row is None:
                raise LeaseLostError(
                    f"session {session_id!r}: this writer's lease (epoch {lease.epoch}) in "
                    f"{self!r} was taken over by another writer; it writes nothing more"
                )
            with connection.cursor() as cursor:
                cursor.executemany(
                    f"INSERT INTO {s}.records (session_id, seq, body) VALUES (%s, %s, %s)",
                    batch,
                )

    def free(self, connection: Connection[Any], session_id: str, lease: _Lease) -> None:
        """Let the session go now (its epoch stays: the next holder counts on)."""
        connection.execute(
            f"""UPDATE {self.schema}.leases SET expires = now() - interval '1 second'
                WHERE session_id = %s AND epoch = %s""",
            (session_id, lease.epoch),
        )

    def select(self, connection: Connection[Any], session_id: str) -> list[bytes]:
        rows = connection.execute(
            f"SELECT body FROM {self.schema}.records WHERE session_id = %s ORDER BY seq",
            (session_id,),
        ).fetchall()
        return [bytes(row[0]) for row in rows]

    # -- the store
    def create(self, session_id: str) -> SessionWriter:
        check_session_id(session_id)
        epoch = self.call("take the new session", self.take, session_id, True, 0)
        return _PostgresWriter(self, session_id, 0, _Lease(epoch))

    def reopen(self, loaded: LoadedSession) -> SessionWriter:
        known = len(loaded.records)
        epoch = self.call("take the session", self.take, loaded.session_id, False, known)
        return _PostgresWriter(self, loaded.session_id, known, _Lease(epoch))

    async def load(self, session_id: str) -> LoadedSession:
        check_session_id(session_id)
        bodies = await self.run(f"load session {session_id!r}", self.select, session_id)
        if not bodies:
            raise LedgerError(f"no session {session_id!r} in {self!r}")
        return parse_jsonl(session_id, b"\n".join(bodies) + b"\n")


def _where(dsn: str) -> str:
    """The DSN without a password (``password=...`` or ``user:password@``)."""
    dsn = re.sub(r"(?i)(password\s*=\s*)('[^']*'|\S+)", r"\1***", dsn)
    return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", dsn)


def _close_pool(pools: list[Any]) -> None:
    while pools:
        pools.pop().close()
