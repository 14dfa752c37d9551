"""A turn's (or a run's) start and end, as the application's observability sees
them: a log line, and with an OpenTelemetry observer its ``invoke_agent`` span,
carried on the ``TurnSpec`` from start to end (in the task that started it)."""

from __future__ import annotations

import logging
import sys

import attrs

from .._log import LOOP
from ..model import Usage
from ._hooks import TurnSpec

__all__ = ["end_turn", "leave_turn", "start_turn"]


def start_turn(
    spec: TurnSpec, session_id: str | None, turn: int | None, name: str | None = None
) -> TurnSpec:
    """Log the turn's (or the run's) start; with an observer, start its span, make
    it current in this task, and return ``spec`` carrying the observer."""
    if LOOP.isEnabledFor(logging.INFO):
        LOOP.info("%s started", _what(session_id, turn))
    if _unobserved():
        return spec
    from ..telemetry._observe import observer  # imported once something may observe

    watching = observer(spec.model, session_id, turn, name)
    if watching is None:
        return spec
    watching.turn_span.enter()
    return attrs.evolve(spec, observer=watching)


def end_turn(
    spec: TurnSpec,
    session_id: str | None,
    turn: int | None,
    reason: str,
    steps: int,
    usage: Usage | None,
    code: str | None = None,
) -> None:
    """Log the end and end the span (an error status when it failed or was
    cancelled); in the task that started it."""
    if LOOP.isEnabledFor(logging.INFO):
        LOOP.info(
            "%s ended: %s after %d step%s%s",
            _what(session_id, turn),
            reason,
            steps,
            "" if steps == 1 else "s",
            f" ({code})" if code else "",
        )
    if spec.observer is not None:
        error = code or ("cancelled" if reason == "cancelled" else None)
        spec.observer.end_turn(reason, steps, usage, error)


def leave_turn(spec: TurnSpec) -> None:
    """In the turn's ``finally``: end a span that ``end_turn`` did not (the turn
    left by an exception before its end could be recorded)."""
    if spec.observer is not None:
        spec.observer.turn_span.end(sys.exc_info()[1] or "error")


def _unobserved() -> bool:
    """Nothing can observe a turn: OpenTelemetry's API is not imported (so no
    provider can be configured) and ``trio_agent.loop`` logs no DEBUG. Then
    ``telemetry._observe`` (which decides when something may) is not imported."""
    modules = sys.modules
    return (
        "opentelemetry.trace" not in modules
        and "opentelemetry.metrics" not in modules
        and not LOOP.isEnabledFor(logging.DEBUG)
    )


def _what(session_id: str | None, turn: int | None) -> str:
    if turn is None:
        return "run"
    return f"turn {turn}" + ("" if session_id is None else f" of session {session_id}")
