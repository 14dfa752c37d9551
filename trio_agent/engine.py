"""The step engine that ``run_agent_loop`` and ``Agent`` both run on.

One turn is ``run_turn``: steps until the model stops, the step budget is
spent, a hook stops it or it fails, with every event emitted through one
``Emitter``. The layers differ only in the ``StepHooks`` they pass: the
defaults give exactly the core contract (no inbox, no retries, no hooks);
the session layer overrides them. Like ``trio.lowlevel``, this module is for
building layers, not for everyday use.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, final

import attrs
import trio

from .events import (
    MODEL_ERROR,
    MODEL_PROTOCOL_ERROR,
    TOOL_FATAL,
    AttemptFailed,
    MessageAccepted,
    ModelChunk,
    ToolFinished,
    ToolStarted,
    ToolUpdated,
)
from .limits import without_lone_surrogates
from .messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResultMessage,
    TranscriptError,
    _checked_message,
    _Linker,
    _snapshot,
    tool_result,
)
from .model import Model, ModelRequest, ProtocolViolation, StepCheck, ToolSpec, Usage
from .tools import (
    _CONTEXT,
    FatalToolError,
    ToolContext,
    ToolRegistry,
    _describe,
    execute_tool_call,
)

__all__ = [
    "HOOK_ERROR",
    "Conversation",
    "Emitter",
    "Journal",
    "StepFailure",
    "StepHooks",
    "TurnOutcome",
    "TurnSpec",
    "TurnState",
    "accept",
    "call_hook",
    "run_turn",
]

HOOK_ERROR = "HOOK_ERROR"


class StepFailure(Exception):
    """Ends the turn as failed with a stable ``code``; a hook may raise it directly."""

    def __init__(self, code: str, detail: str, error: BaseException | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.error = error


class _ModelFailed(Exception):
    """One attempt failed with an exception from the model (internal)."""

    def __init__(self, error: Exception, chunks: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.chunks = chunks


@final
class Emitter:
    """The one event counter of a run or session, and its sink.

    ``next`` is the sequence number the next event must carry; it moves on
    only once the event is delivered (a send cancelled by trio delivers
    nothing), so sequences stay contiguous whatever is cancelled. With no
    channel (``wait()`` without ``async with``) events are counted and dropped.
    """

    __slots__ = ("_journal", "_owed", "_send", "host", "next")

    def __init__(
        self,
        send: trio.MemorySendChannel[Any] | None,
        start: int = 0,
        journal: Journal | None = None,
    ) -> None:
        self._send = send
        self._owed: tuple[Callable[[int], Any], ...] = ()  # a tuple: nothing until owed
        self._journal = journal
        self.next = start
        self.host: trio.Nursery | None = None  # where tool tasks may outlive a batch

    async def __call__(self, event: Any) -> None:
        if self._journal is not None:
            # Records are written before the event they match can be observed.
            await self._journal.before_event(self.next)
        if self._send is not None:
            try:
                await self._send.send(event)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._send = None  # the consumer left; the run is being cancelled
        self.next += 1

    @property
    def owed(self) -> int:
        """Events owed: they will be delivered before the last one."""
        return len(self._owed)

    def owe(self, makers: Sequence[Callable[[int], Any]]) -> None:
        """Queue events to deliver just before the last one (for paths that cannot
        await, such as a ``finally`` under cancellation)."""
        self._owed += tuple(makers)

    async def announce(self, makers: Sequence[Callable[[int], Any]]) -> None:
        """Deliver events that report what is already in the transcript.

        If cancellation interrupts them, the undelivered ones are owed and
        ``finish`` delivers them just before the last event: the stream and
        the transcript always agree.
        """
        for index, make in enumerate(makers):
            try:
                await self(make(self.next))
            except trio.Cancelled:
                self._owed += tuple(makers[index:])
                raise

    async def finish(self, make_last: Callable[[int], Any]) -> None:
        """Deliver owed events, then the last one; shielded, as the outcome is decided."""
        with trio.CancelScope(shield=True):
            owed, self._owed = self._owed, ()
            for make in owed:
                await self(make(self.next))
            await self(make_last(self.next))


class Journal(Protocol):
    """Where a session's records go (``trio_agent.ledger.Ledger``); every method but
    ``before_event`` and ``barrier`` writes at once, without awaiting."""

    def message(
        self, message: Message, code: str | None = None, usage: Usage | None = None
    ) -> None: ...
    def compacted(self, messages: tuple[Message, ...]) -> None: ...
    def step_started(self, request_id: str) -> None: ...
    def step_ended(self, request_id: str, stop_reason: str) -> None: ...
    def tool_call(self, call: ToolCall) -> None: ...
    def tool_skipped(self, call: ToolCall) -> None: ...
    def tool_cancelled(self, call: ToolCall) -> None: ...
    def tool_failed(self, call: ToolCall, error: str) -> None: ...
    def attempt_failed(
        self,
        request_id: str,
        attempt: int,
        error: str,
        retry_in: float | None,
        usage: Usage | None = None,
    ) -> None: ...
    async def before_event(self, sequence: int) -> None: ...
    async def barrier(self, point: Literal["event", "step", "turn"]) -> None: ...


def _call_positions(message: Message | None) -> dict[str, int]:
    """Call id -> position among the calls of ``message`` (an assistant message)."""
    if type(message) is not AssistantMessage:
        return {}
    return {b.id: i for i, b in enumerate(message.content) if type(b) is ToolCall}


@final
@attrs.define(eq=False)
class Conversation:
    """The transcript a run or session owns, checked incrementally as it grows.

    ``requests`` counts the model requests opened so far; request ``n`` is
    ``request-{n:03d}``. With a ``journal``, every message is recorded the
    moment it joins the transcript.
    """

    messages: list[Message]
    linker: _Linker
    requests: int = 0
    journal: Journal | None = None
    # Tool results join the transcript in the order of their calls, whatever order
    # they come in (a parallel batch): each is placed by its call's position.
    _positions: dict[str, int] = attrs.field(factory=dict, alias="_positions")
    _batch_start: int = attrs.field(default=0, alias="_batch_start")

    @classmethod
    def from_messages(cls, messages: Sequence[object], requests: int = 0) -> Conversation:
        """Check and copy ``messages``; raises ``TranscriptError``."""
        checked, linker = _snapshot(messages)
        conversation = cls(list(checked), linker, requests)
        conversation._find_batch()
        return conversation

    def _find_batch(self) -> None:
        messages = self.messages
        start = len(messages)
        while start > 0 and type(messages[start - 1]) is ToolResultMessage:
            start -= 1
        self._batch_start = start
        self._positions = _call_positions(messages[start - 1] if start > 0 else None)

    @trio.lowlevel.enable_ki_protection  # in the transcript and in the journal, or in neither
    def append(self, message: Message, code: str | None = None, usage: Usage | None = None) -> None:
        """Add a message (recorded in the journal at once, with the ``usage`` of the
        response it came from); a tool result goes in its call's place among the
        results of its batch."""
        self.linker.add(message)
        messages = self.messages
        if type(message) is ToolResultMessage:
            positions = self._positions
            rank = positions.get(message.tool_call_id, 0)
            at = len(messages)
            while at > self._batch_start and (
                positions.get(messages[at - 1].tool_call_id, 0) > rank  # type: ignore[union-attr]
            ):
                at -= 1
            messages.insert(at, message)
        else:
            messages.append(message)
            self._batch_start = len(messages)
            self._positions = _call_positions(message)
        if self.journal is not None:
            self.journal.message(message, code, usage)

    def snapshot(self) -> tuple[Message, ...]:
        return tuple(self.messages)

    def unanswered_calls(self) -> list[ToolCall]:
        """Calls of the last assistant message still without a result."""
        return list(self.linker.open_calls.values())

    @trio.lowlevel.enable_ki_protection
    def replace(self, messages: Sequence[object]) -> None:
        """Replace the whole transcript (compaction), checked in full: ``TranscriptError``."""
        checked, linker = _snapshot(messages)
        self.messages = list(checked)
        self.linker = linker
        self._find_batch()
        if self.journal is not None:
            self.journal.compacted(checked)

    def check_new(self, message: object) -> Message:
        """Check a message about to be queued: its fields, and an id not yet used."""
        checked = _checked_message(message, len(self.messages))
        if checked.id in self.linker.message_ids:
            raise TranscriptError("DUPLICATE_MESSAGE_ID", f"message id {checked.id!r} is used")
        return checked


@final
@attrs.define(eq=False)
class TurnState:
    """What a turn has done so far; hooks and policies read it."""

    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    last_stop_reason: str | None = None
    hit_length: bool = False
    last_message: AssistantMessage | None = None

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@final
@attrs.frozen(eq=False)
class TurnSpec:
    """What a turn runs with: the model, a snapshot of the tools, and its step budget."""

    model: Model
    tools: ToolRegistry
    specs: tuple[ToolSpec, ...]
    system: str
    max_steps: int
    tool_execution: Literal["sequential", "parallel"] = "sequential"
    max_parallel_tools: int = 10
    tool_grace_period: float = 5.0


@final
@attrs.frozen
class TurnOutcome:
    """How ``run_turn`` ended (cancellation propagates instead)."""

    kind: Literal["completed", "max_steps", "failed", "stopped"]
    stop_reason: str | None = None
    code: str | None = None
    detail: str | None = None
    error: BaseException | None = None
    stop: object = None


class StepHooks:
    """Extension points of ``run_turn``; these defaults are the core contract.

    Override in a subclass. ``has_input``/``take_input`` are synchronous so
    that nothing is taken from a queue unless it is appended at once.
    """

    def has_input(self, stop_reason: str) -> bool:
        """Whether queued input would continue the turn after a step."""
        return False

    def take_input(self, stop_reason: str) -> Sequence[Message]:
        """Take the queued input that continues the turn (appended at once)."""
        return ()

    async def prepare_request(
        self, request: ModelRequest, conversation: Conversation
    ) -> ModelRequest:
        """The request to send, once per step, before any attempt."""
        return request

    def retry_delay(self, error: Exception, attempt: int) -> float | None:
        """Seconds to wait before another attempt after ``error``, or None to fail."""
        return None

    async def before_tool_call(self, call: ToolCall) -> str | None:
        """A reason to block ``call`` (it becomes an error result), or None to run it."""
        return None

    async def after_tool_call(self, call: ToolCall, result: ToolResultMessage) -> ToolResultMessage:
        """The result to record for ``call``."""
        return result

    async def after_step(self, state: TurnState) -> object | None:
        """Called when the turn would go on; anything but None stops it with that value."""
        return None

    def finalize_result(self, result: ToolResultMessage) -> ToolResultMessage:
        """The form in which every tool result is stored (also when a hook failed)."""
        return result


_DEFAULT_HOOKS = StepHooks()


async def call_hook(name: str, call: Callable[..., Any], *args: Any) -> Any:
    """Await ``call(*args)``; an exception from it fails the turn as ``HOOK_ERROR``
    naming ``name`` (cancellation propagates, also when the hook turned it into an error)."""
    try:
        return await call(*args)
    except StepFailure:
        raise
    except Exception as exc:
        await trio.lowlevel.checkpoint_if_cancelled()
        raise StepFailure(HOOK_ERROR, f"hook {name} raised {_describe(exc)}", exc) from exc


async def _stream_response(
    model: Model, request: ModelRequest, conversation: Conversation, emit: Emitter, attempt: int
) -> tuple[AssistantMessage, str, Usage | None]:
    """One attempt: stream, emitting each valid chunk; return the checked assistant message.

    Raises ``_ModelFailed`` for an exception from the model and
    ``StepFailure(MODEL_PROTOCOL_ERROR)`` for a broken rule. Cancellation
    propagates; nothing is appended here, so a half-streamed message never
    reaches the transcript.
    """
    check = StepCheck(request.id)
    violation: ProtocolViolation | None = None
    response: Any = None
    chunks = 0
    emitting = False  # an error while emitting is ours (the journal's), not the model's
    try:
        async with model.stream(request) as stream:
            async for chunk in stream:
                try:
                    checked = check.add_chunk(chunk)
                except ProtocolViolation as exc:
                    violation = exc
                    break
                emitting = True
                await emit(
                    ModelChunk(
                        sequence=emit.next, request_id=request.id, chunk=checked, attempt=attempt
                    )
                )
                emitting = False
                chunks += 1
            else:
                response = await stream.response()
    except Exception as exc:
        # A model that turns our cancellation into its own error is still cancelled.
        await trio.lowlevel.checkpoint_if_cancelled()
        if emitting:
            raise
        if violation is None:
            raise _ModelFailed(exc, chunks) from exc
    try:
        if violation is not None:
            raise violation
        linker = conversation.linker
        message = check.finish(response, linker.message_ids, linker.call_ids)
    except ProtocolViolation as exc:
        detail = f"{request.id}: {exc}"
        usage = getattr(response, "usage", None)
        if conversation.journal is not None and type(usage) is Usage:
            # the response arrived (and was billed) but is refused: count what it cost
            conversation.journal.attempt_failed(request.id, attempt, detail, None, usage)
        raise StepFailure(MODEL_PROTOCOL_ERROR, detail) from None
    return message, response.stop_reason, response.usage


def _blocked_result(call: ToolCall, reason: str) -> ToolResultMessage:
    return tool_result(call, f'Tool call "{call.name}" was blocked: {reason}', True)


def _finished(call: ToolCall, result: ToolResultMessage) -> Callable[[int], ToolFinished]:
    return lambda sequence: ToolFinished(sequence=sequence, call=call, result=result)


def _checked_result(call: ToolCall, result: object) -> ToolResultMessage:
    if (
        type(result) is not ToolResultMessage
        or result.id != f"tool-result-{call.id}"
        or result.tool_call_id != call.id
        or result.tool_name != call.name
    ):
        raise StepFailure(
            HOOK_ERROR,
            f"hook after_tool_call must return the ToolResultMessage of call {call.id!r} "
            f"(same id, tool_call_id and tool_name), got {result!r:.200}",
        )
    try:
        _checked_message(result, 0)
    except TranscriptError as exc:
        raise StepFailure(HOOK_ERROR, f"hook after_tool_call returned {exc}") from None
    return result


async def _after_tool_call(
    call: ToolCall,
    result: ToolResultMessage,
    hooks: StepHooks,
    conversation: Conversation,
    emit: Emitter,
) -> ToolResultMessage:
    """The result to store, from ``after_tool_call``. The tool did run: if the hook
    fails or is interrupted, its own result is stored (and its event owed) first."""
    final: ToolResultMessage | None = None
    try:
        final = _checked_result(
            call, await call_hook("after_tool_call", hooks.after_tool_call, call, result)
        )
    finally:
        if final is None:
            kept = hooks.finalize_result(result)
            conversation.append(kept)
            emit.owe([_finished(call, kept)])
    return hooks.finalize_result(final)


async def _execute(spec: TurnSpec, call: ToolCall, journal: Journal | None) -> ToolResultMessage:
    """Run a dispatched call. A call that fails fatally or is cancelled has no result;
    the journal records which of the two happened to it."""
    try:
        return await execute_tool_call(spec.tools, call)
    except FatalToolError as exc:
        raise _fatal(call, exc, journal) from exc
    except trio.Cancelled:
        if journal is not None:
            journal.tool_cancelled(call)
        raise


def _fatal(call: ToolCall, error: FatalToolError, journal: Journal | None) -> StepFailure:
    """The failure a fatal tool error ends the turn with, recorded as the call's end."""
    if journal is not None:
        journal.tool_failed(call, _describe(error))
    return StepFailure(
        TOOL_FATAL, f'tool "{call.name}" (call {call.id!r}) failed fatally: {error}', error
    )


