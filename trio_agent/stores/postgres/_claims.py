"""The sessions a fleet worker claimed from a ``PostgresStore`` and no writer took yet.

A claim (``Claims.claim``) is one transaction that locks the oldest waiting
input rows of the fleet's inbox (``FOR UPDATE SKIP LOCKED``: workers claiming
at the same time pass each other by) and takes the leases of their sessions.
The store's ``take`` then hands a claimed lease to the session's writer
(``pop``); one that no writer takes is let go (``release``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, final

import trio

from ...ledger import LedgerError
from .._base import bounded

if TYPE_CHECKING:
    from psycopg import Connection

    from ._store import PostgresStore

__all__ = ["Claims", "Held", "Leased"]

RELEASE_SECONDS = 5.0
"""How long letting a claim go waits for the database, before leaving it to the
heartbeat's thread (a database that is away must not hold a shutdown)."""


class Leased(Protocol):
    """A lease as freeing or renewing it needs it: its session and epoch."""

    @property
    def session_id(self) -> str: ...

    @property
    def epoch(self) -> int: ...


class Held(NamedTuple):
    """A lease by its session and epoch (what freeing it needs)."""

    session_id: str
    epoch: int


@final
class Claims:
    """Claimed sessions' epochs, until a writer takes them (``pop``) or they are let go."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._epochs: dict[str, int] = {}
        self._lock = threading.Lock()

    def pop(self, session_id: str) -> int | None:
        """The claimed epoch of ``session_id`` for its writer (None: not claimed)."""
        with self._lock:
            return self._epochs.pop(session_id, None)

    def put_back(self, session_id: str, epoch: int) -> None:
        """A writer that failed to take a claimed lease hands it back (to be let go)."""
        with self._lock:
            self._epochs.setdefault(session_id, epoch)

    async def claim(self, limit: int, skip: Sequence[str]) -> list[tuple[str, bool]]:
        """Claim up to ``limit`` sessions with waiting input, not in ``skip``; each
        with whether it has records. Cancellation: returns at once; what the
        abandoned thread claims after is let go."""
        store = self._store
        state: dict[str, Any] = {"cancelled": False, "claimed": []}
        guard = threading.Lock()

        def work() -> list[tuple[str, bool]]:
            taken = store.call("claim sessions", self.take, limit, list(skip))
            with self._lock:  # committed: the leases are this store's
                for session_id, epoch, _ in taken:
                    self._epochs[session_id] = epoch
            claimed = [(session_id, exists) for session_id, _, exists in taken]
            with guard:
                if not state["cancelled"]:
                    state["claimed"] = claimed
                    return claimed
            for session_id, _ in claimed:  # its caller left: nobody will run them
                self._let_go_later(session_id)
            return []

        try:
            return await trio.to_thread.run_sync(
                work, abandon_on_cancel=True, limiter=store.limiter
            )
        except trio.Cancelled:
            with guard:
                state["cancelled"] = True
                late = state["claimed"]
            for session_id, _ in late:  # claimed just before the cancellation
                self._let_go_later(session_id)
            raise

    async def release(self, session_id: str) -> None:
        """Let a claimed session go that no writer took, now: its lease freed before
        this returns, or (the database away for ``RELEASE_SECONDS``) by the
        heartbeat's thread; sooner by a ``CloseBudget``'s deadline. Shielded; nothing
        happens for a session not claimed."""
        epoch = self.pop(session_id)
        if epoch is None:
            return
        held = Held(session_id, epoch)
        store = self._store
        with trio.CancelScope(shield=True), trio.move_on_after(RELEASE_SECONDS), bounded():
            try:
                await trio.to_thread.run_sync(
                    store.call, "free the lease", store.free, [held], abandon_on_cancel=True
                )
                return
            except LedgerError:
                pass
        store.heartbeat.let_go(held)  # away or failing: the heartbeat's thread tries again

    def _let_go_later(self, session_id: str) -> None:
        epoch = self.pop(session_id)
        if epoch is not None:
            self._store.heartbeat.let_go(Held(session_id, epoch))

    def take(
        self, connection: Connection[Any], limit: int, skip: Sequence[str]
    ) -> list[tuple[str, int, bool]]:
        """The claim's statements, in the caller's transaction (in a worker thread):
        the oldest waiting input's sessions with no live lease, their leases taken
        as ``take`` would; each with its epoch and whether it has records."""
        s = self._store.schema
        rows = connection.execute(
            f"""SELECT input.session_id FROM "{s}".inbox AS input
                WHERE input.done IS NULL AND input.session_id <> ALL(%s::text[])
                  AND NOT EXISTS (SELECT 1 FROM "{s}".leases AS lease
                      WHERE lease.session_id = input.session_id AND lease.expires >= now())
                ORDER BY input.id LIMIT %s
                FOR UPDATE OF input SKIP LOCKED""",
            (list(skip), limit * 8),
        ).fetchall()
        wanted = list(dict.fromkeys(row[0] for row in rows))[:limit]
        if not wanted:
            return []
        taken = connection.execute(
            f"""INSERT INTO "{s}".leases AS lease (session_id, holder, epoch, expires)
                SELECT wanted, %s, 1, now() + make_interval(secs => %s)
                FROM unnest(%s::text[]) AS wanted
                ON CONFLICT (session_id) DO UPDATE
                    SET holder = excluded.holder, epoch = lease.epoch + 1,
                        expires = excluded.expires
                    WHERE lease.expires < now()
                RETURNING session_id, epoch,
                    EXISTS (SELECT 1 FROM "{s}".records AS record
                            WHERE record.session_id = lease.session_id)""",
            (self._store.holder, self._store.lease_seconds, wanted),
        ).fetchall()
        return [(session_id, epoch, bool(exists)) for session_id, epoch, exists in taken]
