"""``PostgresPlace``: sessions served from a ``PostgresStore`` (``--dsn``), and
``PostgresEvents``: their events in PostgreSQL beside the store's records (the
table ``serve_events`` of its schema, made on first use), so that a server on
another machine resumes a stream exactly.

Each event is one row, written (committed) before any client sees it; a row
already there (a sequence written before) is not written again. A row is
fenced by the lease of the session's writer in the same store, in the same
statement, as its records are: a server whose lease was taken over logs no
event after the new holder's (``LeaseLostError``). The same
transaction notifies the channel ``{schema}.serve_events`` with the session's
id, so every server on the database (``PostgresPlace.follow``) wakes the
readers of a session whose turns run in another: any replica serves any
session's events, from the table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final, final

import trio

from ..fleet._listen import channel, listening
from ..ledger import LedgerError
from ..ledger._derive import DerivedSession
from ..stores._base import parse_jsonl
from ..stores.postgres._store import PostgresStore
from ._place import derive_tail
from ._relay import Relay

__all__ = ["READ_ROWS", "PostgresEvents", "PostgresPlace"]

READ_ROWS: Final = 4096
"""Rows one read returns at most; a reader further behind reads again."""

POLL_SECONDS: Final = 1.0
"""Without notifications (behind a pooler, or while the database cannot be
reached), how often every reader looks again."""

SERVE = logging.getLogger("trio_agent.serve")


def _table(store: PostgresStore) -> str:
    return f'"{store.schema}".serve_events'


@final
class _RowWriter:
    """Appends one session's events as rows; ``last`` is the last sequence written."""

    def __init__(self, store: PostgresStore, session_id: str, last: int) -> None:
        self._store = store
        self._session_id = session_id
        self.last = last

    async def append(self, sequence: int, line: bytes) -> bool:
        """Log the event, fenced by the lease of the session's writer in this store
        as its records are: ``LeaseLostError`` once that lease was taken over (a
        stale server writes no event after the new holder's), ``LedgerError`` when
        no writer here holds the session."""
        if sequence <= self.last:
            return False
        store, session_id = self._store, self._session_id
        lease = store.heartbeat.holding(session_id)
        if lease is None:
            raise LedgerError(
                f"session {session_id!r}: no writer holds its lease in {store!r}, so its "
                "events are not logged here"
            )
        if lease.lost:  # found taken over already: no round trip
            raise store.lease_lost(session_id, lease.epoch)
        fenced = await store.run(
            "log an event", _insert, store, session_id, lease.epoch, sequence, line
        )
        if not fenced:
            lease.lost = True
            raise store.lease_lost(session_id, lease.epoch)
        self.last = sequence
        return True

    def close(self) -> None:
        pass  # the store's pool holds the connections


def _insert(
    connection: Any, store: PostgresStore, session_id: str, epoch: int, sequence: int, line: bytes
) -> bool:
    """Insert the event if the session's lease is still at ``epoch`` (renewing it,
    under its row lock, as a flush of records does); whether it was."""
    s = store.schema
    row = connection.execute(
        f"""WITH fence AS (
                UPDATE "{s}".leases SET expires = now() + make_interval(secs => %s)
                WHERE session_id = %s AND epoch = %s RETURNING 1),
            logged AS (
                INSERT INTO {_table(store)} (session_id, sequence, line)
                SELECT %s, %s, %s WHERE EXISTS (SELECT 1 FROM fence)
                ON CONFLICT DO NOTHING RETURNING 1)
            SELECT EXISTS (SELECT 1 FROM fence), (SELECT count(*) FROM logged)""",
        (store.lease_seconds, session_id, epoch, session_id, sequence, line),
    ).fetchone()
    if not row[0]:
        return False
    notify = (channel(store, "serve_events"), session_id)
    connection.execute("SELECT pg_notify(%s, %s)", notify)  # delivered at commit
    return True


def _after(connection: Any, store: PostgresStore, session_id: str, after: int) -> list[Any]:
    rows: list[Any] = connection.execute(
        f"SELECT sequence, line FROM {_table(store)} WHERE session_id = %s AND sequence > %s "
        f"ORDER BY sequence LIMIT {READ_ROWS}",
        (session_id, after),
    ).fetchall()
    return rows