async def _run_tool_batch(
    message: AssistantMessage,
    spec: TurnSpec,
    hooks: StepHooks,
    conversation: Conversation,
    emit: Emitter,
) -> None:
    """Run the message's calls, sequentially (the default) or in parallel.

    Sequential: one after another, each result appended as it returns.
    Parallel (``spec.tool_execution == "parallel"``): see ``_concurrent_calls``.
    A result, once appended, is always announced by ``tool.finished``.
    ``FatalToolError`` fails the turn with no result for that call; so does a
    ``before_tool_call`` hook that raises. If ``after_tool_call`` raises or is
    interrupted, the tool's own result is stored first. Cancellation
    propagates with no result for an interrupted call.
    """
    calls = [block for block in message.content if type(block) is ToolCall]
    if spec.tool_execution == "parallel":
        await _concurrent_calls(calls, spec, hooks, conversation, emit)
    else:
        for call in calls:
            found = spec.tools.get(call.name)
            if found is not None and found.progress:
                await _concurrent_calls([call], spec, hooks, conversation, emit)
            else:
                await _sequential_call(call, spec, hooks, conversation, emit)
    conversation.linker.require_answered()


async def _start(call: ToolCall, conversation: Conversation, emit: Emitter, dispatch: bool) -> None:
    """Record ``tool/call`` (for a call about to be dispatched), then emit
    ``tool.started``. If that emit is cancelled, the call will not run: the
    ledger says so (``tool/skipped``), so a resume does not call it 'unknown'."""
    journal = conversation.journal if dispatch else None
    if journal is not None:
        journal.tool_call(call)  # recorded before it can be dispatched
    try:
        await emit(ToolStarted(sequence=emit.next, call=call))
    except trio.Cancelled:
        if journal is not None:
            journal.tool_skipped(call)
        raise


