"""Where session ledgers live: a JSONL file per session (the default), or SQLite.

Both write records in order and load them back checked. Writing never
blocks the trio thread on a disk flush: the JSONL store writes each line to
the OS inline (about a microsecond) and runs fsyncs in one thread of its own
that covers every line written so far (group commit); the SQLite store runs
``sqlite3`` in a worker thread.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, final

import attrs
import msgspec
import trio

from .ledger import LedgerCorruptError, LedgerError, Record, SessionWriter, record_decoder

__all__ = ["JsonlStore", "LoadedSession", "SessionStore", "SqliteStore"]

_SESSION_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}\Z")


def _check_session_id(session_id: object) -> str:
    if type(session_id) is not str or not _SESSION_ID.match(session_id) or session_id[0] == ".":
        raise ValueError(
            f"session id must be 1 to 128 letters, digits, '_', '-' or '.', not starting "
            f"with '.', got {session_id!r}"
        )
    return session_id


@final
@attrs.frozen
class LoadedSession:
    """The records of a session as loaded, and what loading had to say.

    ``valid_bytes`` (JSONL) is where the last whole line ends: a torn last
    line is ignored, reported in ``warnings``, and cut off before appending.
    """

    session_id: str
    records: tuple[Record, ...]
    warnings: tuple[str, ...] = ()
    valid_bytes: int = 0


class SessionStore(Protocol):
    """A place for session ledgers."""

    def create(self, session_id: str) -> SessionWriter:
        """A writer for a new session; ``LedgerError`` if it exists."""
        ...

    def reopen(self, loaded: LoadedSession) -> SessionWriter:
        """A writer that appends after the records of ``loaded``."""
        ...

    async def load(self, session_id: str) -> LoadedSession:
        """The session's records, checked: ``LedgerCorruptError`` if damaged."""
        ...


def parse_jsonl(session_id: str, data: bytes) -> LoadedSession:
    """Decode JSONL records; a torn last line is dropped with a warning, any other
    bad line raises ``LedgerCorruptError`` naming it. ``seq`` must run 0, 1, 2, ..."""
    records: list[Record] = []
    warnings: list[str] = []
    position = 0
    line_number = 0
    valid = 0
    size = len(data)
    while position < size:
        end = data.find(b"\n", position)
        line_number += 1
        line = data[position : size if end == -1 else end]
        if end == -1:
            # Only a line the writer did not finish (no line end) is torn; a whole
            # line that does not decode is damage, refused like any other.
            warnings.append(
                f"{session_id}: line {line_number} is torn ({len(line)} bytes with no "
                "line end); ignored"
            )
            break
        try:
            record = record_decoder.decode(line)
        except msgspec.DecodeError as exc:
            raise LedgerCorruptError(
                f"{session_id}: line {line_number} is corrupt: {exc}"
            ) from None
        if record.seq != len(records):
            raise LedgerCorruptError(
                f"{session_id}: line {line_number} has seq {record.seq} where "
                f"{len(records)} was expected"
            )
        records.append(record)
        position = end + 1
        valid = position
    return LoadedSession(session_id, tuple(records), tuple(warnings), valid)


@final
class _GroupSync:
    """One thread that fsyncs a file for everyone waiting: each fsync covers every
    line written before it started. Waiters are trio tasks, woken through the
    trio token, so a wait costs no thread hop of its own."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._cond = threading.Condition()
        self._requested = 0
        self._synced = 0
        self._error: OSError | None = None
        self._closing = False
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._waiters: list[tuple[int, trio.Event]] = []
        self.written = 0  # lines written so far (trio thread)
        self.fsyncs = 0

    async def sync(self) -> None:
        if self._error is not None:
            raise LedgerError(f"fsync failed: {self._error}") from self._error
        if self._closing:
            raise LedgerError("the ledger is closed")
        target = self.written
        if self._synced >= target:
            return
        event = trio.Event()
        self._waiters.append((target, event))
        with self._cond:
            self._token = trio.lowlevel.current_trio_token()
            self._requested = max(self._requested, target)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="trio-agent-fsync", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        await event.wait()
        if self._error is not None:
            raise LedgerError(f"fsync failed: {self._error}") from self._error

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._requested <= self._synced and not self._closing:
                    self._cond.wait()
                if self._requested <= self._synced:
                    return  # closing, nothing left to sync
                target = self.written  # everything written so far is covered
                token = self._token
            try:
                os.fsync(self._fd)
                self.fsyncs += 1
            except OSError as exc:
                self._error = exc
            self._synced = max(self._synced, target)
            if token is not None:
                try:
                    token.run_sync_soon(self._wake)
                except trio.RunFinishedError:
                    pass

    def _wake(self) -> None:
        synced, error = self._synced, self._error
        waiting = []
        for target, event in self._waiters:
            if target <= synced or error is not None:
                event.set()
            else:
                waiting.append((target, event))
        self._waiters = waiting

    def stop(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()


@final
class _JsonlWriter:
    __slots__ = ("_fd", "_sync")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._sync = _GroupSync(fd)

    def append(self, line: bytes) -> None:
        view = memoryview(line)
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError as exc:
            raise LedgerError(f"cannot write the ledger: {exc}") from exc
        self._sync.written += 1

    async def flush(self, durable: bool) -> None:
        if durable:
            await self._sync.sync()

    async def aclose(self) -> None:
        await trio.to_thread.run_sync(self._close)

    def _close(self) -> None:
        self._sync.stop()
        os.close(self._fd)

    @property
    def fsyncs(self) -> int:
        return self._sync.fsyncs


@final
class JsonlStore:
    """One ``{session_id}.jsonl`` file per session in ``directory``, one record a line."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def path(self, session_id: str) -> Path:
        return self.directory / f"{_check_session_id(session_id)}.jsonl"

    def create(self, session_id: str) -> SessionWriter:
        path = self.path(session_id)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        try:
            try:
                fd = os.open(path, flags | os.O_EXCL, 0o644)
            except FileExistsError:
                # A session whose first line was never finished (the process died
                # while creating it) holds no record: it may be created again.
                if b"\n" in path.read_bytes():
                    raise LedgerError(f"session {session_id!r} already exists at {path}") from None
                fd = os.open(path, flags | os.O_TRUNC)
        except OSError as exc:
            raise LedgerError(f"cannot create session {session_id!r}: {exc}") from exc
        return _JsonlWriter(fd)

    def reopen(self, loaded: LoadedSession) -> SessionWriter:
        path = self.path(loaded.session_id)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        except OSError as exc:
            raise LedgerError(f"cannot reopen session {loaded.session_id!r}: {exc}") from exc
        if os.fstat(fd).st_size != loaded.valid_bytes:
            os.ftruncate(fd, loaded.valid_bytes)  # drop the torn tail before appending
        return _JsonlWriter(fd)

    async def load(self, session_id: str) -> LoadedSession:
        path = self.path(session_id)
        try:
            data = await trio.Path(path).read_bytes()
        except FileNotFoundError:
            raise LedgerError(f"no session {session_id!r} at {path}") from None
        return parse_jsonl(session_id, data)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID
