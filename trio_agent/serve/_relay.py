"""``Relay``: turns for a session another server holds, through the fleet's inbox.

With ``--dsn`` a session has one writer, the server holding its lease. A turn
posted to another server is queued in the fleet's inbox (``submit``: a row, and
a notification on ``{schema}.inbox``); every server listens there
(``follow``) and the holder runs the session's queued input, one turn each, as
a posted turn (its events published and logged), storing each turn's result in
its row for ``wait_for_turn``. A row's message has the id ``fleet-{row id}``,
so a holder that finds it already recorded (one before it stopped after
recording it) does not record it twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, final

import trio

from ..events import TurnResult
from ..fleet._inbox import (
    Input,
    answered,
    inbox_ready,
    input_turn,
    pending,
    recorded_result,
    refuse,
    submit,
)
from ..fleet._listen import listening
from ..ledger._records import TurnStartRecord, record_decoder
from ..stores.postgres._store import PostgresStore

if TYPE_CHECKING:
    from psycopg import Connection

    from ..session._agent import Agent
    from ..session._turn_run import TurnRun

__all__ = ["POLL_SECONDS", "Relay"]

POLL_SECONDS: Final = 1.0
ORPHANS_AT_ONCE: Final = 8
"""Sessions a poll offers to take, at most, whose input waits with no holder."""
"""With no notification for this long (or none to be had: behind a pooler, or
while the database cannot be reached), the held sessions' inputs are looked at
again: a notification lost is noticed within it."""

SERVE = logging.getLogger("trio_agent.serve")


def _waiting(connection: Connection[Any], store: PostgresStore, ids: list[str]) -> list[str]:
    rows = connection.execute(
        f"""SELECT DISTINCT session_id FROM "{store.schema}".inbox
            WHERE session_id = ANY(%s::text[]) AND done IS NULL""",
        (ids,),
    ).fetchall()
    return [str(row[0]) for row in rows]


def _orphans(connection: Connection[Any], store: PostgresStore, held: list[str]) -> list[str]:
    """Recorded sessions, not in ``held``, whose input waits and whose lease is not
    live (their holder died or let them go), oldest input first (a few)."""
    s = store.schema
    rows = connection.execute(
        f"""SELECT input.session_id FROM "{s}".inbox AS input
            WHERE input.done IS NULL AND input.session_id <> ALL(%s::text[])
              AND EXISTS (SELECT 1 FROM "{s}".records AS record
                  WHERE record.session_id = input.session_id AND record.seq = 0)
              AND NOT EXISTS (SELECT 1 FROM "{s}".leases AS lease
                  WHERE lease.session_id = input.session_id AND lease.expires >= now())
            ORDER BY input.id LIMIT %s""",
        (held, ORPHANS_AT_ONCE),
    ).fetchall()
    return list(dict.fromkeys(str(row[0]) for row in rows))


_TURN_LINE: Final = b'{"kind":"turn/'


def _open_turns(
    connection: Connection[Any], store: PostgresStore, ids: list[str] | None
) -> dict[str, int]:
    """Sessions (of ``ids``; None: all) whose lease is live and whose last turn
    record is a ``turn/start``: the turn their holder runs."""
    s = store.schema
    rows = connection.execute(
        f"""SELECT DISTINCT ON (record.session_id) record.session_id, record.body
            FROM "{s}".records AS record JOIN "{s}".leases AS lease
              ON lease.session_id = record.session_id AND lease.expires >= now()
            WHERE (%s::text[] IS NULL OR record.session_id = ANY(%s::text[]))
              AND substring(record.body from 1 for %s) = %s
            ORDER BY record.session_id, record.seq DESC""",
        (ids, ids, len(_TURN_LINE), _TURN_LINE),
    ).fetchall()
    running: dict[str, int] = {}
    for session_id, body in rows:
        record = record_decoder.decode(bytes(body))
        if type(record) is TurnStartRecord:
            running[str(session_id)] = record.turn
    return running


@final
class Relay:
    """The fleet's inbox of ``store``'s sessions, as a server uses it. Every method
    that reaches the database raises ``LedgerError`` when it cannot; each is one
    transaction in a worker thread (cancelled, it may still have been done)."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    async def submit(self, session_id: str, message: str) -> int:
        """Queue ``message`` for the recorded session (its input's number);
        ``TranscriptError`` for content the agent would refuse (nothing queued)."""
        return await submit(self.store, session_id, message, create=False)

    async def pending(self, session_id: str) -> list[Input]:
        """The session's unanswered input, oldest first."""
        store = self.store
        await inbox_ready(store)
        return await store.run("read the inbox", pending, store, session_id)

    def turn(self, agent: Agent, row: Input) -> TurnRun[Any] | str | None:
        """The turn that answers ``row`` on the holder's ``agent``, the reason it is
        refused, or None when its turn was recorded whole (``fleet``'s
        ``input_turn``: its message looked for in the transcript first)."""
        return input_turn(agent, row, True)

    async def answer(self, input_id: int, result: TurnResult[Any]) -> None:
        """Store the result of the turn that answered the input."""
        await self.store.run("store the answer", answered, self.store, input_id, result)

    async def answer_recorded(self, session_id: str, input_id: int) -> None:
        """Answer the input with the recorded turn that took its message."""
        records = (await self.store.load(session_id)).records
        await self.answer(input_id, recorded_result(records, input_id))

    async def refuse(self, input_id: int, reason: str) -> None:
        """Answer an input that cannot be run with ``reason``."""
        await self.store.run("refuse input", refuse, self.store, [input_id], reason)

    async def running(self, session_ids: list[str] | None = None) -> dict[str, int]:
        """The turns the servers holding these sessions (None: any) run now, by
        session: what the ledger says of a session whose lease is live."""
        return await self.store.run("read the running turns", _open_turns, self.store, session_ids)

    async def follow(
        self,
        wake: Callable[[str], None],
        held: Callable[[], list[str]],
        adopt: Callable[[str], None],
        *,
        task_status: Any = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Call ``wake(session_id)`` for each input queued from
        ``task_status.started()`` on, and, after ``POLL_SECONDS`` with none (or
        none to be had), for each session of ``held()`` whose input waits; then
        ``adopt(session_id)`` for recorded sessions whose input waits with no live
        lease (a holder that died: its lease expired). The database going away
        makes it poll until it can listen again. Runs until cancelled."""

        async def heard(session_ids: list[str] | None) -> None:
            if session_ids:
                for session_id in session_ids:
                    wake(session_id)
                return
            await inbox_ready(self.store)
            if ids := held():
                for session_id in await self.store.run(
                    "look at the inbox", _waiting, self.store, ids
                ):
                    wake(session_id)
            for session_id in await self.store.run(
                "look for input nobody runs", _orphans, self.store, held()
            ):
                adopt(session_id)

        await listening(
            self.store, "inbox", heard, seconds=POLL_SECONDS, log=SERVE, task_status=task_status
        )