async def _sequential_call(
    call: ToolCall, spec: TurnSpec, hooks: StepHooks, conversation: Conversation, emit: Emitter
) -> None:
    plain = hooks is _DEFAULT_HOOKS  # the core: no hook calls on the hot path
    reason = None if plain else await call_hook("before_tool_call", hooks.before_tool_call, call)
    await _start(call, conversation, emit, dispatch=reason is None)
    if reason is not None:
        result = _blocked_result(call, str(reason))
    elif _CONTEXT.get() is None:
        result = await _execute(spec, call, conversation.journal)
    else:  # inside another call (a nested run): never report to that call
        token = _CONTEXT.set(None)
        try:
            result = await _execute(spec, call, conversation.journal)
        finally:
            _CONTEXT.reset(token)
    if not plain:
        result = await _after_tool_call(call, result, hooks, conversation, emit)
    conversation.append(result)
    await emit.announce([_finished(call, result)])


async def _concurrent_calls(
    calls: list[ToolCall],
    spec: TurnSpec,
    hooks: StepHooks,
    conversation: Conversation,
    emit: Emitter,
) -> None:
    """Run ``calls`` as tasks, at most ``spec.max_parallel_tools`` at once.

    This task alone emits events, so their order is total: ``tool.started``
    in call order as each call is dispatched (an ``exclusive`` tool waits for
    an empty pool and holds back the calls after it); ``tool.updated`` as
    reported; ``tool.finished`` as each call completes, its result recorded
    in the ledger and placed in the transcript in call order at that moment
    (``Conversation.append``): a snapshot taken while an earlier call still
    runs has the later results in their places, the earlier one missing.

    If the batch stops early (cancellation, ``FatalToolError``, a failing
    hook) every running call is cancelled, and the results of calls that
    finished are kept, in call order among themselves; none is invented.
    The batch waits ``spec.tool_grace_period`` seconds for cancelled calls to
    end; a call still running then is left to the run's own nursery (when it
    has one: ``async with run``), so the run ends; leaving ``async with``
    still waits for it, as trio cannot abandon a task.
    """
    plain = hooks is _DEFAULT_HOOKS
    total = len(calls)
    tools = [spec.tools.get(call.name) for call in calls]
    send, receive = trio.open_memory_channel[tuple[str, int, Any]](math.inf)
    scopes: dict[int, trio.CancelScope] = {}
    running: set[int] = set()
    exclusive_running = False
    started = 0

    async def finished(index: int, result: ToolResultMessage) -> None:
        conversation.append(result)  # recorded now; placed in call order
        await emit.announce([_finished(calls[index], result)])

    latest: dict[int, tuple[str, float | None]] = {}  # newest unsent report per call

    def spawn(host: trio.Nursery, index: int) -> None:
        scope = scopes[index] = trio.CancelScope()
        call = calls[index]

        def report(message: str, fraction: float | None) -> None:
            # Only the newest report of a call waits to be sent: a slow consumer
            # never builds a backlog that delays tool.finished.
            poke = index not in latest
            latest[index] = (message, fraction)
            if poke:
                try:
                    send.send_nowait(("update", index, None))
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass

        async def run_call() -> None:
            context = ToolContext(call, report)
            token = _CONTEXT.set(context)
            outcome: tuple[str, int, Any] = ("exited", index, None)
            try:
                with scope:
                    try:
                        outcome = ("done", index, await execute_tool_call(spec.tools, call))
                    except FatalToolError as exc:
                        outcome = ("fatal", index, exc)
            finally:
                context.close()
                _CONTEXT.reset(token)
                try:
                    send.send_nowait(outcome)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass  # the batch stopped waiting for this call

        host.start_soon(run_call, name=f"trio_agent.tool:{call.name}:{call.id}")

    def can_start(index: int) -> bool:
        tool = tools[index]
        if tool is not None and tool.exclusive:
            return not running
        return not exclusive_running and len(running) < spec.max_parallel_tools

    async def coordinate(host: trio.Nursery) -> None:
        nonlocal started, exclusive_running
        while started < total or running:
            while started < total and can_start(started):
                index, call = started, calls[started]
                started += 1
                reason = (
                    None
                    if plain
                    else await call_hook("before_tool_call", hooks.before_tool_call, call)
                )
                await _start(call, conversation, emit, dispatch=reason is None)
                if reason is not None:
                    await finished(index, _blocked_result(call, str(reason)))
                    continue
                spawn(host, index)
                running.add(index)
                tool = tools[index]
                exclusive_running = exclusive_running or bool(tool and tool.exclusive)
            if not running:
                continue
            kind, index, payload = await receive.receive()
            if kind == "update":
                update = latest.pop(index, None)
                if update is not None and index in running:  # dropped once it finished
                    message, fraction = update
                    await emit(
                        ToolUpdated(
                            sequence=emit.next,
                            call=calls[index],
                            message=message,
                            fraction=fraction,
                        )
                    )
                continue
            running.discard(index)
            tool = tools[index]
            if tool is not None and tool.exclusive:
                exclusive_running = False
            if kind == "fatal":
                raise _fatal(calls[index], payload, conversation.journal)
            if kind == "done":
                await finished(index, await after(index, payload))

    async def after(index: int, result: ToolResultMessage) -> ToolResultMessage:
        if plain:
            return result
        return await _after_tool_call(calls[index], result, hooks, conversation, emit)

    def take(message: tuple[str, int, Any], kept: list[tuple[int, ToolResultMessage]]) -> None:
        kind, index, payload = message
        if kind == "update":
            return
        running.discard(index)
        if kind == "done":  # it finished in spite of the stop: it ran
            kept.append((index, payload))
        elif conversation.journal is not None:  # it ended without a result
            if kind == "fatal":
                conversation.journal.tool_failed(calls[index], _describe(payload))
            else:
                conversation.journal.tool_cancelled(calls[index])

    async def stop(cancelled: bool) -> None:
        """Cancel what still runs, wait the grace period, keep what finished. Under
        cancellation no hook can run: each result is kept as its tool returned it.
        Otherwise each goes through ``after_tool_call``; one that fails keeps the
        tool's own result and neither loses the others nor hides why the batch
        stopped."""
        for index in running:
            scopes[index].cancel()
        kept: list[tuple[int, ToolResultMessage]] = []
        with trio.move_on_after(spec.tool_grace_period) as waiting:
            waiting.shield = True
            while running:  # what is already waiting first: nothing lost at grace 0
                try:
                    take(receive.receive_nowait(), kept)
                except trio.WouldBlock:
                    take(await receive.receive(), kept)
        receive.close()  # calls still running after the grace period are left behind
        for position, (index, result) in enumerate(kept):
            if cancelled:
                stored = hooks.finalize_result(result)
            else:
                try:
                    stored = await after(index, result)
                except StepFailure:  # the hook failed: keep() stored the tool's result
                    continue
                except trio.Cancelled:  # no more hooks: the rest are kept as they came
                    keep_as_returned(kept[position + 1 :])
                    raise
            conversation.append(stored)
            emit.owe([_finished(calls[index], stored)])

    def keep_as_returned(rest: list[tuple[int, ToolResultMessage]]) -> None:
        for index, result in rest:
            stored = hooks.finalize_result(result)
            conversation.append(stored)
            emit.owe([_finished(calls[index], stored)])

    async def run(host: trio.Nursery) -> None:
        ending = "interrupted"  # by cancellation, until known otherwise
        try:
            await coordinate(host)
            ending = "done"
        except StepFailure:
            ending = "failed"
            raise
        finally:
            if ending != "done":
                await stop(cancelled=ending == "interrupted")

    if emit.host is not None:
        await run(emit.host)
        return
    failure: StepFailure | None = None
    async with trio.open_nursery() as nursery:
        try:
            await run(nursery)
        except StepFailure as exc:  # keep it out of the nursery's exception group
            failure = exc
    if failure is not None:
        raise failure


