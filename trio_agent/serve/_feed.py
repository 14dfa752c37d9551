"""``Feed``: one session's events for its readers, in sequence order, from the
event log and then live.

The session's turns ``publish`` each event: written to the log first, then kept
in memory (the ``tail``), then the readers are woken. A reader asks for the
events ``after`` its cursor: from the tail when the tail reaches back that far,
else from the log, which holds every event the tail does and all before it (the
process publishing a session's events is its only writer). So a reader gets
each event once, in order, whether it started before, during or after a turn,
or in another server process before a restart.
"""

from __future__ import annotations

import bisect
from typing import Final, final

import trio

from ..events import SessionEvent
from ._eventlog import Events, EventWriter, encode_event

__all__ = ["Feed"]

TAIL_EVENTS: Final = 4096
"""Events kept in memory per session; a reader further behind reads the log."""


def _sequence(entry: tuple[int, bytes]) -> int:
    return entry[0]


@final
class Feed:
    """The events of ``session_id``, logged in ``log``. ``changed`` is the event the
    next publication (or ``close``) sets: take it before asking ``after`` so that
    nothing published in between is missed."""

    def __init__(self, log: Events, session_id: str) -> None:
        self.session_id = session_id
        self._log = log
        self._writer: EventWriter | None = None
        self._tail: list[tuple[int, bytes]] = []
        self.changed = trio.Event()
        self.closed = False

    async def open(self) -> None:
        """Open the log for publishing (once; before the session's first turn here)."""
        if self._writer is None:
            self._writer = await self._log.writer(self.session_id)

    @property
    def last(self) -> int:
        """The sequence of the last event logged (-1: none), once ``open``."""
        assert self._writer is not None, "open() the feed first"
        return self._writer.last

    async def publish(self, event: SessionEvent) -> None:
        """Log the event (before anyone sees it), keep it and wake the readers. An
        event logged before (a sequence not above the last) is dropped. ``OSError``
        or ``LedgerError`` when it cannot be written: the turn cannot go on
        unrecorded."""
        assert self._writer is not None, "open() the feed before publishing"
        line = encode_event(event)
        if not await self._writer.append(event.sequence, line):
            return
        self._tail.append((event.sequence, line))
        if len(self._tail) > TAIL_EVENTS:
            del self._tail[: TAIL_EVENTS // 2]  # older ones are read from the log
        self.wake()

    def wake(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def after(self, cursor: int) -> list[tuple[int, bytes]]:
        """The events with a sequence above ``cursor`` known now, as (sequence,
        ``--json`` line), in order. Cancellation: nothing is consumed."""
        tail = self._tail
        if tail and cursor >= tail[0][0] - 1:
            return tail[bisect.bisect_right(tail, cursor, key=_sequence) :]
        return await self._log.read(self.session_id, cursor)

    def close(self) -> None:
        """No more events here (the server stops): readers end once caught up."""
        self.closed = True
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self.wake()
