"""How a turn's outcome reads to each layer: a ``RunResult`` for the core loop,
a ``TurnEnd`` for a session turn."""

from __future__ import annotations

from ..errors import CONTEXT_OVERFLOW, leaves
from ..events import (
    Completed,
    Failed,
    MaxSteps,
    RunResult,
    TurnCompleted,
    TurnContentFilter,
    TurnEnd,
    TurnFailed,
    TurnLength,
    TurnMaxSteps,
    TurnRefusal,
)
from ..messages._ir import AssistantMessage, Message, text_from_assistant
from ..model import ContextOverflowError
from ._hooks import TurnState
from ._turn import TurnOutcome

__all__ = ["result_of", "turn_end_of"]


def result_of(
    outcome: TurnOutcome, messages: tuple[Message, ...], steps: int, max_steps: int
) -> RunResult:
    """The ``RunResult`` for a finished turn of the core loop."""
    if outcome.kind == "completed":
        # a completed turn ends on the answer, or on the output tool's result after it
        last = next(m for m in reversed(messages) if type(m) is AssistantMessage)
        return Completed(
            messages=messages,
            steps=steps,
            final_text=text_from_assistant(last),
            stop_reason=outcome.stop_reason,  # type: ignore[arg-type]
            output=outcome.output,
        )
    if outcome.kind == "max_steps":
        return MaxSteps(messages=messages, steps=steps, max_steps=max_steps)
    return Failed(
        messages=messages, steps=steps, code=outcome.code or "", detail=outcome.detail or ""
    )


def turn_end_of(outcome: TurnOutcome, state: TurnState, max_steps: int) -> TurnEnd:
    """The ``TurnEnd`` for a finished session turn (a length, refusal or
    content_filter stop is sticky)."""
    if outcome.kind == "completed":
        sticky = state.sticky_stop
        if sticky is None:
            return TurnCompleted()
        if sticky == "refusal":
            return TurnRefusal()
        return TurnContentFilter() if sticky == "content_filter" else TurnLength()
    if outcome.kind == "max_steps":
        return TurnMaxSteps(max_steps=max_steps)
    if outcome.kind == "stopped":
        return outcome.stop  # type: ignore[return-value]
    code = outcome.code or ""
    if outcome.error is not None and any(
        isinstance(leaf, ContextOverflowError) for leaf in leaves(outcome.error)
    ):
        code = CONTEXT_OVERFLOW
    return TurnFailed(code=code, detail=outcome.detail or "")
