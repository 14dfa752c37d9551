"""Forking a session's records at a turn (DESIGN 12.4): the pure half of
``Agent.fork``. The new session's ledger is the source's records through the
end of the turn, under the new id, closed cleanly; the source is only read."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ._derive import TOOL_OUTCOME_UNKNOWN, closing_result, derive
from ._records import (
    LedgerError,
    Record,
    SessionClosedRecord,
    SessionStartRecord,
    SnapshotRecord,
    ToolResultRecord,
    TurnEndRecord,
    TurnStartRecord,
)

__all__ = ["fork_records"]


def _cut(records: Sequence[Record], at_turn: int, source: str) -> tuple[int, int]:
    """Where the fork's copy ends (one past the last record it takes) and the
    sequence its next events start at; ``LedgerError`` naming the turn when it
    is not there or has not ended."""
    if at_turn == 0:  # the session as created, before its first turn
        start = records[0]
        assert type(start) is SessionStartRecord
        first = next((i for i, r in enumerate(records) if type(r) is TurnStartRecord), len(records))
        return first, start.first_sequence
    turns = 0
    for index, record in enumerate(records):
        if type(record) is TurnStartRecord:
            turns = record.turn
        elif type(record) is TurnEndRecord and record.turn == at_turn:
            return index + 1, record.sequence
    if at_turn > turns:
        had = "no turn" if turns == 0 else f"{turns} turn{'s' if turns > 1 else ''}"
        raise LedgerError(f"cannot fork session {source!r} at turn {at_turn}: it has {had}")
    raise LedgerError(
        f"cannot fork session {source!r} at turn {at_turn}: the turn has not ended (its "
        "writer died in it, or it still runs); resume the session first, which ends it"
    )


def fork_records(
    records: Sequence[Record], at_turn: int, new_session_id: str, created: float
) -> list[Record]:
    """The records of a new session ``new_session_id`` whose history is ``records``'
    through the end of turn ``at_turn`` (0: as created, before any turn): the same
    records but its snapshots (which hold the source's id; numbered again without
    them), ``session/start`` naming the new id and ``created``, then
    ``session/closed``. Its configuration, usage and pending approvals are the
    source's as they stood then. A call the source left to run again after a
    crash (``DerivedSession.owed_again``: its reruns, held for approval again or not)
    is answered ``TOOL_OUTCOME_UNKNOWN`` in the fork: its idempotency key is the
    source's, so the fork never runs it.
    ``records`` are checked first (``derive``: ``LedgerCorruptError``);
    ``LedgerError`` for a turn that is not there or has not ended."""
    if type(at_turn) is not int or at_turn < 0:
        raise ValueError(f"at_turn must be an int >= 0, got {at_turn!r}")
    source = derive(records).session_id  # the whole source, checked
    end, sequence = _cut(records, at_turn, source)
    start = records[0]
    assert type(start) is SessionStartRecord
    forked: list[Record] = [
        msgspec.structs.replace(start, session_id=new_session_id, created=created)
    ]
    for record in records[1:end]:  # the source's snapshots name the source: left out
        if type(record) is not SnapshotRecord:
            forked.append(
                record
                if record.seq == len(forked)
                else msgspec.structs.replace(record, seq=len(forked))
            )
    derived = derive(forked)
    for call in derived.owed_again():
        result = closing_result(call, TOOL_OUTCOME_UNKNOWN)
        forked.append(ToolResultRecord(seq=len(forked), result=result, code=TOOL_OUTCOME_UNKNOWN))
    forked.append(SessionClosedRecord(seq=len(forked), sequence=sequence))
    derive(forked)  # what is written is a ledger derive takes
    return forked
