"""What every store shares: the store protocol, a loaded session, JSONL record
parsing, session ids, the state of a writer (open, broken, closed), and the
deadline of a stopping task tree's store work (``CloseBudget``)."""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Final, Protocol, final

import attrs
import msgspec
import trio

from ..ledger._ledger import SessionWriter, SnapshotPolicy
from ..ledger._records import (
    LedgerCorruptError,
    LedgerError,
    Record,
    SnapshotRecord,
    record_decoder,
)
from ._lock import WriterLock

__all__ = [
    "CloseBudget",
    "Hold",
    "LoadedSession",
    "Row",
    "SNAPSHOT_LINE",
    "RowWriter",
    "SessionStore",
    "WriterState",
    "bounded",
    "check_session_id",
    "parse_jsonl",
    "stored_body",
]

_SESSION_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}\Z")


def check_session_id(session_id: object) -> str:
    """``session_id`` if it is a usable id (it names files), else ``ValueError``."""
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
    ``size`` is how many bytes the ledger had when it was loaded and ``torn``
    the bytes of its torn tail: a writer made from this refuses to append if
    the ledger has changed since (a size alone could come back by chance once
    another writer cut the same tail and appended).
    """

    session_id: str
    records: tuple[Record, ...]
    warnings: tuple[str, ...] = ()
    valid_bytes: int = 0
    size: int = -1
    torn: bytes = b""

    @property
    def next_seq(self) -> int:
        """The ``seq`` of the record a writer appends after these."""
        return self.records[-1].seq + 1 if self.records else 0


class SessionStore(Protocol):
    """A place for session ledgers. Every session has one writer at a time.

    ``create`` and ``reopen`` may block on files or a database: the ``Agent``
    calls them in a worker thread (``create`` when the session is first used).
    """

    def create(self, session_id: str) -> SessionWriter:
        """A writer for a new session, holding its lock: ``LedgerError`` if it
        exists, ``SessionLockedError`` if another writer holds it."""
        ...

    def reopen(self, loaded: LoadedSession) -> SessionWriter:
        """A writer that appends after the records of ``loaded``, holding the
        session's lock: ``SessionLockedError`` if another writer holds it,
        ``SessionChangedError`` if the session grew since it was loaded."""
        ...

    async def load(self, session_id: str) -> LoadedSession:
        """The session's records, checked: ``LedgerCorruptError`` if damaged,
        ``LedgerError`` naming the session and where it lives for any other failure."""
        ...


SNAPSHOT_LINE: Final = b'{"kind":"snapshot",'
"""How a snapshot record's line begins (msgspec writes the tag first)."""
_BOM: Final = b"\xef\xbb\xbf"


def stored_body(value: object) -> bytes:
    """A record's body as a database row holds it: a BLOB as the store writes it,
    or a value put there by hand (text from the ``sqlite3`` shell) as its UTF-8,
    which ``parse_jsonl`` then decodes or refuses like any line."""
    return (
        bytes(value) if isinstance(value, bytes | bytearray | memoryview) else str(value).encode()
    )


def parse_jsonl(
    session_id: str, data: bytes, *, first_seq: int | None = 0, offset: int = 0
) -> LoadedSession:
    """Decode JSONL records; a torn last line is dropped with a warning, any other
    bad line raises ``LedgerCorruptError`` naming it, but a snapshot's (a cache:
    it is kept as one that does not restore, and a resume replays past it, with a
    warning). ``seq`` must run ``first_seq``, ``first_seq + 1``, ... (None: from
    the first record's). ``offset``: where ``data`` starts in the ledger (a tail
    read from a snapshot on), so ``valid_bytes`` and ``size`` are the ledger's."""
    whole = _whole_lines(session_id, data, first_seq, offset)
    return whole if whole is not None else _line_by_line(session_id, data, first_seq, offset)


