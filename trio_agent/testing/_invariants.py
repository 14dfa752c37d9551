"""``assert_run_invariants``: what the contract promises for any run or turn."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import msgspec

from ..events import (
    AttemptFailed,
    MessageAccepted,
    ModelChunk,
    RunFinished,
    SessionEvent,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    TurnStarted,
)
from ..messages._ir import (
    AssistantMessage,
    RedactedThinkingBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from ..messages._rules import repair_transcript, validate_transcript
from ..model import ThinkingDelta
from ..tools._types import json_bytes
from ._explorer import outcome_of

__all__ = ["InvariantError", "assert_run_invariants"]

_ANY_EVENT = msgspec.json.Decoder(SessionEvent | RunFinished)


class InvariantError(AssertionError):
    """A run broke a promise of the contract; the message says which."""


def _fail(message: str, events: Sequence[Any]) -> None:
    trace = "\n".join(f"  {e.sequence}: {e.type}" for e in events[-12:])
    raise InvariantError(f"{message}\nlast events:\n{trace}")


def _merged(blocks: Sequence[Any]) -> list[Any]:
    """Blocks or chunks with adjacent text joined, adjacent thinking joined (texts
    and signatures), and empty pieces dropped: the contract's merging rule, written
    apart from the engine's so the one checks the other."""
    out: list[Any] = []
    run: list[Any] = []  # the open group: text pieces, or (thinking, signature) pairs
    kind = ""

    def close() -> None:
        if kind == "text":
            out.append("".join(run))
        elif kind == "thinking":
            out.append(("thinking", "".join(t for t, _ in run), "".join(s for _, s in run)))
        run.clear()

    for block in blocks:
        if type(block) is ToolCall:
            close()
            kind = ""
            # keys sorted, as the step compares them: a stream and a response may
            # give one call's keys in different orders
            arguments = msgspec.json.encode(block.arguments, order="sorted")
            out.append((block.id, block.name, arguments))
        elif type(block) is RedactedThinkingBlock:
            close()
            kind = ""
            out.append(("redacted", block.data))
        elif type(block) in (ThinkingBlock, ThinkingDelta):
            if block.thinking or block.signature:
                if kind != "thinking":
                    close()
                    kind = "thinking"
                run.append((block.thinking, block.signature))
        elif block.text:
            if kind != "text":
                close()
                kind = "text"
            run.append(block.text)
    close()
    return out


def _streamed_steps(events: Sequence[Any]) -> list[list[Any]]:
    """The merged chunks of each request's last attempt that did not fail, in order."""
    chunks: dict[tuple[str, int], list[Any]] = {}
    failed: set[tuple[str, int]] = set()
    for event in events:
        if isinstance(event, ModelChunk):
            chunks.setdefault((event.request_id, event.attempt), []).append(event.chunk)
        elif isinstance(event, AttemptFailed):
            failed.add((event.request_id, event.attempt))
    return [_merged(c) for key, c in chunks.items() if key not in failed]


def _round_trips(event: Any) -> bool:
    """Decoded from its JSON, the event is equal to itself; a typed output
    (``output_type=``) comes back as plain JSON, so that one reads back to the
    same JSON instead."""
    encoded = json_bytes(event)  # a typed output may be pydantic's, dumped as pydantic does
    decoded = _ANY_EVENT.decode(encoded)
    if decoded == event:
        return True
    result = getattr(event, "result", None)
    return getattr(result, "output", None) is not None and msgspec.json.encode(decoded) == encoded


