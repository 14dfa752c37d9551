"""The sessions a fleet worker claimed and no writer took yet.

A claim (``Claims.claim``) is one transaction that locks the oldest waiting
input rows of the inbox (``FOR UPDATE SKIP LOCKED``: workers claiming at the
same time pass each other by) and takes the leases of their sessions through
the store (``lease_sessions``). Once it committed, each lease is handed to the
session's writer to come (``hand_over``: the store's ``create`` or ``reopen``
takes it over); one that no writer takes is let go (``release``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, final

import trio

from ..ledger import LedgerError
from ..stores._base import bounded

if TYPE_CHECKING:
    from psycopg import Connection

    from ..stores.postgres import PostgresStore

__all__ = ["Claims"]

RELEASE_SECONDS = 5.0
"""How long letting a claim go waits for the database, before leaving it to the
heartbeat's thread (a database that is away must not hold a shutdown)."""


@final
class Claims:
    """A worker's claims on ``store``: sessions with waiting input, leased for their
    writers (which the store hands the leases to) until taken or let go."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store

    async def claim(self, limit: int, skip: Sequence[str]) -> list[tuple[str, bool]]:
        """Claim up to ``limit`` sessions with waiting input, not in ``skip``; each
        with whether it has records. Cancellation: returns at once; what the
        abandoned thread claims after is let go."""
        store = self._store
        state: dict[str, Any] = {"cancelled": False, "claimed": []}
        guard = threading.Lock()

        def work() -> list[tuple[str, bool]]:
            taken = store.call("claim sessions", self.take, limit, list(skip))
            for session_id, epoch, _ in taken:  # committed: the leases are ours
                store.hand_over(session_id, epoch)
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
        store = self._store
        held = store.take_back(session_id)
        if held is None:
            return
        with trio.CancelScope(shield=True), trio.move_on_after(RELEASE_SECONDS), bounded():
            try:
                await trio.to_thread.run_sync(
                    store.call, "free the lease", store.free, [held], abandon_on_cancel=True
                )
                return
            except LedgerError:
                pass
        store.heartbeat.let_go(held)  # away or failing: the heartbeat's thread tries again

    async def still_held(self, session_id: str) -> bool:
        """Whether the lease claimed for ``session_id`` waits for its writer and is
        still this worker's (its writer refused by it: the writer is another
        store's). It stays claimed, to be let go by ``release``; False when the
        database cannot tell."""
        store = self._store
        held = store.take_back(session_id)
        if held is None:
            return False
        store.hand_over(session_id, held.epoch)  # still to be let go
        try:
            kept = await store.run("look at a claim", store.renew, [held])
        except LedgerError:
            return False
        return held.epoch in kept.get(session_id, ())

    def _let_go_later(self, session_id: str) -> None:
        held = self._store.take_back(session_id)
        if held is not None:
            self._store.heartbeat.let_go(held)

    def take(
        self, connection: Connection[Any], limit: int, skip: Sequence[str]
    ) -> list[tuple[str, int, bool]]:
        """The claim's statements, in the caller's transaction (in a worker thread):
        the oldest waiting input's sessions with no live lease, their leases taken
        (``lease_sessions``); each with its epoch and whether it has records."""
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
        return self._store.lease_sessions(connection, wanted)
