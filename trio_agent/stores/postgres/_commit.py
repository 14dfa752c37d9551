"""Group commit for ``PostgresStore``: the flushes of many writers stored together.

A store has at most one commit in flight. A flush that arrives while one is
under way waits in the queue; when the commit ends, the first waiting flush
leads the next one, which stores every flush queued by then in one
transaction and one statement, each session fenced by its own lease. So with
many sessions the commits (thread hops, round trips, WAL flushes) are shared,
and a lone session pays what it did before: one commit a flush.

A writer whose lease was taken over gets ``LeaseLostError`` for its own rows
only: the statement stores the rows of the sessions whose fence held. If the
statement fails (it should not: each session has one writer), each flush of
the batch is tried alone, so one writer's failure is not another's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, final

import trio

from ...ledger._records import LeaseLostError, LedgerError
from .._base import Row
from ._leases import locking, ordered

if TYPE_CHECKING:
    from psycopg import Connection

__all__ = ["Committing", "Fenced", "Flush", "GroupCommit", "insert_flushes"]

T = TypeVar("T")


class Committing(Protocol):
    """What group commit works through: the store's schema and lease length, its
    ``run`` (one transaction in a worker thread) and its lost-lease error."""

    schema: str
    lease_seconds: float

    async def run(self, what: str, function: Callable[..., T], *args: Any) -> T: ...

    def lease_lost(self, session_id: str, epoch: int) -> LeaseLostError: ...


class Fenced(Protocol):
    """A writer's lease: the epoch its writes are fenced by; ``lost`` once taken over."""

    session_id: str
    epoch: int
    lost: bool


@final
class Flush:
    """One writer's rows to store, and (once stored or refused) ``error``."""

    __slots__ = ("done", "durable", "error", "lead", "lease", "rows")

    def __init__(self, lease: Fenced, rows: Sequence[Row], durable: bool) -> None:
        self.lease = lease
        self.rows = rows
        self.durable = durable
        self.error: LedgerError | None = None
        self.done = trio.Event()
        self.lead = False  # handed the next commit


@final
class GroupCommit:
    """The store's commits: one in flight, the flushes queued meanwhile in the next."""

    __slots__ = ("_busy", "_queue", "_store")

    def __init__(self, store: Committing) -> None:
        self._store = store
        self._queue: list[Flush] = []
        self._busy = False

    async def flush(self, request: Flush) -> None:
        """Store ``request``'s rows, with others queued meanwhile; raises its own
        ``LedgerError`` (``LeaseLostError`` when its lease was taken over).

        Cancellation: a flush still queued leaves the queue (nothing of it was
        sent) and raises ``Cancelled``; one whose commit is under way waits for it
        (a statement is not left half done; the connection's timeouts bound it)
        and returns its outcome, the cancellation delivered at the next
        checkpoint, as ``trio.to_thread.run_sync`` does."""
        if self._busy:
            self._queue.append(request)
            try:
                await request.done.wait()
            except trio.Cancelled:
                if request in self._queue:  # not sent: leave, nothing stored
                    self._queue.remove(request)
                    raise
                with trio.CancelScope(shield=True):  # under way: wait for its outcome
                    await request.done.wait()
            if not request.lead:
                return self._outcome(request)
        await self._lead(request)
        return self._outcome(request)

    @staticmethod
    def _outcome(request: Flush) -> None:
        if request.error is not None:
            raise request.error

    async def _lead(self, request: Flush) -> None:
        """Commit ``request`` and everything queued, then hand the next commit to
        the first flush queued meanwhile."""
        self._busy = True
        batch = [request, *self._queue]
        self._queue.clear()
        settled = False
        try:
            with trio.CancelScope(shield=True):  # the thread runs to its end anyway
                await self._commit(batch)
            settled = True
        finally:
            for each in batch:
                if not settled:  # an unexpected failure: no flush of it was stored
                    each.error = LedgerError(
                        f"session {each.lease.session_id!r}: the commit of its records "
                        "failed unexpectedly; nothing of this flush is known stored"
                    )
                each.done.set()
            if self._queue:
                following = self._queue.pop(0)
                following.lead = True
                following.done.set()
            else:
                self._busy = False

    async def _commit(self, batch: list[Flush]) -> None:
        store = self._store
        try:
            errors = await store.run("write records", insert_flushes, store, batch)
        except LedgerError as exc:
            if len(batch) == 1:
                batch[0].error = exc
                return
            errors = []
            for each in batch:  # one by one: a failure is its own writer's
                try:
                    errors += await store.run("write records", insert_flushes, store, [each])
                except LedgerError as alone:
                    errors.append(alone)
        for each, error in zip(batch, errors, strict=True):
            each.error = error