def _line_by_line(
    session_id: str, data: bytes, first_seq: int | None, offset: int
) -> LoadedSession:
    """``parse_jsonl`` a line at a time, saying what is wrong where."""
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
        expected = len(records) + (first_seq or 0)
        try:
            record = record_decoder.decode(line)
        except (msgspec.DecodeError, RecursionError) as exc:  # nested past the decoder's depth
            if line.startswith(_BOM):  # saved by an editor that marks its UTF-8
                raise LedgerCorruptError(
                    f"{session_id}: line {line_number} begins with a UTF-8 byte order mark "
                    "(an editor saved the ledger with one): remove those 3 bytes"
                ) from None
            if not line.startswith(SNAPSHOT_LINE) or (first_seq is None and not records):
                raise LedgerCorruptError(
                    f"{session_id}: line {line_number} is corrupt: {exc}"
                ) from None
            warnings.append(f"{session_id}: the snapshot at line {line_number} is damaged: {exc}")
            record = SnapshotRecord(seq=expected, state=msgspec.Raw(b"null"))
        if first_seq is None and not records:
            first_seq = expected = record.seq
        if record.seq != expected:
            if type(record) is not SnapshotRecord:
                raise LedgerCorruptError(
                    f"{session_id}: line {line_number} has seq {record.seq} where "
                    f"{expected} was expected"
                )
            warnings.append(  # a cache: passed over as a damaged one is
                f"{session_id}: the snapshot at line {line_number} is damaged: it has seq "
                f"{record.seq} where {expected} was expected"
            )
            record = SnapshotRecord(seq=expected, state=msgspec.Raw(b"null"))
        records.append(record)
        position = end + 1
        valid = position
    return LoadedSession(
        session_id, tuple(records), tuple(warnings), offset + valid, offset + size, data[valid:]
    )


def _whole_lines(
    session_id: str, data: bytes, first_seq: int | None, offset: int
) -> LoadedSession | None:
    """``parse_jsonl`` of a ledger whose lines all decode, a record each, with
    ``seq`` in order (every ledger but a damaged one): its whole lines decoded in
    one call. None for anything else, which the line-by-line parse then says."""
    valid = data.rfind(b"\n") + 1
    if valid < 2 or data[:1] != b"{" or data[valid - 2 : valid] != b"}\n":
        return None
    # msgspec reads values split by any whitespace, across lines too. Inside a
    # value a "}" is never followed by a line end and a "{": so when every line
    # end but the last is one of those, each lies between two records, and as
    # many records as lines means a record a line (counted after the first line,
    # which in a tail is a long snapshot's)
    first_end = data.find(b"\n")
    lines = 1 + data.count(b"\n", first_end + 1, valid)
    if data.count(b"}\n{", first_end - 1, valid) != lines - 1:
        return None
    try:
        records = record_decoder.decode_lines(memoryview(data)[:valid])
    except (msgspec.DecodeError, RecursionError):
        return None
    if len(records) != lines:
        return None
    first = records[0].seq if first_seq is None else first_seq
    if any(record.seq != seq for seq, record in enumerate(records, first)):
        return None
    for index, record in enumerate(records):
        if type(record) is SnapshotRecord:  # its own bytes, not a view of all of data
            records[index] = msgspec.structs.replace(record, state=record.state.copy())
    warnings: tuple[str, ...] = ()
    if valid < len(data):
        warnings = (
            f"{session_id}: line {len(records) + 1} is torn ({len(data) - valid} bytes "
            "with no line end); ignored",
        )
    return LoadedSession(
        session_id,
        tuple(records),
        warnings,
        offset + valid,
        offset + len(data),
        data[valid:],
    )


class Hold(Protocol):
    """What keeps other writers out while a writer is open: a file lock, a lease."""

    def release(self) -> None: ...


@final
class WriterState:
    """Whether a writer may write: open, broken by a failure, or closed.

    A failure breaks the writer for good and lets its lock go: what it
    stored is whole (the writer undid any part of the record that failed),
    but the session in memory may hold what the ledger does not, so only a
    resume, which reads the ledger, can go on from there.
    """

    __slots__ = ("closed", "failure", "lock", "session_id", "usable")

    def __init__(self, session_id: str, lock: WriterLock | Hold) -> None:
        self.session_id = session_id
        self.lock = lock
        self.failure: LedgerError | None = None
        self.closed = False
        self.usable = True  # neither failed nor closed (read on every append)

    def check(self) -> None:
        """Raise ``LedgerError`` unless the writer is open."""
        if self.failure is not None:  # of the failure's kind (a LeaseLostError stays one)
            raise type(self.failure)(
                f"session {self.session_id!r}: the ledger writer stopped after a failed "
                f"write ({self.failure}); it writes nothing more: resume the session to go on"
            ) from self.failure
        if self.closed:
            raise LedgerError(f"session {self.session_id!r}: the ledger writer is closed")

    def fail(self, error: LedgerError) -> LedgerError:
        """Break the writer with ``error`` (the first failure is kept); returns it to raise."""
        if self.usable:
            self.failure, self.usable = error, False
            self.lock.release()
        return error

    def close(self) -> None:
        self.closed, self.usable = True, False
        self.lock.release()


