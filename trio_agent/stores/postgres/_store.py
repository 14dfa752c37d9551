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

Every call runs in one transaction that keeps no state in the server's
session (``_postgres_connect``), so the store works through a pooler in
transaction mode (PgBouncer's); ``LISTEN`` goes to ``listen_dsn``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import socket
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

import trio

from ..._log import FLEET
from ...ledger import (
    LeaseLostError,
    LedgerError,
    SessionChangedError,
    SessionNotFoundError,
    SessionWriter,
    session_exists,
)
from ...ledger._ledger import DEFAULT_SNAPSHOTS, SnapshotPolicy, check_snapshots
from .._base import (
    SNAPSHOT_LINE,
    LoadedSession,
    RowWriter,
    WriterState,
    bounded,
    check_session_id,
    parse_jsonl,
)
from ._commit import Flush, GroupCommit, insert_flushes
from ._connect import (
    CONNECTION,
    POOLED,
    behind_pooler,
    check_connection,
    transaction,
)
from ._leases import (
    MIN_LEASE_SECONDS,
    RENEWALS,
    Handoff,
    Heartbeat,
    Held,
    Lease,
    Leased,
    LeaseTable,
)

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg_pool import ConnectionPool

__all__ = ["PostgresStore"]

T = TypeVar("T")

SCHEMA_VERSION: Final = 1
_SCHEMA_NAME: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}\Z")


def _schema_sql(schema: str) -> list[str]:
    """The schema's DDL (run only when its ``meta`` table is missing: an application
    role needs no CREATE privilege on a schema a migration role made)."""
    return [
        f'CREATE SCHEMA IF NOT EXISTS "{schema}"',
        f"""CREATE TABLE IF NOT EXISTS "{schema}".records (
            session_id text NOT NULL,
            seq bigint NOT NULL,
            body bytea NOT NULL,
            PRIMARY KEY (session_id, seq))""",
        f"""CREATE TABLE IF NOT EXISTS "{schema}".leases (
            session_id text PRIMARY KEY,
            holder text NOT NULL,
            epoch bigint NOT NULL,
            expires timestamptz NOT NULL)""",
        f"""CREATE TABLE IF NOT EXISTS "{schema}".meta (
            key text PRIMARY KEY,
            value text NOT NULL)""",
        f"""INSERT INTO "{schema}".meta (key, value) VALUES ('schema_version', '{SCHEMA_VERSION}')
            ON CONFLICT (key) DO NOTHING""",
    ]


@final
class _PostgresWriter(RowWriter):
    """Buffers records; ``flush`` stores them in one fenced transaction.

    A flush is a round trip to the server, so the ledger does not flush before
    every event (``flush_per_event``): records are stored per step, and before
    the model is asked or a tool is dispatched, as the ledger's rule wants."""

    flush_per_event = False

    def __init__(self, store: PostgresStore, session_id: str, next_seq: int, lease: Lease) -> None:
        super().__init__(session_id, next_seq, WriterState(session_id, lease), store.snapshots)
        self._store = store
        self._lease = lease

    def _check_lease(self) -> None:
        if self._lease.lost:  # found taken over by the heartbeat: fail without a round trip
            error = self._store.lease_lost(self._session_id, self._lease.epoch)
            raise self._state.fail(error)

    def commit(self) -> None:
        """Store what was appended now, in the calling thread (a worker thread:
        the ``Agent`` creates sessions there)."""
        self._state.check()
        if self._pending:
            batch = list(self._pending)
            request = Flush(self._lease, batch, False)
            try:
                (error,) = self._store.call("write records", insert_flushes, self._store, [request])
                if error is not None:
                    raise error
            except LedgerError as exc:
                raise self._state.fail(exc) from exc.__cause__
            del self._pending[: len(batch)]

    async def flush(self, durable: bool) -> None:
        if not self._state.usable:
            self._state.check()
        if not self._pending:
            return
        self._check_lease()
        batch = list(self._pending)
        try:
            await self._store.commits.flush(Flush(self._lease, batch, durable))
        except LedgerError as exc:
            raise self._state.fail(exc) from exc.__cause__
        del self._pending[: len(batch)]  # only once stored: a cancelled flush keeps them

    async def _after_close(self) -> None:
        """Free the lease before ``aclose`` returns (shielded: a cancelled close
        still lets the session go; an unfreed lease would only expire), so a
        resume right after finds the session free."""
        with trio.CancelScope(shield=True):
            try:
                await self._store.run("free the lease", self._store.free, [self._lease])
            except LedgerError:
                pass  # the heartbeat's thread tries too; else it expires