def assert_run_invariants(events: Sequence[Any], result: Any) -> None:
    """Check the promises of the contract for the events and result of one run or turn.

    - sequences are contiguous, from 0 for a run (a turn continues its
      session's count and begins with ``turn.started``);
    - exactly one final event (``run.finished`` or ``turn.finished``), last, and
      its result equals ``result``; every event survives a JSON round trip;
    - a call is started and finished at most once, and a ``tool.finished``
      matches its call;
    - of the messages the run added: every assistant message is exactly what
      a step streamed (complete, not cut short, not made up); every tool
      result was announced by ``tool.finished`` for a started call, or
      accepted as input (an explicit repair); every user message was accepted;
    - the transcript validates once dangling calls are repaired, and fully
      when the run completed or spent its budget.

    Works with ``AgentRun`` (``RunResult``) and ``TurnRun`` (``TurnResult``).
    Raises ``InvariantError`` naming the broken promise, with the last events.
    """
    if not events:
        raise InvariantError("no events: every run ends with run.finished or turn.finished")
    is_run = hasattr(result, "status")  # a RunResult; a TurnResult has ``end``
    first = events[0].sequence
    if is_run and first != 0:
        _fail(f"a run's events start at sequence 0, not {first}", events)
    if not is_run and not isinstance(events[0], TurnStarted):
        _fail("a turn's first event is turn.started", events)
    for offset, event in enumerate(events):
        if event.sequence != first + offset:
            _fail(f"event {offset} has sequence {event.sequence}, not {first + offset}", events)
        if not _round_trips(event):
            _fail(f"event {event.sequence} ({event.type}) does not round-trip", events)
    finals = [e for e in events if isinstance(e, RunFinished | TurnFinished)]
    if len(finals) != 1 or events[-1] is not finals[0]:
        _fail(f"{len(finals)} final events, or not last", events)
    if finals[0].result != result:
        _fail("the final event's result differs from the run's result", events)

    started = Counter(e.call.id for e in events if isinstance(e, ToolStarted))
    finished = [e for e in events if isinstance(e, ToolFinished)]
    if any(n > 1 for n in started.values()):
        _fail(f"a call started twice: {[c for c, n in started.items() if n > 1]}", events)
    announced: dict[str, ToolResultMessage] = {}
    for event in finished:
        if event.result.tool_call_id != event.call.id:
            _fail(f"tool.finished for {event.call.id} carries another call's result", events)
        if event.result.id in announced:
            _fail(f"tool.finished twice for {event.result.id}", events)
        if event.call.id not in started:
            _fail(f"tool.finished for {event.call.id}, which never started", events)
        announced[event.result.id] = event.result

    messages = list(result.messages)
    compacted = any(getattr(e, "type", "") == "context.compacted" for e in events)
    accepted = [e.message for e in events if isinstance(e, MessageAccepted)]
    if not compacted:
        accepted_ids = {m.id for m in accepted}
        if is_run:  # the initial messages come first
            history = (
                len(accepted) if any(isinstance(e, ModelChunk) for e in events) else len(messages)
            )
        else:  # the session's transcript before this turn, then the turn's input
            first_input = next(
                (i for i, m in enumerate(messages) if m.id in accepted_ids), len(messages)
            )
            history = first_input
        ids = {m.id for m in messages}
        missing = accepted_ids - ids
        if missing:
            _fail(f"accepted messages missing from the transcript: {sorted(missing)}", events)
        steps = _streamed_steps(events)
        for message in messages[history:]:
            if type(message) is AssistantMessage:
                merged = _merged(message.content)
                if merged not in steps:
                    _fail(f"assistant message {message.id} is not what any step streamed", events)
                steps.remove(merged)
            elif type(message) is ToolResultMessage:
                if message.id in announced:
                    if announced[message.id] != message:
                        _fail(f"tool result {message.id} differs from its tool.finished", events)
                elif message.id not in accepted_ids:
                    _fail(f"tool result {message.id} was neither announced nor accepted", events)
            elif type(message) is UserMessage and message.id not in accepted_ids:
                _fail(f"user message {message.id} was never accepted", events)
        for result_id in announced:
            if result_id not in ids:
                _fail(f"tool.finished announced {result_id}, not in the transcript", events)
    try:
        validate_transcript(repair_transcript(messages))
    except Exception as exc:  # TranscriptError, or worse
        _fail(f"the transcript cannot be repaired into a valid one: {exc}", events)
    status = outcome_of(result)
    if status in ("completed", "max_steps"):
        try:
            validate_transcript(messages)
        except Exception as exc:
            _fail(f"a {status} run left an invalid transcript: {exc}", events)
