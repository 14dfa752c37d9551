"""The agent loop: ``run_agent_loop`` and the ``AgentRun`` it returns.

The steps themselves are ``trio_agent.engine.run_turn`` with the default
hooks; this module adds the contract's option checks, the snapshot of the
input, the ``message.accepted`` events for it, and the mapping of the turn's
outcome to a ``RunResult``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, final

import trio

from ._run import EventRun, cancelled_from_outside
from .engine import Conversation, Emitter, TurnOutcome, TurnSpec, TurnState, run_turn
from .events import (
    INTERNAL_ERROR,
    INVALID_TRANSCRIPT,
    Cancelled,
    Completed,
    Event,
    Failed,
    MaxSteps,
    MessageAccepted,
    RunFinished,
    RunResult,
)
from .limits import MAX_AGENT_STEPS, MAX_INITIAL_MESSAGES, is_valid_unicode
from .messages import Message, TranscriptError, text_from_assistant
from .model import Model
from .tools import ToolRegistry, _describe

__all__ = ["AgentRun", "run_agent_loop"]


def _check_options(
    messages: object,
    model: object,
    tools: object,
    max_steps: object,
    request_sequence_start: object,
    cancel_scope: object,
    system: object,
) -> None:
    check_messages_and_model(messages, model)
    if type(tools) is not ToolRegistry:
        raise TypeError(f"tools must be a ToolRegistry, got {type(tools).__name__}")
    if type(max_steps) is not int:
        raise TypeError(f"max_steps must be an int, got {max_steps!r}")
    if not 1 <= max_steps <= MAX_AGENT_STEPS:
        raise ValueError(f"max_steps must be in 1..{MAX_AGENT_STEPS}, got {max_steps}")
    if type(request_sequence_start) is not int:
        raise TypeError(f"request_sequence_start must be an int, got {request_sequence_start!r}")
    if request_sequence_start < 1:
        raise ValueError(f"request_sequence_start must be >= 1, got {request_sequence_start}")
    last = request_sequence_start + max_steps - 1
    if last > MAX_AGENT_STEPS:
        raise ValueError(
            f"requests {request_sequence_start}..{last} go past request {MAX_AGENT_STEPS}"
        )
    check_cancel_scope(cancel_scope)
    check_system(system)


def check_messages_and_model(messages: object, model: object) -> None:
    """``TypeError`` unless ``messages`` is a list or tuple and ``model`` a ``Model``."""
    if type(messages) not in (list, tuple):
        raise TypeError(f"messages must be a list or tuple, got {type(messages).__name__}")
    if not callable(getattr(model, "stream", None)):
        raise TypeError(f"model must have a callable stream(request), got {model!r}")


def check_tool_execution(
    tool_execution: object, max_parallel_tools: object, tool_grace_period: object
) -> None:
    """``TypeError``/``ValueError`` unless the tool-batch options are usable."""
    if tool_execution not in ("sequential", "parallel"):
        raise ValueError(
            f"tool_execution must be 'sequential' or 'parallel', got {tool_execution!r}"
        )
    if type(max_parallel_tools) is not int or max_parallel_tools < 1:
        raise ValueError(f"max_parallel_tools must be an int >= 1, got {max_parallel_tools!r}")
    if (
        type(tool_grace_period) not in (int, float) or not 0 <= tool_grace_period < float("inf")  # type: ignore[operator]
    ):
        raise ValueError(
            f"tool_grace_period must be a finite number >= 0, got {tool_grace_period!r}"
        )


def check_cancel_scope(cancel_scope: object) -> None:
    """``TypeError``/``ValueError`` unless None or a ``trio.CancelScope`` not yet entered."""
    if cancel_scope is None:
        return
    if type(cancel_scope) is not trio.CancelScope:
        raise TypeError(f"cancel_scope must be a trio.CancelScope or None, got {cancel_scope!r}")
    if getattr(cancel_scope, "_has_been_entered", False):
        raise ValueError("cancel_scope has already been entered; pass a fresh one")


def check_system(system: object) -> None:
    """``TypeError``/``ValueError`` unless ``system`` is a valid Unicode str."""
    if type(system) is not str:
        raise TypeError(f"system must be a str, got {type(system).__name__}")
    if not is_valid_unicode(system):
        raise ValueError("system is not valid Unicode (lone surrogate)")


def run_agent_loop(
    *,
    messages: Sequence[Message],
    model: Model,
    tools: ToolRegistry,
    max_steps: int,
    request_sequence_start: int = 1,
    cancel_scope: trio.CancelScope | None = None,
    system: str = "",
    tool_execution: Literal["sequential", "parallel"] = "sequential",
    max_parallel_tools: int = 10,
    tool_grace_period: float = 5.0,
) -> AgentRun:
    """Prepare a run of the agent loop; nothing runs until it is entered or awaited.

    Synchronous, and callable outside ``trio.run``. Raises ``TypeError`` or
    ``ValueError`` for a bad option before returning. Snapshots ``messages``
    (rebuilt, with private copies of tool arguments) and ``tools`` at once,
    so later changes by the caller do not reach the run. An invalid
    transcript is not raised here: the run reports it as its only event,
    ``run.finished`` with ``Failed(code="INVALID_TRANSCRIPT")``.

    Use ``async with run: async for event in run: ...`` to watch it, or
    ``await run.wait()`` for the result alone. Cancellation: ``run.cancel()``,
    a deadline on ``cancel_scope``, or leaving ``async with`` early ends the
    run as ``Cancelled`` with only complete messages.

    ``tool_execution="parallel"`` runs a batch's calls concurrently (at most
    ``max_parallel_tools`` at once; results still join the transcript in call
    order); see ``trio_agent.engine`` for what a consumer then sees.
    """
    _check_options(messages, model, tools, max_steps, request_sequence_start, cancel_scope, system)
    check_tool_execution(tool_execution, max_parallel_tools, tool_grace_period)
    conversation: Conversation | None = None
    invalid: str | None = None
    if len(messages) > MAX_INITIAL_MESSAGES:
        invalid = f"{len(messages)} messages, more than {MAX_INITIAL_MESSAGES}"
    else:
        try:
            conversation = Conversation.from_messages(messages, request_sequence_start - 1)
        except TranscriptError as exc:
            invalid = f"{exc.code}: {exc}"
    spec = TurnSpec(
        model=model,
        tools=tools.copy(),
        specs=tools.specs(),
        system=system,
        max_steps=max_steps,
        tool_execution=tool_execution,
        max_parallel_tools=max_parallel_tools,
        tool_grace_period=float(tool_grace_period),
    )
    return AgentRun(
        spec, conversation, invalid, trio.CancelScope() if cancel_scope is None else cancel_scope
    )


def result_of(
    outcome: TurnOutcome, messages: tuple[Message, ...], steps: int, max_steps: int
) -> RunResult:
    """The ``RunResult`` for a finished turn of the core loop."""
    if outcome.kind == "completed":
        last = messages[-1]
        return Completed(
            messages=messages,
            steps=steps,
            final_text=text_from_assistant(last),  # type: ignore[arg-type]
            stop_reason=outcome.stop_reason,  # type: ignore[arg-type]
        )
    if outcome.kind == "max_steps":
        return MaxSteps(messages=messages, steps=steps, max_steps=max_steps)
    return Failed(
        messages=messages, steps=steps, code=outcome.code or "", detail=outcome.detail or ""
    )


@final
class AgentRun(EventRun[Event, RunResult]):
    """One run of the agent loop. Enter it once; iterate its events inside ``async with``.

    ``result`` is None until the run has finished, then the ``RunResult``
    also carried by the last event, ``run.finished``.
    """

    def __init__(
        self,
        spec: TurnSpec,
        conversation: Conversation | None,
        invalid: str | None,
        scope: trio.CancelScope,
    ) -> None:
        super().__init__(scope)
        self._spec = spec
        self._conversation = conversation
        self._invalid = invalid

    async def _end(self, result: RunResult, emit: Emitter) -> None:
        await self._finish(
            result, lambda sequence: RunFinished(sequence=sequence, result=result), emit
        )

    async def _drive(self, emit: Emitter) -> None:
        """Run to the end in the current task, emit every event, set ``result``.

        Cancellation by the run's own scope ends the run as ``Cancelled``;
        cancellation from outside (bare, or grouped by a tool's or model's
        nursery) also sets ``Cancelled`` and emits ``run.finished``, then
        propagates.
        """
        conversation = self._conversation
        if conversation is None:
            failed = Failed(
                messages=(), steps=0, code=INVALID_TRANSCRIPT, detail=self._invalid or ""
            )
            await self._end(failed, emit)
            return
        state = TurnState()
        outcome: TurnOutcome | None = None
        try:
            with self._scope:
                for message in tuple(conversation.messages):
                    await emit(MessageAccepted(sequence=emit.next, message=message))
                outcome = await run_turn(conversation, self._spec, state, emit)
        except Exception as exc:  # a bug, or a group of them: end the run visibly, raise it
            failed = Failed(
                messages=conversation.snapshot(),
                steps=state.steps,
                code=INTERNAL_ERROR,
                detail=_describe(exc),
            )
            await self._end(failed, emit)
            raise
        except (trio.Cancelled, BaseExceptionGroup) as exc:
            if cancelled_from_outside(exc):
                cancelled = Cancelled(messages=conversation.snapshot(), steps=state.steps)
                await self._end(cancelled, emit)
            raise
        if outcome is None:  # our own scope caught the cancellation
            result: RunResult = Cancelled(messages=conversation.snapshot(), steps=state.steps)
        else:
            result = result_of(outcome, conversation.snapshot(), state.steps, self._spec.max_steps)
        await self._end(result, emit)