def _last(connection: Any, store: PostgresStore, session_id: str) -> int:
    row = connection.execute(
        f"SELECT max(sequence) FROM {_table(store)} WHERE session_id = %s", (session_id,)
    ).fetchone()
    return -1 if row is None or row[0] is None else int(row[0])


def _make_table(connection: Any, store: PostgresStore) -> None:
    """Make the events table where it is missing (in the store's transaction). A
    table that is there is only looked at: an application role with no CREATE
    privilege on the schema (a migration role made it) serves too, where
    ``CREATE TABLE IF NOT EXISTS`` alone is refused for want of that privilege,
    the table there or not. Servers started together make it at once: that
    statement alone is not safe against that either (one fails on the catalog's
    unique index), so the makers take turns, as the inbox's do, and each looks
    again once it has its turn."""
    if _has_table(connection, store):
        return
    if not store.create_schema:
        raise LedgerError(
            f"{store!r}: schema {store.schema!r} has no serve_events table, and may not make one"
        )
    connection.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"{store.schema}.events",))
    if _has_table(connection, store):  # made by the one whose turn it was
        return
    connection.execute(
        f"""CREATE TABLE IF NOT EXISTS {_table(store)} (
            session_id text NOT NULL,
            sequence bigint NOT NULL,
            line bytea NOT NULL,
            PRIMARY KEY (session_id, sequence))"""
    )


def _has_table(connection: Any, store: PostgresStore) -> bool:
    row = connection.execute("SELECT to_regclass(%s) IS NOT NULL", (_table(store),)).fetchone()
    return bool(row and row[0])


@final
class PostgresEvents:
    """The events of ``store``'s sessions (its table made once, on first use)."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self._ready = False
        self._making = trio.Lock()

    async def _ensure(self) -> None:
        async with self._making:
            if not self._ready:
                await self.store.run("make the events table", _make_table, self.store)
                self._ready = True

    async def read(self, session_id: str, after: int) -> list[tuple[int, bytes]]:
        await self._ensure()
        rows = await self.store.run("read events", _after, self.store, session_id, after)
        return [(int(sequence), bytes(line)) for sequence, line in rows]

    async def writer(self, session_id: str) -> _RowWriter:
        await self._ensure()
        last = await self.store.run("read the last event", _last, self.store, session_id)
        return _RowWriter(self.store, session_id, last)


def _sessions(connection: Any, store: PostgresStore) -> list[str]:
    rows = connection.execute(
        f'SELECT session_id FROM "{store.schema}".records WHERE seq = 0 ORDER BY session_id'
    ).fetchall()
    return [str(row[0]) for row in rows]


@final
class PostgresPlace:
    """The sessions of a ``PostgresStore`` on ``dsn`` (``schema``), and their events."""

    def __init__(self, dsn: str, *, schema: str = "trio_agent") -> None:
        self.store = PostgresStore(dsn, schema=schema)
        self.events = PostgresEvents(self.store)
        self.inbox = Relay(self.store)

    async def state(self, session_id: str) -> DerivedSession | None:
        store = self.store
        bodies = await store.run(f"load session {session_id!r}", store.select, session_id, True)
        if not bodies:
            return None
        tail = parse_jsonl(session_id, b"\n".join(bodies) + b"\n", first_seq=None)
        return await derive_tail(store, session_id, tail)  # from its last snapshot on

    async def sessions(self) -> list[str]:
        return await self.store.run("list the sessions", _sessions, self.store)

    async def aclose(self) -> None:
        await self.store.aclose()

    async def follow(
        self, wake: Callable[[str | None], None], *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Call ``wake(session_id)`` for each event another server (or this one)
        logs, from ``task_status.started()`` on; without notifications,
        ``wake(None)`` (every session) each ``POLL_SECONDS``. The database going
        away makes it poll until it can listen again. Runs until cancelled."""

        async def heard(session_ids: list[str] | None) -> None:
            for session_id in [None] if session_ids is None else session_ids:
                wake(session_id)

        await listening(
            self.store,
            "serve_events",
            heard,
            seconds=POLL_SECONDS,
            log=SERVE,
            task_status=task_status,
        )