"""


@final
class _SqliteWriter:
    """Buffers lines; ``flush`` inserts them in one transaction in the worker thread."""

    def __init__(self, store: SqliteStore, session_id: str, next_seq: int) -> None:
        self._store = store
        self._session_id = session_id
        self._next_seq = next_seq
        self._pending: list[tuple[str, int, bytes]] = []
        self._not_durable = False  # committed without a sync since the last durable flush

    def append(self, line: bytes) -> None:
        self._pending.append((self._session_id, self._next_seq, line.rstrip(b"\n")))
        self._next_seq += 1

    async def flush(self, durable: bool) -> None:
        if self._pending:
            batch = list(self._pending)
            await self._store._run(self._store._insert, batch, durable)
            del self._pending[: len(batch)]  # only once written: a cancelled flush keeps them
            self._not_durable = not durable
        elif durable and self._not_durable:
            await self._store._run(self._store._sync_wal)
            self._not_durable = False

    async def aclose(self) -> None:
        await self.flush(False)


@final
class SqliteStore:
    """Sessions as rows of one SQLite database (WAL), worked in a worker thread.

    Each flush is one transaction: committed with ``synchronous=NORMAL``
    (written to the WAL, safe from a process crash) or, when durability is
    asked for, ``FULL``. Costs a thread hop per flush, so the JSONL store is
    the faster default.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._connection: sqlite3.Connection | None = None
        self._limiter = trio.CapacityLimiter(1)

    async def _run(self, function, *args):  # type: ignore[no-untyped-def]
        return await trio.to_thread.run_sync(function, *args, limiter=self._limiter)

    def _db(self) -> sqlite3.Connection:
        if self._connection is None:
            connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute(_SCHEMA)
            self._connection = connection
        return self._connection

    def _insert(self, batch: Sequence[tuple[str, int, bytes]], durable: bool) -> None:
        db = self._db()
        db.execute("PRAGMA synchronous=FULL" if durable else "PRAGMA synchronous=NORMAL")
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT INTO records (session_id, seq, body) VALUES (?, ?, ?)", batch)
        except sqlite3.IntegrityError:
            db.execute("ROLLBACK")
            session_id, seq, _ = batch[0]
            if seq == 0:
                raise LedgerError(f"session {session_id!r} already exists in {self.path}") from None
            raise LedgerError(f"session {session_id!r}: record {seq} was already written") from None
        db.execute("COMMIT")

    def _sync_wal(self) -> None:
        """Put what NORMAL commits left in the write-ahead log on disk."""
        self._db()
        fd = os.open(f"{self.path}-wal", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def create(self, session_id: str) -> SessionWriter:
        # Whether it exists is checked by the first insert (seq 0 is the primary key).
        return _SqliteWriter(self, _check_session_id(session_id), 0)

    def reopen(self, loaded: LoadedSession) -> SessionWriter:
        return _SqliteWriter(self, loaded.session_id, len(loaded.records))

    def _select(self, session_id: str) -> list[bytes]:
        rows = self._db().execute(
            "SELECT body FROM records WHERE session_id = ? ORDER BY seq", (session_id,)
        )
        return [bytes(row[0]) for row in rows]

    async def load(self, session_id: str) -> LoadedSession:
        bodies = await self._run(self._select, _check_session_id(session_id))
        if not bodies:
            raise LedgerError(f"no session {session_id!r} in {self.path}")
        return parse_jsonl(session_id, b"\n".join(bodies) + b"\n")

    async def aclose(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            await self._run(connection.close)
