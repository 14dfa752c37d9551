"""Sessions as rows of one SQLite database (WAL), worked in a worker thread.

A writer holds an flock on ``{database}.locks/{session_id}.lock`` for as
long as it is open. It buffers its records and inserts them in one
transaction per flush; its first transaction checks that the session's last
stored record is the one this writer follows (nothing is ever written after
a record it did not see: a session created twice, or appended to since it
was loaded). After that, the lock keeps every other writer out. Every
``sqlite3`` failure reaches the caller as a ``LedgerError`` (a damaged file
as ``LedgerCorruptError``), with the transaction rolled back.

The store has one connection, shared by all its sessions: opened on first
use, it stays open until ``aclose()``, the store's collection or the
program's exit (so nobody has to close it, and a session's creation costs no
connection). SQLite checkpoints the write-ahead log into the database when it
passes ``_CHECKPOINT_PAGES`` (its ``wal_autocheckpoint``), by size, not at
each session's close. One thread at a time works on the connection: a
``threading.Lock`` held for each call, and one worker thread at a time.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

import trio

from ..ledger._ledger import DEFAULT_SNAPSHOTS, SessionWriter, SnapshotPolicy, check_snapshots
from ..ledger._records import (
    LedgerCorruptError,
    LedgerError,
    SessionChangedError,
    SessionNotFoundError,
    session_exists,
)
from ._base import (
    SNAPSHOT_LINE,
    LoadedSession,
    Row,
    RowWriter,
    WriterState,
    check_session_id,
    parse_jsonl,
    stored_body,
)
from ._lock import WriterLock

if TYPE_CHECKING:
    import sqlite3

# ``sqlite3`` is imported where a store first uses it, not with the package:
# ``import trio_agent`` stays cheap for the many programs that never use SQLite.

__all__ = ["SqliteStore"]

T = TypeVar("T")

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS records (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID
"""
_COLUMNS: Final = ["session_id", "seq", "body"]
_DAMAGED: Final = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB
_BUSY: Final = 5  # SQLITE_BUSY
_BUSY_MS: Final = 5000  # how long a worker thread waits for another writer's lock
_CHECKPOINT_PAGES: Final = 1000  # the WAL is copied into the database past this size


@final
class _SqliteWriter(RowWriter):
    """Buffers records; ``flush`` inserts them in one transaction in the worker thread."""

    def __init__(self, store: SqliteStore, session_id: str, next_seq: int, state: WriterState):
        super().__init__(session_id, next_seq, state, store.snapshots)
        self._store = store
        self._not_durable = False  # committed without a sync since the last durable flush
        # A reopened session's stored end is checked at the first flush; a new one's
        # first insert finds any record 0 there by its primary key, for free.
        self._fenced = next_seq == 0

    def commit(self) -> None:
        """Insert what was appended now, in the calling thread: one small transaction
        without an fsync (the first durable flush syncs it), and never a wait. If
        the database is busy (another writer's transaction, here or in another
        process), the records stay buffered for the first flush, as any others."""
        self._state.check()
        if self._pending:
            batch = list(self._pending)
            try:
                stored = self._store.call_now("store the new session", batch)
            except LedgerError as exc:
                self._fail(exc)
                raise
            if stored:
                del self._pending[: len(batch)]
                self._not_durable = self._fenced = True

    async def flush(self, durable: bool) -> None:
        if not self._state.usable:
            self._state.check()
        store = self._store
        try:
            if self._pending:
                batch = list(self._pending)
                fence = not self._fenced
                await store.run("write records", store.insert, batch, durable, fence)
                del self._pending[: len(batch)]  # only once written: a cancelled flush keeps them
                self._not_durable = not durable
                self._fenced = True
            elif not self._fenced:
                await store.run(
                    "check the session", store.check_end, self._session_id, self._next_seq
                )
                self._fenced = True
            elif durable and self._not_durable:
                await store.run("sync the write-ahead log", store.sync_wal)
                self._not_durable = False
        except LedgerError as exc:
            self._fail(exc)
            raise

    def _fail(self, error: LedgerError) -> None:
        self._state.fail(error)


