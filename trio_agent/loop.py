"""The agent loop: ``run_agent_loop`` and the ``AgentRun`` it returns.

The steps themselves are ``trio_agent.engine.run_turn`` with the default
hooks; this module adds the contract's option checks, the snapshot of the
input, the ``message.accepted`` events for it, and the mapping of the turn's
outcome to a ``RunResult``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar, final, overload

import trio

from ._settings import ModelSettings, check_run_settings
from .engine._emit import Emitter
from .engine._hooks import RunKey, TurnSpec, TurnState, build_spec
from .engine._lifecycle import end_turn, leave_turn, start_turn
from .engine._options import (
    check_loop_options,
    check_scope_unused,
    check_sources_ready,
    check_tool_execution,
    check_tool_sources,
    claim_cancel_scope,
    model_of,
)
from .engine._outcomes import result_of
from .engine._run import EventRun, cancelled_from_outside
from .engine._transcript import Conversation
from .engine._turn import TurnOutcome, run_turn
from .errors import INTERNAL_ERROR, INVALID_TRANSCRIPT, describe
from .events import (
    Cancelled,
    Completed,
    Event,
    Failed,
    MaxSteps,
    MessageAccepted,
    OutputT,
    RunFinished,
    RunResult,
)
from .limits import MAX_INITIAL_MESSAGES
from .messages._ir import Message, TranscriptError
from .model import Model, Usage
from .output._spec import offered, output_spec
from .tools._tool import ToolRegistry, ToolSource

__all__ = ["AgentRun", "run_agent_loop"]

T = TypeVar("T")


@overload
def run_agent_loop(
    *,
    messages: Sequence[Message],
    model: Model | str,
    tools: ToolRegistry,
    max_steps: int,
    request_sequence_start: int = 1,
    cancel_scope: trio.CancelScope | None = None,
    system: str = "",
    tool_execution: Literal["sequential", "parallel"] = "sequential",
    max_parallel_tools: int = 10,
    tool_grace_period: float = 5.0,
    settings: ModelSettings | None = None,
    output_type: type[T],
    output_mode: Literal["tool", "native"] = "tool",
    output_retries: int = 2,
    output_validator: Callable[[Any], Awaitable[Any]] | None = None,
    tool_sources: Sequence[ToolSource] = (),
    deps: Any = None,
) -> AgentRun[T]: ...
@overload
def run_agent_loop(
    *,
    messages: Sequence[Message],
    model: Model | str,
    tools: ToolRegistry,
    max_steps: int,
    request_sequence_start: int = 1,
    cancel_scope: trio.CancelScope | None = None,
    system: str = "",
    tool_execution: Literal["sequential", "parallel"] = "sequential",
    max_parallel_tools: int = 10,
    tool_grace_period: float = 5.0,
    settings: ModelSettings | None = None,
    output_type: Any = None,
    output_mode: Literal["tool", "native"] = "tool",
    output_retries: int = 2,
    output_validator: Callable[[Any], Awaitable[Any]] | None = None,
    tool_sources: Sequence[ToolSource] = (),
    deps: Any = None,
) -> AgentRun[Any]: ...
def run_agent_loop(
    *,
    messages: Sequence[Message],
    model: Model | str,
    tools: ToolRegistry,
    max_steps: int,
    request_sequence_start: int = 1,
    cancel_scope: trio.CancelScope | None = None,
    system: str = "",
    tool_execution: Literal["sequential", "parallel"] = "sequential",
    max_parallel_tools: int = 10,
    tool_grace_period: float = 5.0,
    settings: ModelSettings | None = None,
    output_type: Any = None,
    output_mode: Literal["tool", "native"] = "tool",
    output_retries: int = 2,
    output_validator: Callable[[Any], Awaitable[Any]] | None = None,
    tool_sources: Sequence[ToolSource] = (),
    deps: Any = None,
) -> AgentRun[Any]:
    """Prepare a run of the agent loop; nothing runs until it is entered or awaited.

    Synchronous, and callable outside ``trio.run``. Raises ``TypeError`` or
    ``ValueError`` for a bad option before returning. A ``cancel_scope`` serves
    this run alone: given again (to a run or a turn) it is refused, and one
    entered before the run starts raises ``ValueError`` there, before any event.
    Snapshots ``messages``
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
    ``settings`` go with every request (``ModelRequest.settings``); a
    ``tool_choice`` naming a tool must name one of ``tools``.

    ``output_type`` (any type msgspec can decode; None or ``str`` for plain
    text) asks the model for a typed answer: through the ``final_result`` tool
    (``output_mode="tool"``) or the provider's native structured output
    (``"native"``). An answer that does not decode, or that
    ``output_validator`` (async, given the value) refuses with ``OutputError``,
    goes back to the model with the reason and its JSON path, at most
    ``output_retries`` times (each try is a step), then the run fails with
    ``OUTPUT_INVALID``. ``Completed.output`` holds the accepted value.

    ``tool_sources`` (objects with ``tools()``, such as ``trio_agent.mcp``
    servers) add their current tools before every step (a name ``tools`` has
    keeps its own tool); a source that cannot list them when the run starts
    (an MCP server never entered) raises there, before any event.

    ``deps``: the run's dependencies, as they are (never copied or recorded):
    a tool that takes a ``ToolContext`` reads them as ``ctx.deps``.
    """
    model = model_of(model)  # a name ("openai:gpt-4o") made into its model
    check_loop_options(
        messages, model, tools, max_steps, request_sequence_start, cancel_scope, system
    )
    check_tool_execution(tool_execution, max_parallel_tools, tool_grace_period)
    output = output_spec(output_type, output_mode, output_retries, output_validator)
    sources = check_tool_sources(tool_sources)
    settings = check_run_settings(settings, offered(tools, output, sources))
    conversation: Conversation | None = None
    invalid: str | None = None
    if len(messages) > MAX_INITIAL_MESSAGES:
        invalid = f"{len(messages)} messages, more than {MAX_INITIAL_MESSAGES}"
    else:
        try:
            conversation = Conversation.from_messages(messages, request_sequence_start - 1)
        except TranscriptError as exc:
            invalid = f"{exc.code}: {exc}"
    spec = build_spec(
        model,
        tools,
        system,
        max_steps,
        tool_execution,
        max_parallel_tools,
        tool_grace_period,
        settings,
        output,
        sources,
        deps,
        RunKey(),  # the run's own id, for its calls' idempotency keys, made if needed
    )
    claim_cancel_scope(cancel_scope)  # this run's own: no other run or turn may take it now
    return AgentRun(
        spec, conversation, invalid, trio.CancelScope() if cancel_scope is None else cancel_scope
    )


@final
class AgentRun(EventRun[Event, Completed[OutputT] | Cancelled | MaxSteps | Failed]):
    """One run of the agent loop. Enter it once; iterate its events inside ``async with``.

    ``result`` is None until the run has finished, then the ``RunResult``
    also carried by the last event, ``run.finished``. ``AgentRun[T]`` (a run
    with ``output_type=T``): a ``Completed`` result's ``output`` is a ``T``.
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

    async def _end(self, result: RunResult, emit: Emitter, state: TurnState | None = None) -> None:
        code = result.code if isinstance(result, Failed) else None
        usage = None if state is None else Usage(state.input_tokens, state.output_tokens)
        end_turn(self._spec, None, None, result.status, result.steps, usage, code)
        await self._finish(
            result, lambda sequence: RunFinished(sequence=sequence, result=result), emit
        )

    async def _drive(self, emit: Emitter, host: trio.Nursery | None) -> None:
        """Run to the end in the current task, emit every event, set ``result``.

        Cancellation by the run's own scope ends the run as ``Cancelled``;
        cancellation from outside (bare, or grouped by a tool's or model's
        nursery) also sets ``Cancelled`` and emits ``run.finished``, then
        propagates.
        """
        # a scope entered since run_agent_loop checked it: refused as it would have been
        # then, before any event (no checkpoint from here to the run's own `with scope`)
        check_scope_unused(self._scope)
        check_sources_ready(self._spec.sources)  # an MCP server never entered: say so now
        conversation = self._conversation
        if conversation is None:
            failed = Failed(
                messages=(), steps=0, code=INVALID_TRANSCRIPT, detail=self._invalid or ""
            )
            await self._end(failed, emit)
            return
        state = TurnState()
        outcome: TurnOutcome | None = None
        scope = self._scope
        assert scope is not None  # a loop run always owns a scope
        spec = self._spec = start_turn(self._spec, None, None)
        try:
            try:
                with scope:
                    for message in tuple(conversation.messages):
                        await emit(MessageAccepted(sequence=emit.next, message=message))
                    outcome = await run_turn(conversation, spec, state, emit, host=host)
            except Exception as exc:  # a bug, or a group of them: end the run visibly, raise it
                failed = Failed(
                    messages=tuple(conversation.messages),
                    steps=state.steps,
                    code=INTERNAL_ERROR,
                    detail=describe(exc),
                )
                await self._end(failed, emit, state)
                raise
            except (trio.Cancelled, BaseExceptionGroup) as exc:
                if cancelled_from_outside(exc):
                    cancelled = Cancelled(messages=tuple(conversation.messages), steps=state.steps)
                    await self._end(cancelled, emit, state)
                raise
            if outcome is None:  # our own scope caught the cancellation
                result: RunResult = Cancelled(
                    messages=tuple(conversation.messages), steps=state.steps
                )
            else:
                result = result_of(
                    outcome, tuple(conversation.messages), state.steps, spec.max_steps
                )
            await self._end(result, emit, state)
        finally:
            leave_turn(spec)  # a span end_turn did not end (a bug raised)
