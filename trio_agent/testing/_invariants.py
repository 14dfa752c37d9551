"""``assert_run_invariants``: what the contract promises for any run or turn."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ..events import (
    MessageAccepted,
    RunFinished,
    SessionEvent,
    ToolFinished,
    ToolStarted,
    TurnFinished,
)
from ..messages import ToolResultMessage, repair_transcript, validate_transcript

__all__ = ["InvariantError", "assert_run_invariants"]

_ANY_EVENT = msgspec.json.Decoder(SessionEvent | RunFinished)


class InvariantError(AssertionError):
    """A run broke a promise of the contract; the message says which."""


def _fail(message: str, events: Sequence[Any]) -> None:
    trace = "\n".join(f"  {e.sequence}: {e.type}" for e in events[-12:])
    raise InvariantError(f"{message}\nlast events:\n{trace}")


def assert_run_invariants(events: Sequence[Any], result: Any) -> None:
    """Check the promises of the contract for the events and result of one run or turn.

    - sequences are contiguous (from the first event's), with no gap or repeat;
    - exactly one final event (``run.finished`` or ``turn.finished``), last, and
      its result equals ``result``;
    - every event survives a JSON round trip unchanged;
    - every tool result in the transcript answers a call that was started and
      announced as finished with that very result (none invented);
    - every accepted message is in the transcript, and every assistant message
      is complete (the transcript validates once dangling calls are repaired,
      and is fully valid when the run completed).

    Works with ``AgentRun`` (``RunResult``) and ``TurnRun`` (``TurnResult``).
    Raises ``InvariantError`` naming the broken promise, with the last events.
    """
    if not events:
        raise InvariantError("no events: every run ends with run.finished")
    first = events[0].sequence
    for offset, event in enumerate(events):
        if event.sequence != first + offset:
            _fail(f"event {offset} has sequence {event.sequence}, not {first + offset}", events)
        encoded = msgspec.json.encode(event)
        if _ANY_EVENT.decode(encoded) != event:
            _fail(f"event {event.sequence} ({event.type}) does not round-trip", events)
    finals = [e for e in events if isinstance(e, RunFinished | TurnFinished)]
    if len(finals) != 1 or events[-1] is not finals[0]:
        _fail(f"{len(finals)} final events, or not last", events)
    if finals[0].result != result:
        _fail("the final event's result differs from the run's result", events)
    messages = result.messages
    started = {e.call.id for e in events if isinstance(e, ToolStarted)}
    announced = {e.result.id: e.result for e in events if isinstance(e, ToolFinished)}
    accepted_ids = {e.message.id for e in events if isinstance(e, MessageAccepted)}
    ids = {m.id for m in messages}
    missing = accepted_ids - ids
    if missing and not _compacted(events):
        _fail(f"accepted messages missing from the transcript: {sorted(missing)}", events)
    for message in messages:
        if type(message) is ToolResultMessage and message.id in announced:
            if announced[message.id] != message:
                _fail(f"tool result {message.id} differs from its tool.finished", events)
    for result_id, announced_result in announced.items():
        if announced_result.tool_call_id not in started:
            _fail(f"tool result {result_id} for a call that never started", events)
        if result_id not in ids and not _compacted(events):
            _fail(f"tool.finished announced {result_id}, not in the transcript", events)
    try:
        validate_transcript(repair_transcript(messages))
    except Exception as exc:  # TranscriptError, or worse
        _fail(f"the transcript cannot be repaired into a valid one: {exc}", events)
    status = getattr(result, "status", None) or getattr(getattr(result, "end", None), "reason", "")
    if status in ("completed", "max_steps"):
        try:
            validate_transcript(messages)
        except Exception as exc:
            _fail(f"a {status} run left an invalid transcript: {exc}", events)


def _compacted(events: Sequence[Any]) -> bool:
    return any(getattr(e, "type", "") == "context.compacted" for e in events)