async def _failed_attempt(
    failed: _ModelFailed,
    attempt: int,
    hooks: StepHooks,
    request: ModelRequest,
    conv: Conversation,
    emit: Emitter,
) -> None:
    """After a failed attempt: record it, then wait the retry delay, or raise
    ``StepFailure`` when ``retry_delay`` gives up."""
    try:
        delay = hooks.retry_delay(failed.error, attempt)
    except Exception as exc:
        raise StepFailure(HOOK_ERROR, f"hook retry_delay raised {_describe(exc)}", exc) from exc
    if conv.journal is not None:
        conv.journal.attempt_failed(request.id, attempt, _describe(failed.error), delay)
    if hooks is not _DEFAULT_HOOKS:  # the core contract has no attempt events
        await emit(
            AttemptFailed(
                sequence=emit.next,
                request_id=request.id,
                attempt=attempt,
                error=_describe(failed.error),
                chunks=failed.chunks,
                retry_in=delay,
            )
        )
    if delay is None:
        raise StepFailure(MODEL_ERROR, _describe(failed.error), failed.error) from None
    await trio.sleep(delay)


async def _step(
    conv: Conversation, spec: TurnSpec, hooks: StepHooks, state: TurnState, emit: Emitter
) -> str:
    """One step: prepare the request, run its attempts until one succeeds or
    ``retry_delay`` gives up, append the answer, run its tools."""
    await trio.lowlevel.checkpoint_if_cancelled()  # never open a request once cancelled
    request = ModelRequest(
        id=f"request-{conv.requests + 1:03d}",
        messages=conv.snapshot(),
        tools=spec.specs,
        system=spec.system,
    )
    if hooks is not _DEFAULT_HOOKS:
        request = await call_hook("prepare_request", hooks.prepare_request, request, conv)
    conv.requests += 1
    state.steps += 1
    journal = conv.journal
    if journal is not None:
        journal.step_started(request.id)
        # stored (every store) before the request exists: a crash while waiting for
        # the first token leaves its trace, and a resume never sends this id again
        await journal.barrier("event")
    attempt = 0
    while True:  # the attempts, inline: one coroutine frame less per suspended step
        attempt += 1
        try:
            message, stop_reason, usage = await _stream_response(
                spec.model, request, conv, emit, attempt
            )
            break
        except _ModelFailed as failed:
            await _failed_attempt(failed, attempt, hooks, request, conv, emit)
    conv.append(message, None, usage)
    state.last_message = message
    state.last_stop_reason = stop_reason
    state.hit_length = state.hit_length or stop_reason == "length"
    if usage is not None:
        state.input_tokens += usage.input_tokens
        state.output_tokens += usage.output_tokens
    if stop_reason == "tool_call":
        await _run_tool_batch(message, spec, hooks, conv, emit)
    if journal is not None:
        journal.step_ended(request.id, stop_reason)
        await journal.barrier("step")
    return stop_reason