@final
class PostgresStore:
    """Session ledgers in PostgreSQL (``dsn``: a libpq connection string or URL),
    under ``schema`` (created with its tables on first use, when it is missing;
    ``create_schema=False``: a missing schema is a ``LedgerError``, for readers
    that must not make one by a typo).

    ``lease_seconds``: how long a writer's hold on its session lasts unless
    renewed, at least 1 second (``MIN_LEASE_SECONDS``: a shorter lease would
    expire between its renewals); while a writer is open, a heartbeat thread
    renews it every third of that, so only a writer that stops (its process paused, killed or cut
    off) loses it, and another may then take the session over (``reopen``);
    the old writer's next write raises ``LeaseLostError``. ``holder`` names
    this process in the lease (default: host and pid). The connection pool
    needs no closing (``close()``/``aclose()`` close it now; a collected store
    closes it too). Needs the ``[postgres]`` extra.

    ``dsn`` may reach PostgreSQL through a pooler such as PgBouncer, in
    transaction or session mode: each call is one transaction with its
    timeouts ``SET LOCAL``, and, behind a pooler, no server-side prepared
    statements.
    ``listen_dsn``: a connection to the same database for the fleet's
    ``LISTEN`` (workers and ``wait_for_turn`` are woken by ``NOTIFY``),
    which needs a session of its own: direct, or through a session pooler.
    Without it, ``dsn`` is listened on, unless it is behind a pooler (found at
    the first connection: ``pooled``); then the fleet polls, and says so once
    (a warning on the ``trio_agent.fleet`` logger).

    ``snapshots``: when a session's ledger writes a ``snapshot`` record, so a
    resume reads its rows from the last one (``load_tail``); None: never.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "trio_agent",
        lease_seconds: float = 30.0,
        holder: str | None = None,
        max_connections: int = 8,
        create_schema: bool = True,
        listen_dsn: str | None = None,
        snapshots: SnapshotPolicy | None = DEFAULT_SNAPSHOTS,
    ) -> None:
        if importlib.util.find_spec("psycopg") is None:
            raise ModuleNotFoundError(
                "PostgresStore needs psycopg 3 and its pool: pip install 'trio-agent[postgres]'"
            )
        from psycopg.conninfo import conninfo_to_dict

        if type(dsn) is not str or not dsn:
            raise ValueError("dsn must be a PostgreSQL connection string or URL")
        try:
            self._conninfo = conninfo_to_dict(dsn)
        except Exception:
            raise ValueError("dsn is not a valid PostgreSQL connection string or URL") from None
        secrets = [str(self._conninfo.get("password") or "")]
        if listen_dsn is not None:
            if type(listen_dsn) is not str or not listen_dsn:
                raise ValueError("listen_dsn must be a PostgreSQL connection string or URL")
            try:
                secrets.append(str(conninfo_to_dict(listen_dsn).get("password") or ""))
            except Exception:
                raise ValueError(
                    "listen_dsn is not a valid PostgreSQL connection string or URL"
                ) from None
        if type(schema) is not str or not _SCHEMA_NAME.match(schema):
            raise ValueError(f"schema must be a lower-case SQL name, got {schema!r}")
        if not (
            isinstance(lease_seconds, int | float) and MIN_LEASE_SECONDS <= lease_seconds < 86400
        ):
            raise ValueError(
                f"lease_seconds must be a number of seconds from {MIN_LEASE_SECONDS} "
                f"(MIN_LEASE_SECONDS: the heartbeat renews a lease every 1/{RENEWALS} of it, "
                "and a shorter one expires between renewals) to below 86400, got "
                f"{lease_seconds!r}"
            )
        if holder is not None and (type(holder) is not str or "\x00" in holder):
            # stored as text, yet compared as given: another type failed every renewal
            raise ValueError(f"holder must be a str without NUL characters, got {holder!r}")
        if type(max_connections) is not int or max_connections < 1:
            raise ValueError(f"max_connections must be an int >= 1, got {max_connections!r}")
        self.snapshots = check_snapshots(snapshots)
        self.schema = schema
        self.lease_seconds = float(lease_seconds)
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}"
        self._dsn = dsn
        self._listen_dsn = listen_dsn
        self._secrets = [secret for secret in secrets if secret]
        self.pooled: bool | None = None  # known at the first connection
        self._said_polling = False
        self._max = max_connections
        self.create_schema = bool(create_schema)
        self.limiter = trio.CapacityLimiter(max_connections)
        self._pool: list[ConnectionPool] = []  # the open pool, shared with the finalizer
        self._pool_lock = threading.Lock()
        self.leases = LeaseTable(self.schema, self.holder, self.lease_seconds, repr(self))
        self.heartbeat = Heartbeat(self)
        self.handoff = Handoff()  # leases taken for a writer still to come
        self.commits = GroupCommit(self)
        weakref.finalize(self, _close_pool, self._pool)

    def __repr__(self) -> str:
        info = self._conninfo
        where = " ".join(
            f"{key}={info[key]}" for key in ("host", "port", "dbname", "user") if info.get(key)
        )
        return f"PostgresStore({where!r}, schema={self.schema!r})"

    def _said(self, exc: BaseException) -> str:
        """``exc``'s text without the passwords (a driver may quote the DSN)."""
        text = str(exc)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    # -- running work
    def call(self, what: str, function: Callable[..., T], *args: Any) -> T:
        """``function(connection, *args)`` in the calling thread with a pooled
        connection, in one transaction (committed when it returns, rolled back
        when it raises: ``function`` neither commits nor opens one); every
        ``psycopg`` failure a ``LedgerError`` saying ``what``."""
        with (
            self.failures(what),
            self._connections().connection() as connection,
            transaction(connection),
        ):
            return function(connection, *args)

    @contextlib.contextmanager
    def failures(self, what: str) -> Iterator[None]:
        """Every ``psycopg`` failure inside becomes a ``LedgerError`` saying ``what``
        (without the password, and without the driver's exception chained)."""
        import psycopg
        from psycopg_pool import PoolTimeout

        try:
            yield
        except (psycopg.Error, PoolTimeout, OSError) as exc:
            raise LedgerError(f"{self!r}: cannot {what}: {self._said(exc)}") from None

    def listen_connection(self) -> Connection[Any] | None:
        """A connection of its own, outside the pool, to ``LISTEN`` on: to
        ``listen_dsn``, else to ``dsn`` unless it is behind a pooler (None then:
        the caller polls; said once in the log). The schema is checked first.
        Call it in a worker thread, inside ``failures``; the caller closes it."""
        import psycopg

        self._connections()
        if self._listen_dsn is not None:
            return psycopg.connect(self._listen_dsn, **CONNECTION)
        if self.pooled:
            with self._pool_lock:
                said, self._said_polling = self._said_polling, True
            if not said:
                FLEET.warning(
                    "%r is behind a connection pooler and has no listen_dsn: the fleet "
                    "cannot LISTEN there, so it polls (workers every poll_seconds, "
                    "wait_for_turn every second); give PostgresStore a listen_dsn that "
                    "reaches PostgreSQL directly to be woken by NOTIFY at once",
                    self,
                )
            return None
        return psycopg.connect(self._dsn, **CONNECTION)

    async def run(self, what: str, function: Callable[..., T], *args: Any) -> T:
        """``call`` in a worker thread. Cancellation waits for it (a statement under
        way is not left half done; the connection's timeouts bound it), except
        under a ``CloseBudget`` (a stopping fleet worker): its deadline, and any
        cancellation, leave the thread to end alone (its transaction commits whole
        or not at all); the deadline raises ``LedgerError``."""
        with bounded() as bound:
            return await trio.to_thread.run_sync(
                self.call,
                what,
                function,
                *args,
                limiter=self.limiter,
                abandon_on_cancel=bound is not None,
            )
        raise LedgerError(f"{self!r}: cannot {what}: stopping, and the database did not answer")

    def _connections(self) -> ConnectionPool:
        """The pool, opened on first use: first one connection of our own (a server
        that cannot be reached fails at once, not after the pool's retries) checks
        the schema (and makes it if missing), then the pool, whose connections are
        checked before use (a server restart leaves none dead in it)."""
        with self._pool_lock:
            if not self._pool:
                import psycopg
                from psycopg_pool import ConnectionPool

                with psycopg.connect(self._dsn, **POOLED) as first, transaction(first):
                    self._check_schema(first)
                    self.pooled = behind_pooler(first)
                pool = ConnectionPool(
                    self._dsn,
                    min_size=0,
                    max_size=self._max,
                    open=False,
                    timeout=30.0,
                    check=check_connection,
                    kwargs=POOLED if self.pooled else CONNECTION,
                )
                pool.open(wait=False)
                self._pool.append(pool)
            return self._pool[0]

    def _check_schema(self, connection: Connection[Any]) -> None:
        """The schema's version, read first; the schema made only when missing (its
        makers take turns, each looking again once it has its turn). Tables of
        ours that are there without ``meta`` are another application's (ours are
        made in one transaction): refused, never taken as ours."""
        s = self.schema
        if not _has_table(connection, s, "meta") and not self.create_schema:
            raise LedgerError(f"{self!r}: there is no trio-agent schema {s!r} in this database")
        if not _has_table(connection, s, "meta"):  # in the caller's transaction
            connection.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (s,))
            if not _has_table(connection, s, "meta"):  # another maker made it meanwhile
                foreign = [t for t in ("records", "leases") if _has_table(connection, s, t)]
                if foreign:
                    raise LedgerError(
                        f"{self!r}: schema {s!r} has tables named as trio-agent's "
                        f"({', '.join(foreign)}) that trio-agent did not make; give "
                        "PostgresStore a schema of its own"
                    )
                for statement in _schema_sql(s):
                    connection.execute(statement)
        row = connection.execute(
            f"""SELECT value FROM "{s}".meta WHERE key = 'schema_version'"""
        ).fetchone()
        if row is None or row[0] != str(SCHEMA_VERSION):
            raise LedgerError(
                f"{self!r}: schema {s!r} is at version {row and row[0]}, this "
                f"trio-agent reads version {SCHEMA_VERSION}"
            )

    def close(self) -> None:
        """Close the connection pool (a later use opens it again). Open writers' leases
        are renewed no more: they expire (a closed store's heartbeat would open the
        pool again)."""
        self.heartbeat.stop()
        _close_pool(self._pool)

    async def aclose(self) -> None:
        """``close`` in a worker thread (shielded: it is short)."""
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self.close)

    # -- the work (run through ``call``/``run``)
    def take(self, connection: Connection[Any], session_id: str, new: bool, known: int) -> int:
        """Take the session's lease (free or expired; or the one handed over for
        it), checking that the session does not exist (``new``) or still ends after
        ``known`` records; its epoch. In the caller's transaction: a failure rolls
        the lease back too (a handed one is given back, to be let go)."""
        handed = self.handoff.take(session_id)
        taken = False
        try:
            epoch = self.leases.take(connection, session_id, handed)
            (last,) = connection.execute(
                f'SELECT max(seq) FROM "{self.schema}".records WHERE session_id = %s',
                (session_id,),
            ).fetchone() or (None,)
            if new and last is not None:
                raise session_exists(session_id, repr(self))
            if not new and (-1 if last is None else last) != known - 1:
                raise SessionChangedError(
                    f"session {session_id!r} in {self!r} ends at record {last}, but it was "
                    f"loaded with {known} records: another writer wrote; load it again"
                )
            taken = True
            return epoch
        finally:
            if handed is not None and not taken:
                self.handoff.put_back(session_id, handed)

    # -- leases, for the store's writers and for callers that pick sessions (the fleet)
    def lease_sessions(
        self, connection: Connection[Any], session_ids: Sequence[str]
    ) -> list[tuple[str, int, bool]]:
        """Take the leases of those of ``session_ids`` that are free or expired, in the
        caller's transaction; each taken with its epoch and whether it has records.
        Hand each to its writer with ``hand_over`` once the transaction committed."""
        return self.leases.take_many(connection, session_ids)

    def hand_over(self, session_id: str, epoch: int) -> None:
        """A lease taken by ``lease_sessions`` waits for the session's writer
        (``create`` or ``reopen`` take it over, without bumping its epoch)."""
        self.handoff.hand_over(session_id, epoch)

    def take_back(self, session_id: str) -> Held | None:
        """A lease handed over and not taken by a writer, now the caller's to let go
        (None: no such lease)."""
        epoch = self.handoff.take(session_id)
        return None if epoch is None else Held(session_id, epoch)

    def lease_lost(self, session_id: str, epoch: int) -> LeaseLostError:
        return self.leases.lost(session_id, epoch)

    def renew(self, connection: Connection[Any], leases: Sequence[Leased]) -> dict[str, set[int]]:
        """Renew the held ``leases`` in one statement; the epochs still held, by session."""
        return self.leases.renew(connection, leases)

    def free(self, connection: Connection[Any], leases: Sequence[Leased]) -> None:
        """Let the sessions go now (their epochs stay: the next holder counts on)."""
        self.leases.free(connection, leases)

    def lease_holder(self, connection: Connection[Any], session_id: str) -> str | None:
        """Who holds the session's lease now (None: nobody), for ``trio-agent show``."""
        return self.leases.holder_of(connection, session_id)

    def select(
        self, connection: Connection[Any], session_id: str, tail: bool = False
    ) -> list[bytes]:
        """The session's record bodies (``tail``: from its last snapshot on, found
        walking its rows back from the last: a cost bounded by the tail)."""
        first = 0
        if tail:
            found = connection.execute(
                f'SELECT seq FROM "{self.schema}".records WHERE session_id = %s '
                "AND substring(body from 1 for %s) = %s ORDER BY seq DESC LIMIT 1",
                (session_id, len(SNAPSHOT_LINE), SNAPSHOT_LINE),
            ).fetchone()
            first = 0 if found is None else int(found[0])
        rows = connection.execute(
            f'SELECT body FROM "{self.schema}".records WHERE session_id = %s AND seq >= %s '
            "ORDER BY seq",
            (session_id, first),
        ).fetchall()
        return [bytes(row[0]) for row in rows]

    # -- the store
    def _writer(self, session_id: str, next_seq: int, epoch: int) -> SessionWriter:
        lease = Lease(self.heartbeat, session_id, epoch)  # held (renewed) from now on
        return _PostgresWriter(self, session_id, next_seq, lease)

    def create(self, session_id: str) -> SessionWriter:
        check_session_id(session_id)
        epoch = self.call("take the new session", self.take, session_id, True, 0)
        return self._writer(session_id, 0, epoch)

    def reopen(self, loaded: LoadedSession) -> SessionWriter:
        known = loaded.next_seq
        epoch = self.call("take the session", self.take, loaded.session_id, False, known)
        return self._writer(loaded.session_id, known, epoch)

    async def load(self, session_id: str) -> LoadedSession:
        check_session_id(session_id)
        bodies = await self.run(f"load session {session_id!r}", self.select, session_id)
        if not bodies:
            raise SessionNotFoundError(f"no session {session_id!r} in {self!r}")
        return parse_jsonl(session_id, b"\n".join(bodies) + b"\n")

    async def load_tail(self, session_id: str) -> LoadedSession:
        """The session's records from its last snapshot on (all of them when it has
        none): what a resume needs. ``reopen`` takes it as a whole ``load``."""
        return await _load_tail(self, session_id)


async def _load_tail(store: PostgresStore, session_id: str) -> LoadedSession:
    check_session_id(session_id)
    bodies = await store.run(f"load session {session_id!r}", store.select, session_id, True)
    if not bodies:
        raise SessionNotFoundError(f"no session {session_id!r} in {store!r}")
    return parse_jsonl(session_id, b"\n".join(bodies) + b"\n", first_seq=None)


def _has_table(connection: Connection[Any], schema: str, table: str) -> bool:
    row = connection.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f'"{schema}".{table}',)
    ).fetchone()
    return bool(row and row[0])


def _close_pool(pools: list[Any]) -> None:
    while pools:
        pools.pop().close()