Row = tuple[str, int, bytes]
"""A record as a database stores it: (session id, seq, the record's JSON)."""


class RowWriter:
    """What the database writers share: records appended as rows, kept until a
    flush stores them (``_pending``), and the writer's state. ``append`` never
    awaits, as ``SessionWriter`` asks."""

    def __init__(
        self,
        session_id: str,
        next_seq: int,
        state: WriterState,
        snapshots: SnapshotPolicy | None = None,
    ) -> None:
        self.snapshots = snapshots  # the store's: the ledger writes snapshots by it
        self._session_id = session_id
        self._next_seq = next_seq
        self._state = state
        self._pending: list[Row] = []

    def append(self, line: bytes) -> None:
        if not self._state.usable:
            self._state.check()
        self._pending.append((self._session_id, self._next_seq, line.rstrip(b"\n")))
        self._next_seq += 1

    async def flush(self, durable: bool) -> None:
        raise NotImplementedError

    async def _after_close(self) -> None:
        """What the store does once the writer is closed (lets its hold go)."""

    async def aclose(self) -> None:
        """Store what is pending (unless the writer failed), close it, then
        ``_after_close``; closed even when the flush fails."""
        if self._state.closed:
            return
        try:
            if self._state.usable:
                await self.flush(False)
        finally:
            self._state.close()
            await self._after_close()


@final
class CloseBudget:
    """One deadline for the store work of a task and of the tasks it starts, once
    it stops: a fleet worker's sessions, whose close steps (the ``turn/end``
    flush, ``Ledger.aclose``, letting the lease go) are shielded from
    cancellation and would each wait for a database that is gone.

    ``with budget.applied():`` makes it the budget of the store work started in
    the block (a context variable: tasks started inside inherit it). Until
    ``stop`` it bounds nothing; ``stop(deadline)`` bounds all of it by
    ``deadline`` (trio time), the waits under way included, shielded or not, so
    the tree's close work ends together. A store's wait cut short
    (``bounded``) raises its ``LedgerError``; a statement it left running in a
    thread commits whole or not at all, and a writer that failed writes nothing
    more, so what was stored stays as it is and the session is resumed from it.
    """

    __slots__ = ("_scopes", "deadline")

    def __init__(self) -> None:
        self.deadline = math.inf
        self._scopes: set[trio.CancelScope] = set()

    @property
    def stopped(self) -> bool:
        """Whether a deadline was set."""
        return self.deadline < math.inf

    def stop(self, deadline: float) -> None:
        """Bound the store work by ``deadline``, from now on and under way (an
        earlier deadline set before stays)."""
        if deadline < self.deadline:
            self.deadline = deadline
            for scope in self._scopes:
                scope.deadline = deadline

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        token = _budget.set(self)
        try:
            yield
        finally:
            _budget.reset(token)

    @contextlib.contextmanager
    def bound(self) -> Iterator[trio.CancelScope]:
        """A cancel scope bounded by the budget's deadline, now and when it is set."""
        scope = trio.CancelScope(deadline=self.deadline)
        self._scopes.add(scope)
        try:
            with scope:
                yield scope
        finally:
            self._scopes.discard(scope)


_budget: ContextVar[CloseBudget | None] = ContextVar("trio_agent_close_budget", default=None)


@contextlib.contextmanager
def bounded() -> Iterator[trio.CancelScope | None]:
    """A cancel scope for one store wait, bounded by the current ``CloseBudget``
    (None with none: the wait is not bounded). A wait it cuts short leaves the
    block with ``scope.cancelled_caught`` set; a store waits on its thread with
    ``abandon_on_cancel`` when it has a scope, then raises its ``LedgerError``."""
    budget = _budget.get()
    if budget is None:
        yield None
        return
    with budget.bound() as scope:
        yield scope
