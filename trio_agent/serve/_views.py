"""What the session API says of a session and of the decisions asked of it: its
derived state as JSON, and a request's approval answers checked against the
calls waiting, all of them before any is recorded. Pure functions."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from ..ledger._derive import DerivedSession
from ..messages._ir import ToolCall
from ._bodies import ApiError

__all__ = ["Decision", "Moved", "check_decisions", "in_use_elsewhere", "state_json"]

Decision = tuple[str, bool, str]
"""A decision asked for: the held call's id, approved or not, the reason."""


class Moved(Exception):
    """The session has gone on past the turn a request continues (a Responses
    request then branches from that turn)."""


def _call_json(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "arguments": call.arguments}


def state_json(
    session_id: str, derived: DerivedSession | None, running: int | None
) -> dict[str, Any]:
    """The state ``GET /sessions/{id}`` answers (``derived`` None: a session whose
    first turn runs here, not recorded yet)."""
    if derived is None:
        return {
            "id": session_id,
            "turns": 0,
            "running_turn": running,
            "requests": 0,
            "pending_approvals": [],
            "decided_approvals": [],
        }
    decided = derived.decisions
    return {
        "id": session_id,
        "turns": derived.turns,
        "running_turn": running,
        "requests": derived.requests,
        "pending_approvals": [
            _call_json(c) for c in derived.pending_approvals if c.id not in decided
        ],
        "decided_approvals": [
            {**_call_json(c), "approved": decided[c.id].approved}
            for c in derived.pending_approvals
            if c.id in decided
        ],
    }


def check_decisions(
    decisions: Sequence[Decision], waiting: Iterable[str], decided: Iterable[str]
) -> None:
    """Every decision names a call that waits and is not decided, once: else
    ``ApiError`` (409 for one decided already or named twice, 404 for no such
    call), before any is recorded, so a refused request records none."""
    open_calls, done = set(waiting), set(decided)
    seen: set[str] = set()
    for call_id, _, _ in decisions:
        if call_id in done or call_id in seen:
            raise ApiError(409, f"call {call_id!r} is decided already")
        if call_id not in open_calls:
            raise ApiError(404, f"no call {call_id!r} waits for approval")
        seen.add(call_id)


def in_use_elsewhere(session_id: str, error: Exception, not_queued: bool = False) -> ApiError:
    """The 409 for a session another server (or process) holds. The holder's
    details (the store's host, database, user, the lease's holder, a file's path)
    go to the log, not to the HTTP client."""
    logging.getLogger("trio_agent.serve").info(
        "session %s: in use elsewhere: %s", session_id, error
    )
    more = "; not queued" if not_queued else ""
    return ApiError(
        409, f"session {session_id!r} is in use elsewhere (another server holds it){more}"
    )