async def accept(
    conversation: Conversation,
    messages: Sequence[Message],
    emit: Emitter,
    first: Sequence[Callable[[int], Any]] = (),
) -> None:
    """Append ``messages`` at once, then announce ``first`` and each message
    (``message.accepted``); all owed if cancellation interrupts the announcing.

    Nothing is appended unless all of them can be (``TranscriptError``).
    """
    seen: set[str] = set()
    for message in messages:
        if message.id in conversation.linker.message_ids or message.id in seen:
            raise TranscriptError("DUPLICATE_MESSAGE_ID", f"message id {message.id!r} is used")
        seen.add(message.id)
    for message in messages:
        conversation.append(message)
    await emit.announce(
        [
            *first,
            *(
                lambda sequence, m=m: MessageAccepted(sequence=sequence, message=m)
                for m in messages
            ),
        ]
    )


async def run_turn(
    conversation: Conversation,
    spec: TurnSpec,
    state: TurnState,
    emit: Emitter,
    hooks: StepHooks = _DEFAULT_HOOKS,
) -> TurnOutcome:
    """Run steps until the model stops, the budget is spent, a hook stops it or it fails.

    After each step that would go on (a tool batch ran, or ``hooks.has_input``):
    the step budget is checked (``max_steps``), then ``after_step``, then the
    queued input is taken and appended. Queued input stays queued when the
    turn ends. Cancellation propagates; the conversation then holds only
    complete messages (a cancelled batch may leave calls unanswered, which
    ``repair_transcript`` or the next turn answers explicitly).
    """
    try:
        while True:
            stop_reason = await _step(conversation, spec, hooks, state, emit)
            if stop_reason != "tool_call" and not hooks.has_input(stop_reason):
                return TurnOutcome("completed", stop_reason=stop_reason)
            if state.steps >= spec.max_steps:
                return TurnOutcome("max_steps", stop_reason=stop_reason)
            stop = await call_hook("after_step", hooks.after_step, state)
            if stop is not None:
                return TurnOutcome("stopped", stop_reason=stop_reason, stop=stop)
            pending = hooks.take_input(stop_reason)
            if pending:
                await accept(conversation, pending, emit)
            elif stop_reason != "tool_call":  # the queue was emptied meanwhile
                return TurnOutcome("completed", stop_reason=stop_reason)
    except StepFailure as failure:  # its detail may quote an exception: keep it encodable
        detail = without_lone_surrogates(failure.detail)
        return TurnOutcome("failed", code=failure.code, detail=detail, error=failure.error)
