"""The agent loop: ``run_agent_loop`` and the ``AgentRun`` it returns.

The step logic is a few async functions with the event sink injected
(``_Emitter``); ``AgentRun`` is the thin shell that owns the run's task,
channel and cancel scope. A session layer calls the same step functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, final

import attrs
import trio

from .events import (
    INVALID_TRANSCRIPT,
    MODEL_ERROR,
    MODEL_PROTOCOL_ERROR,
    TOOL_FATAL,
    Cancelled,
    Completed,
    Event,
    Failed,
    MaxSteps,
    MessageAccepted,
    ModelChunk,
    RunFinished,
    RunResult,
    ToolFinished,
    ToolStarted,
)
from .limits import MAX_AGENT_STEPS, MAX_INITIAL_MESSAGES, is_valid_unicode
from .messages import (
    AssistantMessage,
    Message,
    ToolCall,
    TranscriptError,
    _Linker,
    _snapshot,
    text_from_assistant,
)
from .model import Model, ModelRequest, ProtocolViolation, StepCheck, ToolSpec
from .tools import FatalToolError, ToolRegistry, _describe, execute_tool_call

__all__ = ["AgentRun", "run_agent_loop"]

_EVENT_BUFFER = 0
"""The run and its consumer move in lockstep: each event is handed over before the
run goes on, so a consumer that calls ``cancel()`` after event k sees ``run.finished``
next. (A buffer measured no faster: trio's schedule points dominate either way.)"""


class _RunFailure(Exception):
    """Ends the run as ``Failed(code, detail)``; internal to the loop."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


@final
class _Emitter:
    """The run's one event counter and sink.

    ``next`` is the sequence number the next event must carry; it moves on
    only once the event is delivered (a send cancelled by trio delivers
    nothing), so sequences stay contiguous whatever is cancelled. With no
    channel (``wait()`` without ``async with``) events are counted and dropped.
    """

    __slots__ = ("_owed", "_send", "next")

    def __init__(self, send: trio.MemorySendChannel[Event] | None) -> None:
        self._send = send
        self._owed: Event | None = None
        self.next = 0

    async def __call__(self, event: Event, *, owed: bool = False) -> None:
        """Deliver ``event``. With ``owed=True`` an event whose send is cancelled is
        kept and delivered by ``finish`` just before ``run.finished``: it reports
        something already in the transcript, so it must not be lost."""
        if self._send is not None:
            try:
                await self._send.send(event)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._send = None  # the consumer left; the run is being cancelled
            except trio.Cancelled:
                if owed:
                    self._owed = event
                raise
        self.next += 1

    async def finish(self, make_last: Callable[[int], Event]) -> None:
        """Deliver any owed event, then the last one; shielded, as the run is decided."""
        with trio.CancelScope(shield=True):
            if self._owed is not None:
                owed, self._owed = self._owed, None
                await self(owed)
            await self(make_last(self.next))


@final
@attrs.define(eq=False)
class _RunState:
    """The run's own transcript and counters; only complete messages go in."""

    transcript: list[Message]
    linker: _Linker
    steps: int = 0

    def append(self, message: Message) -> None:
        self.linker.add(message)
        self.transcript.append(message)


@final
@attrs.frozen(eq=False)
class _RunConfig:
    model: Model
    tools: ToolRegistry
    specs: tuple[ToolSpec, ...]
    system: str
    max_steps: int
    request_sequence_start: int


async def _stream_response(
    model: Model, request: ModelRequest, state: _RunState, emit: _Emitter
) -> tuple[AssistantMessage, str]:
    """Stream one response, emitting each valid chunk; return the checked assistant message.

    Raises ``_RunFailure`` for a model exception (``MODEL_ERROR``) or a
    broken rule (``MODEL_PROTOCOL_ERROR``). Cancellation propagates; nothing
    is appended here, so a half-streamed message never reaches the transcript.
    """
    check = StepCheck(request.id)
    violation: ProtocolViolation | None = None
    response: object = None
    try:
        async with model.stream(request) as stream:
            async for chunk in stream:
                try:
                    checked = check.add_chunk(chunk)
                except ProtocolViolation as exc:
                    violation = exc
                    break
                await emit(ModelChunk(sequence=emit.next, request_id=request.id, chunk=checked))
            else:
                response = await stream.response()
    except Exception as exc:
        # A model that turns our cancellation into its own error is still cancelled.
        await trio.lowlevel.checkpoint_if_cancelled()
        if violation is None:
            raise _RunFailure(MODEL_ERROR, _describe(exc)) from exc
    try:
        if violation is not None:
            raise violation
        message = check.finish(response, state.linker.message_ids, state.linker.call_ids)
    except ProtocolViolation as exc:
        raise _RunFailure(MODEL_PROTOCOL_ERROR, f"{request.id}: {exc}") from None
    return message, response.stop_reason  # type: ignore[attr-defined]


async def _run_tool_batch(
    message: AssistantMessage, tools: ToolRegistry, state: _RunState, emit: _Emitter
) -> None:
    """Run the message's calls one after another, appending each result as it returns.

    A result, once appended, is always announced by ``tool.finished`` (owed
    and sent before ``run.finished`` if cancellation interrupts its send), so
    the event stream and the transcript agree.
    ``FatalToolError`` raises ``_RunFailure(TOOL_FATAL)`` with no result for
    that call. Cancellation propagates with no result for the interrupted call.
    """
    for block in message.content:
        if type(block) is not ToolCall:
            continue
        await emit(ToolStarted(sequence=emit.next, call=block))
        try:
            result = await execute_tool_call(tools, block)
        except FatalToolError as exc:
            raise _RunFailure(
                TOOL_FATAL, f'tool "{block.name}" (call {block.id!r}) failed fatally: {exc}'
            ) from exc
        state.append(result)
        await emit(ToolFinished(sequence=emit.next, call=block, result=result), owed=True)
    state.linker.require_answered()


async def _run_steps(config: _RunConfig, state: _RunState, emit: _Emitter) -> RunResult:
    """Steps until the model stops, the budget is spent or the run fails."""
    for index in range(config.max_steps):
        await trio.lowlevel.checkpoint_if_cancelled()  # never open a request once cancelled
        request = ModelRequest(
            id=f"request-{config.request_sequence_start + index:03d}",
            messages=tuple(state.transcript),
            tools=config.specs,
            system=config.system,
        )
        state.steps += 1
        try:
            message, stop_reason = await _stream_response(config.model, request, state, emit)
            state.append(message)
            if stop_reason != "tool_call":
                return Completed(
                    messages=tuple(state.transcript),
                    steps=state.steps,
                    final_text=text_from_assistant(message),
                    stop_reason=stop_reason,  # type: ignore[arg-type]
                )
            await _run_tool_batch(message, config.tools, state, emit)
        except _RunFailure as failure:
            return Failed(
                messages=tuple(state.transcript),
                steps=state.steps,
                code=failure.code,
                detail=failure.detail,
            )
    return MaxSteps(messages=tuple(state.transcript), steps=state.steps, max_steps=config.max_steps)


def _check_options(
    messages: object,
    model: object,
    tools: object,
    max_steps: object,
    request_sequence_start: object,
    cancel_scope: object,
    system: object,
) -> None:
    if type(messages) not in (list, tuple):
        raise TypeError(f"messages must be a list or tuple, got {type(messages).__name__}")
    if not callable(getattr(model, "stream", None)):
        raise TypeError(f"model must have a callable stream(request), got {model!r}")
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
    if cancel_scope is not None:
        if type(cancel_scope) is not trio.CancelScope:
            raise TypeError(
                f"cancel_scope must be a trio.CancelScope or None, got {cancel_scope!r}"
            )
        if getattr(cancel_scope, "_has_been_entered", False):
            raise ValueError("cancel_scope has already been entered; pass a fresh one")
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
    """
    _check_options(messages, model, tools, max_steps, request_sequence_start, cancel_scope, system)
    failure: str | None = None
    initial: tuple[Message, ...] = ()
    linker = _Linker()
    if len(messages) > MAX_INITIAL_MESSAGES:
        failure = f"{len(messages)} messages, more than {MAX_INITIAL_MESSAGES}"
    else:
        try:
            initial, linker = _snapshot(messages)
        except TranscriptError as exc:
            failure = f"{exc.code}: {exc}"
    config = _RunConfig(
        model=model,
        tools=tools.copy(),
        specs=tools.specs(),
        system=system,
        max_steps=max_steps,
        request_sequence_start=request_sequence_start,
    )
    return AgentRun(
        config=config,
        initial=initial,
        linker=linker,
        invalid=failure,
        scope=trio.CancelScope() if cancel_scope is None else cancel_scope,
    )


_NEW, _OPEN, _CLOSED, _INLINE = "new", "open", "closed", "inline"


@final
@attrs.define(eq=False)
class AgentRun:
    """One run of the agent loop. Enter it once; iterate its events inside ``async with``.

    ``result`` is None until the run has finished, then the ``RunResult``
    also carried by the last event, ``run.finished``.
    """

    _config: _RunConfig = attrs.field(alias="config")
    _initial: tuple[Message, ...] = attrs.field(alias="initial")
    _linker: _Linker = attrs.field(alias="linker")
    _invalid: str | None = attrs.field(alias="invalid")
    _scope: trio.CancelScope = attrs.field(alias="scope")
    _phase: str = attrs.field(default=_NEW, init=False)
    _result: RunResult | None = attrs.field(default=None, init=False)
    _receive: trio.MemoryReceiveChannel[Event] | None = attrs.field(default=None, init=False)
    _nursery_manager: Any = attrs.field(default=None, init=False)

    @property
    def result(self) -> RunResult | None:
        """The run's result once it has finished, else None."""
        return self._result

    def cancel(self) -> None:
        """Cancel the run (its cancel scope); safe at any time, also before it starts."""
        self._scope.cancel()

    async def _drive(self, emit: _Emitter) -> None:
        """Run to the end in the current task, emit every event, set ``result``.

        Cancellation by the run's own scope ends the run as ``Cancelled``;
        cancellation from outside also sets ``Cancelled`` and tries to emit
        ``run.finished``, then propagates.
        """
        if self._invalid is not None:
            await self._finish(
                Failed(messages=(), steps=0, code=INVALID_TRANSCRIPT, detail=self._invalid),
                emit,
            )
            return
        state = _RunState(list(self._initial), self._linker)
        result: RunResult | None = None
        try:
            with self._scope:
                for message in self._initial:
                    await emit(MessageAccepted(sequence=emit.next, message=message))
                result = await _run_steps(self._config, state, emit)
        except (trio.Cancelled, BaseExceptionGroup) as exc:
            # Cancelled from outside, bare or grouped by a tool's or model's nursery:
            # the run still ends as Cancelled with run.finished, then it propagates.
            if isinstance(exc, trio.Cancelled) or exc.split(trio.Cancelled)[0] is not None:
                await self._finish(
                    Cancelled(messages=tuple(state.transcript), steps=state.steps), emit
                )
            raise
        if result is None:  # our own scope caught the cancellation
            result = Cancelled(messages=tuple(state.transcript), steps=state.steps)
        await self._finish(result, emit)

    async def _finish(self, result: RunResult, emit: _Emitter) -> None:
        self._result = result
        await emit.finish(lambda sequence: RunFinished(sequence=sequence, result=result))

    async def _drive_and_close(self, send: trio.MemorySendChannel[Event]) -> None:
        async with send:
            await self._drive(_Emitter(send))

    async def __aenter__(self) -> AgentRun:
        if self._phase != _NEW:
            raise RuntimeError("an AgentRun can be entered (or awaited) only once")
        self._phase = _OPEN
        send, self._receive = trio.open_memory_channel[Event](_EVENT_BUFFER)
        self._nursery_manager = trio.open_nursery()
        nursery = await self._nursery_manager.__aenter__()
        nursery.start_soon(self._drive_and_close, send, name="trio_agent.run")
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        """Leaving early cancels the run; waits for it to finish either way."""
        self._phase = _CLOSED
        if self._result is None:
            self._scope.cancel()
        assert self._receive is not None
        self._receive.close()
        try:
            await self._nursery_manager.__aexit__(None, None, None)
        except BaseExceptionGroup as group:
            _, rest = group.split(trio.Cancelled)
            if exc is not None:
                if rest is None:
                    # Only cancellation: let the body's own exception through. Nothing
                    # is lost: trio cancellation is level-triggered, so the cancelled
                    # scope raises again at the caller's next checkpoint.
                    return False
                # The run died too: keep both rather than lose the body's exception.
                raise BaseExceptionGroup(
                    "the body of `async with run` and the run both raised",
                    [exc, *rest.exceptions],
                ) from None
            if len(group.exceptions) == 1 and not isinstance(
                group.exceptions[0], BaseExceptionGroup
            ):
                raise group.exceptions[0] from None
            raise
        return False

    def __aiter__(self) -> AgentRun:
        return self

    async def __anext__(self) -> Event:
        if self._phase != _OPEN or self._receive is None:
            raise RuntimeError("iterate an AgentRun inside `async with run:`")
        try:
            return await self._receive.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    async def wait(self) -> RunResult:
        """Return the result once the run has finished.

        Inside ``async with`` it drains the remaining events. Without it, it
        runs the whole loop in the calling task with no event channel (the
        fastest way to get a result). Cancellation of the caller cancels the run.
        """
        if self._phase == _NEW:
            self._phase = _INLINE
            await self._drive(_Emitter(None))
        elif self._phase == _OPEN:
            async for _ in self:
                pass
        if self._result is None:
            raise RuntimeError("the run is already being awaited elsewhere")
        return self._result