def insert_flushes(
    connection: Connection[Any], store: Committing, batch: Sequence[Flush]
) -> list[LedgerError | None]:
    """Store the rows of ``batch`` in one statement, each session's only if its
    lease's epoch still holds (renewing it); per flush, None or its
    ``LeaseLostError``. Durable (the commit waits for the WAL on disk) when any
    flush of the batch asks for it."""
    statement, values = _one(store, batch[0]) if len(batch) == 1 else _many(store, batch)
    if any(f.durable for f in batch):  # in the caller's transaction, as every call is
        connection.execute("SET LOCAL synchronous_commit = on")
    cursor = connection.execute(statement, values)
    if len(batch) == 1:
        stored = Counter({batch[0].lease.session_id: cursor.rowcount})
    else:
        stored = Counter(row[0] for row in cursor.fetchall())
    errors: list[LedgerError | None] = []
    for f in batch:
        if f.rows and not stored[f.lease.session_id]:
            f.lease.lost = True
            errors.append(store.lease_lost(f.lease.session_id, f.lease.epoch))
        else:
            errors.append(None)
    return errors


def _one(store: Committing, flush: Flush) -> tuple[str, tuple[Any, ...]]:
    """One session's rows (the common case with few sessions: the lighter statement)."""
    s = store.schema
    session_id = flush.lease.session_id
    statement = f"""
        WITH fence AS (
            UPDATE "{s}".leases SET expires = now() + make_interval(secs => %s)
            WHERE session_id = %s AND epoch = %s RETURNING 1)
        INSERT INTO "{s}".records (session_id, seq, body)
        SELECT %s, seq, body FROM unnest(%s::bigint[], %s::bytea[]) AS batch (seq, body)
        WHERE EXISTS (SELECT 1 FROM fence)"""
    values = (
        store.lease_seconds,
        session_id,
        flush.lease.epoch,
        session_id,
        [row[1] for row in flush.rows],
        [row[2] for row in flush.rows],
    )
    return statement, values


def _many(store: Committing, batch: Sequence[Flush]) -> tuple[str, tuple[Any, ...]]:
    """Many sessions' rows, each session fenced by its own lease (their rows locked
    in session order: ``locking``); returns the session of each row stored."""
    s = store.schema
    fences = {(f.lease.session_id, f.lease.epoch) for f in batch}
    rows = [row for f in batch for row in f.rows]
    statement = f"""
        WITH {locking(s)},
        fence AS (
            UPDATE "{s}".leases AS lease SET expires = now() + make_interval(secs => %s)
            FROM unnest(%s::text[], %s::bigint[]) AS held (session_id, epoch)
            WHERE lease.session_id = held.session_id AND lease.epoch = held.epoch
              AND lease.session_id IN (SELECT session_id FROM locked)
            RETURNING lease.session_id)
        INSERT INTO "{s}".records (session_id, seq, body)
        SELECT batch.session_id, batch.seq, batch.body
        FROM unnest(%s::text[], %s::bigint[], %s::bytea[]) AS batch (session_id, seq, body)
        WHERE batch.session_id IN (SELECT session_id FROM fence)
        RETURNING session_id"""
    values = (
        ordered([session_id for session_id, _ in fences]),
        store.lease_seconds,
        [session_id for session_id, _ in fences],
        [epoch for _, epoch in fences],
        [row[0] for row in rows],
        [row[1] for row in rows],
        [row[2] for row in rows],
    )
    return statement, values