@final
class SqliteStore:
    """Sessions as rows of one SQLite database (WAL), worked in a worker thread.

    Each flush is one transaction: committed with ``synchronous=NORMAL``
    (written to the WAL, safe from a process crash) or, when durability is
    asked for, ``FULL``. Costs a thread hop per flush, so the JSONL store is
    the faster default. Creating a session (``create`` and the writer's
    ``commit``, which the ``Agent`` runs in a worker thread when the session is
    first used) stores its first records at once (one small transaction, no
    fsync, never a wait on a busy database). The database's directory is made,
    with its parents, when the first session is created; ``sqlite3`` is
    imported when the store first uses it. ``path`` is a file: ``":memory:"``
    (a database that ends with its connection) is a ``ValueError``.

    The database connection is the store's, shared by all its sessions: a
    session's creation and close cost no connection and no checkpoint (SQLite
    checkpoints the write-ahead log by its size). It needs no closing: it is
    closed when the store is garbage-collected or the program exits.
    ``aclose()`` closes it now (a later use opens it again); it is never
    required.

    ``snapshots``: when a session's ledger writes a ``snapshot`` record, so a
    resume reads its rows from the last one (``load_tail``); None: never.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        snapshots: SnapshotPolicy | None = DEFAULT_SNAPSHOTS,
    ) -> None:
        if os.fspath(path) == ":memory:":  # SQLite's name for a database of one connection
            raise ValueError(
                "SqliteStore needs a database file: ':memory:' would lose every session "
                "when its connection closes"
            )
        self.path = Path(path)
        self.snapshots = check_snapshots(snapshots)
        # The connection, when one is open: a list the finalizer shares, which closes
        # what it holds when the store is collected (it must not hold the store).
        self._connection: list[sqlite3.Connection] = []
        self._limiter = trio.CapacityLimiter(1)
        self._lock = threading.Lock()  # one user of the connection at a time, any thread
        # The process the connection belongs to (the finalizer reads it too: a forked
        # child never closes its parent's connection, even at exit).
        self._owner = [os.getpid()]
        weakref.finalize(self, _close_owned, self._connection, self._owner)

    # -- running work on the connection
    def call(self, what: str, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` with the connection to itself, in the calling thread;
        every ``sqlite3`` (or file) failure as a ``LedgerError`` saying ``what`` failed."""
        with self._lock:
            return self._mapped(what, function, *args)

    def call_now(self, what: str, batch: Sequence[Row]) -> bool:
        """``insert`` (fenced, not durable) in the calling thread if it can be done
        without waiting: False, having done nothing, when the connection is in use
        or the database is locked by another writer."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            self._mapped(what, self._insert_without_waiting, batch)
        except LedgerError as exc:
            if getattr(exc.__cause__, "sqlite_errorcode", 0) & 0xFF == _BUSY:
                return False
            raise
        finally:
            self._lock.release()
        return True

    def _mapped(self, what: str, function: Callable[..., T], *args: Any) -> T:
        import sqlite3

        try:
            return function(*args)
        except sqlite3.Error as exc:
            code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
            error = LedgerCorruptError if code in _DAMAGED else LedgerError
            raise error(f"SQLite store {self.path}: cannot {what}: {exc}") from exc
        except OSError as exc:
            raise LedgerError(f"SQLite store {self.path}: cannot {what}: {exc}") from exc

    def _insert_without_waiting(self, batch: Sequence[Row]) -> None:
        db = self._db()
        db.execute("PRAGMA busy_timeout=0")
        try:
            self.insert(batch, False, False)  # a new session: record 0 is its own check
        finally:
            db.execute(f"PRAGMA busy_timeout={_BUSY_MS}")

    async def run(self, what: str, function: Callable[..., T], *args: Any) -> T:
        """``call`` in a worker thread (one at a time). Cancellation waits for it."""
        return await trio.to_thread.run_sync(
            self.call, what, function, *args, limiter=self._limiter
        )

    def _db(self) -> sqlite3.Connection:
        if self._owner[0] != os.getpid():
            self._forked()
        if not self._connection:
            import sqlite3

            connection = sqlite3.connect(
                self.path,
                check_same_thread=False,
                isolation_level=None,
                timeout=_BUSY_MS / 1000,
            )
            try:
                connection.execute("PRAGMA journal_mode=WAL")
                connection.execute("PRAGMA synchronous=NORMAL")
                connection.execute(f"PRAGMA wal_autocheckpoint={_CHECKPOINT_PAGES}")
                connection.execute(_SCHEMA)
                columns = [row[1] for row in connection.execute("PRAGMA table_info(records)")]
            except sqlite3.Error:
                connection.close()
                raise
            if columns != _COLUMNS:
                connection.close()
                raise LedgerCorruptError(
                    f"SQLite store {self.path}: its table 'records' has columns {columns}, "
                    f"not {_COLUMNS}: it is not a trio-agent session database"
                )
            self._connection.append(connection)
        return self._connection[0]

    # -- the connection's lifetime
    def _forked(self) -> None:
        """In a forked child: the parent's connection is not this process's to use or
        to close (SQLite forbids carrying one across a fork), so it is set aside,
        never closed, and this process opens its own on use."""
        _INHERITED.extend(self._connection)
        self._connection.clear()
        self._owner[0] = os.getpid()

    async def _close(self, close: Callable[[], None]) -> None:
        """Run ``close`` in the worker thread: shielded when the connection is free
        (a short close, which a cancellation would otherwise leave undone); waiting
        for other work on it can be cancelled (then the next close, or the store's
        finalizer, closes it). A failed close loses nothing: all was committed."""
        with trio.CancelScope(shield=self._limiter.available_tokens > 0):
            try:
                await self.run("close the database", close)
            except LedgerError:
                pass  # the connection is forgotten all the same

    # -- the work itself (run through ``call``/``run``)
    def insert(self, batch: Sequence[Row], durable: bool, fence: bool) -> None:
        """Insert ``batch`` in one transaction (``fence``: after checking that the
        session's stored records end right before it); rolled back on any failure."""
        import sqlite3

        db = self._db()
        session_id, first, _ = batch[0]
        db.execute("PRAGMA synchronous=FULL" if durable else "PRAGMA synchronous=NORMAL")
        db.execute("BEGIN IMMEDIATE")
        done = False
        try:
            if fence:
                self.check_end(session_id, first)
            try:
                db.executemany(
                    "INSERT INTO records (session_id, seq, body) VALUES (?, ?, ?)", batch
                )
            except sqlite3.IntegrityError:  # a record of this seq is there already
                self.check_end(session_id, first)  # says which: created twice, or stale
                raise
            db.execute("COMMIT")
            done = True
        finally:
            if not done and db.in_transaction:
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # the connection rolls back by itself when it can

    def check_end(self, session_id: str, next_seq: int) -> None:
        """Raise unless the session's stored records end right before ``next_seq``."""
        (last,) = (
            self._db()
            .execute("SELECT MAX(seq) FROM records WHERE session_id = ?", (session_id,))
            .fetchone()
        )
        if last is not None and next_seq == 0:
            raise session_exists(session_id, self.path)
        if (-1 if last is None else last) != next_seq - 1:
            raise SessionChangedError(
                f"session {session_id!r} in {self.path} ends at record {last}, but this "
                f"writer follows record {next_seq - 1}: another writer wrote; load it again"
            )

    def sync_wal(self) -> None:
        """Put what NORMAL commits left in the write-ahead log on disk."""
        self._db()
        fd = os.open(f"{self.path}-wal", os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _select(self, session_id: str, tail: bool = False) -> list[bytes]:
        """The session's record bodies (``tail``: from its last snapshot on, found
        walking its rows back from the last: a cost bounded by the tail)."""
        db = self._db()
        first = 0
        if tail:
            found = db.execute(
                "SELECT seq FROM records WHERE session_id = ? AND substr(body, 1, ?) = ? "
                "ORDER BY seq DESC LIMIT 1",
                (session_id, len(SNAPSHOT_LINE), SNAPSHOT_LINE),
            ).fetchone()
            first = 0 if found is None else found[0]
        rows = db.execute(
            "SELECT body FROM records WHERE session_id = ? AND seq >= ? ORDER BY seq",
            (session_id, first),
        )
        return [stored_body(row[0]) for row in rows]

    # -- the store
    def _lock_for(self, session_id: str) -> WriterLock:
        directory = Path(f"{self.path}.locks")
        try:
            return WriterLock.acquire(directory / f"{session_id}.lock", session_id)
        except LedgerError as exc:
            if not isinstance(exc.__cause__, FileNotFoundError):
                raise
        try:  # the first writer of this database: make the directory (and its parents), once
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LedgerError(
                f"session {session_id!r}: cannot make the lock directory {directory}: {exc}"
            ) from exc
        return WriterLock.acquire(directory / f"{session_id}.lock", session_id)

    def create(self, session_id: str) -> SessionWriter:
        check_session_id(session_id)
        state = WriterState(session_id, self._lock_for(session_id))
        # Whether it exists is found when its first records are stored (``commit``).
        return _SqliteWriter(self, session_id, 0, state)

    def reopen(self, loaded: LoadedSession) -> SessionWriter:
        # That nothing was added since ``loaded`` is checked by every insert.
        state = WriterState(loaded.session_id, self._lock_for(loaded.session_id))
        return _SqliteWriter(self, loaded.session_id, loaded.next_seq, state)

    async def load(self, session_id: str) -> LoadedSession:
        check_session_id(session_id)
        bodies = await self.run(f"load session {session_id!r}", self._select, session_id)
        if not bodies:
            raise SessionNotFoundError(f"no session {session_id!r} in {self.path}")
        return parse_jsonl(session_id, b"\n".join(bodies) + b"\n")

    async def load_tail(self, session_id: str) -> LoadedSession:
        """The session's records from its last snapshot on (all of them when it has
        none): what a resume needs. ``reopen`` takes it as a whole ``load``."""
        check_session_id(session_id)
        bodies = await self.run(f"load session {session_id!r}", self._select, session_id, True)
        if not bodies:
            raise SessionNotFoundError(f"no session {session_id!r} in {self.path}")
        return parse_jsonl(session_id, b"\n".join(bodies) + b"\n", first_seq=None)

    async def aclose(self) -> None:
        """Close the database connection now, also while a writer is open (a later
        use opens it again), checkpointing the write-ahead log. Never required: the
        store closes it when it is collected or the program exits. Cancellation:
        shielded unless it has to wait for other work on the connection."""
        if self._owner[0] != os.getpid():
            self._forked()  # the parent's connection is the parent's to close
        if self._connection:
            await self._close(self._close_now)

    def _close_now(self) -> None:
        _close_all(self._connection)


_INHERITED: list[sqlite3.Connection] = []
"""Connections a forked child found open in its stores: kept, never closed, here."""


def _close_owned(connections: list[sqlite3.Connection], owner: list[int]) -> None:
    """The store's finalizer: close its connection in the process that opened it."""
    if owner[0] == os.getpid():
        _close_all(connections)


def _close_all(connections: list[sqlite3.Connection]) -> None:
    """Close and forget the connection in ``connections``, if any (the store's
    finalizer too: a store collected with its connection open closes it)."""
    while connections:
        connections.pop().close()
