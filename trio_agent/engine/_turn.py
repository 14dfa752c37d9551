"""A turn: steps until the model stops, the budget is spent, a hook stops it or
it fails. Each step opens one model request, runs its attempts inline
(retries, when a hook allows them), checks the answer, appends it and runs
its tool batch. Every event goes through the turn's ``Emitter``; nothing here
touches a channel, a file or a clock but through it and the model.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, final

import attrs
import trio

from .._log import LOOP
from ..errors import (
    HOOK_ERROR,
    MODEL_ERROR,
    MODEL_PROTOCOL_ERROR,
    ModelProtocolError,
    StepError,
    describe,
)
from ..events import AttemptFailed, MessageAccepted, ModelChunk
from ..limits import without_lone_surrogates
from ..messages._ir import AssistantMessage, Message, TranscriptError, UserMessage
from ..model import Model, ModelRequest, Usage
from ..output._spec import CURRENT_SLOT, OutputEnd, judge_output
from ._emit import Emitter
from ._fallback import FallbackModel, model_label
from ._hooks import DEFAULT_HOOKS, StepHooks, TurnSpec, TurnState, call_hook, step_spec
from ._step import StepCheck
from ._transcript import Conversation

if TYPE_CHECKING:
    from ..telemetry._observe import Observer

__all__ = ["TurnOutcome", "accept", "run_turn"]

# stop reasons a turn remembers: a later clean stop does not undo them
_STICKY_STOPS = frozenset({"length", "refusal", "content_filter"})


class _ModelFailed(Exception):
    """One attempt failed with an exception from the model (internal)."""

    def __init__(self, error: Exception, chunks: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.chunks = chunks


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
    output: Any = None


# stop reasons that end a typed turn without an answer (OutputEnd has no output)
_DECLINED = frozenset({"refusal", "content_filter"})


def _record_output(conversation: Conversation, end: OutputEnd) -> None:
    """Record an accepted typed answer in the journal (the session's ledger), before
    the turn's end is: given by the last step, the one just judged."""
    journal = conversation.journal
    if journal is not None and end.code is None and end.stop_reason not in _DECLINED:
        journal.output_accepted(f"request-{conversation.requests:03d}", end.output)


def _output_outcome(end: OutputEnd) -> TurnOutcome:
    if end.code is not None:
        return TurnOutcome("failed", stop_reason=end.stop_reason, code=end.code, detail=end.detail)
    return TurnOutcome("completed", stop_reason=end.stop_reason, output=end.output)


async def _stream_response(
    model: Model, request: ModelRequest, conversation: Conversation, emit: Emitter, attempt: int
) -> tuple[AssistantMessage, str, Usage | None, Any]:
    """One attempt: stream, emitting each valid chunk; return the checked assistant
    message, its stop reason and usage, and the stream's ``provider_facts`` (what
    the provider said of it, for telemetry; None from a model without).

    Raises ``_ModelFailed`` for an exception from the model and
    ``StepError(MODEL_PROTOCOL_ERROR)`` for a broken rule. Cancellation
    propagates; nothing is appended here, so a half-streamed message never
    reaches the transcript.
    """
    check = StepCheck(request.id, emit.silent)
    violation: ModelProtocolError | None = None
    response: Any = None
    chunks = 0
    emitting = False  # an error while emitting is ours (the journal's), not the model's
    try:
        async with model.stream(request) as stream:
            async for chunk in stream:
                try:
                    checked = check.add_chunk(chunk)
                except ModelProtocolError as exc:
                    violation = exc
                    break
                emitting = True
                if emit.silent:
                    emit.skip()
                else:
                    await emit(
                        ModelChunk(
                            sequence=emit.next,
                            request_id=request.id,
                            chunk=checked,
                            attempt=attempt,
                        ),
                        False,  # a chunk: the next one is read before yielding
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
    except ModelProtocolError as exc:
        detail = f"{request.id}: {exc}"
        usage = getattr(response, "usage", None)
        if conversation.journal is not None and type(usage) is Usage:
            # the response arrived (and was billed) but is refused: count what it cost
            conversation.journal.attempt_failed(request.id, attempt, detail, None, usage)
        raise StepError(MODEL_PROTOCOL_ERROR, detail) from None
    return message, response.stop_reason, response.usage, getattr(stream, "provider_facts", None)


async def _observed_attempt(
    observer: Observer,
    request: ModelRequest,
    conv: Conversation,
    emit: Emitter,
    attempt: int,
    model: Model,
) -> tuple[AssistantMessage, str, Usage | None, Any]:
    """``_stream_response`` in a ``chat`` span, ended however the attempt ends."""
    handle = observer.start_attempt(request, attempt, model)
    answer = None
    try:
        answer = await _stream_response(model, request, conv, emit, attempt)
        return answer
    finally:
        error: BaseException | str | None = sys.exc_info()[1]
        if isinstance(error, _ModelFailed):
            error = error.error
        elif isinstance(error, StepError):
            error = error.code  # MODEL_PROTOCOL_ERROR: the code names the failure
        observer.end_attempt(handle, answer, error)


async def _failed_attempt(
    failed: _ModelFailed,
    attempt: int,
    hooks: StepHooks,
    request: ModelRequest,
    conv: Conversation,
    emit: Emitter,
    model: str = "",
    round_: int | None = None,
) -> None:
    """After a failed attempt: record it, then wait the retry delay, or raise
    ``StepError`` when ``retry_delay`` gives up. ``model``: the attempt's model's
    label, when it is one of a ``FallbackModel``'s; ``round_``: the rounds of its
    models tried so far, which the retry delay counts instead of attempts."""
    try:
        delay = hooks.retry_delay(failed.error, attempt if round_ is None else round_)
    except Exception as exc:
        raise StepError(HOOK_ERROR, f"hook retry_delay raised {describe(exc)}", exc) from exc
    await _attempt_failed(failed, attempt, hooks, request, conv, emit, delay, model)
    if delay is None:
        raise StepError(MODEL_ERROR, describe(failed.error), failed.error) from None
    LOOP.info(
        "%s attempt %d failed (%s); retrying in %.2f s",
        request.id,
        attempt,
        type(failed.error).__name__,
        delay,
    )
    await trio.sleep(delay)


async def _attempt_failed(
    failed: _ModelFailed,
    attempt: int,
    hooks: StepHooks,
    request: ModelRequest,
    conv: Conversation,
    emit: Emitter,
    delay: float | None,
    model: str = "",
) -> None:
    """Record a failed attempt (``attempt/failed``) and announce it (``attempt.failed``,
    in a session: the core contract has no attempt events)."""
    if conv.journal is not None:
        conv.journal.attempt_failed(request.id, attempt, describe(failed.error), delay, None, model)
    if hooks is not DEFAULT_HOOKS:
        await emit(
            AttemptFailed(
                sequence=emit.next,
                request_id=request.id,
                attempt=attempt,
                error=describe(failed.error),
                chunks=failed.chunks,
                retry_in=delay,
                model=model,
            )
        )


async def _fallback_attempts(
    chain: FallbackModel,
    spec: TurnSpec,
    hooks: StepHooks,
    state: TurnState,
    request: ModelRequest,
    conv: Conversation,
    emit: Emitter,
) -> tuple[AssistantMessage, str, Usage | None]:
    """A step's attempts over a ``FallbackModel``'s models: a failure the chain moves
    on from goes to the next model at once (recorded, ``retry_in`` 0); the end of a
    round goes to the retry policy, counting rounds, and a retry starts from the
    first model. The answering model's usage goes to ``state.fallback_usage``, its
    label with the message's record."""
    attempt = position = 0
    round_ = 1
    observer = spec.observer
    while True:
        attempt += 1
        model = chain.models[position]
        try:
            if observer is None:
                message, stop_reason, usage, _ = await _stream_response(
                    model, request, conv, emit, attempt
                )
            else:
                message, stop_reason, usage, _ = await _observed_attempt(
                    observer, request, conv, emit, attempt, model
                )
        except _ModelFailed as failed:
            label = model_label(model)
            try:
                moved = chain.next_after(position, failed.error)
            except Exception as exc:  # the application's fallback_on
                detail = f"FallbackModel's fallback_on raised {describe(exc)}"
                raise StepError(HOOK_ERROR, detail, exc) from exc
            if moved is not None:
                await _attempt_failed(failed, attempt, hooks, request, conv, emit, 0.0, label)
                LOOP.info(
                    "%s attempt %d on %s failed (%s); trying %s",
                    request.id,
                    attempt,
                    label,
                    type(failed.error).__name__,
                    model_label(chain.models[moved]),
                )
                position = moved
                continue
            await _failed_attempt(failed, attempt, hooks, request, conv, emit, label, round_)
            position, round_ = 0, round_ + 1
            continue
        if usage is not None:
            if state.fallback_usage is None:
                state.fallback_usage = []
            state.fallback_usage.append((model, usage))
        conv.append(message, None, usage, model_label(model))
        return message, stop_reason, usage


_batch_runner: Any = None
"""``run_tool_batch``, once a step's first tool call imported it (an import
statement in the step would cost every step a trip through the import system)."""


def _load_batch_runner() -> Any:
    global _batch_runner
    from ._batch import run_tool_batch  # with the first call: a step's tools

    _batch_runner = run_tool_batch
    return run_tool_batch


async def _step(
    conv: Conversation,
    spec: TurnSpec,
    hooks: StepHooks,
    state: TurnState,
    emit: Emitter,
    host: trio.Nursery | None,
) -> str:
    """One step: prepare the request, run its attempts until one succeeds or
    ``retry_delay`` gives up, append the answer, run its tools."""
    await trio.lowlevel.checkpoint_if_cancelled()  # never open a request once cancelled
    spec = step_spec(spec)  # the tool sources' lists as they are now, for the whole step
    request = ModelRequest(
        id="request-" + str(conv.requests + 1).zfill(3),  # request-{n:03d}, without the format spec
        messages=conv.snapshot(),
        tools=spec.specs,
        system=spec.system,
        settings=spec.settings,
        output=None if spec.output is None else spec.output.spec.format,
    )
    if hooks.prepares_requests:
        request = await call_hook("prepare_request", hooks.prepare_request, request, conv)
    conv.requests += 1
    state.steps += 1
    journal = conv.journal
    if journal is not None:
        journal.step_started(request.id, request.settings)
        # stored (every store) before the request exists: a crash while waiting for
        # the first token leaves its trace, and a resume never sends this id again
        await journal.barrier("event")
    attempt = 0
    observer = spec.observer
    chain = spec.fallback
    if chain is not None:  # a FallbackModel: each attempt is one of its models'
        message, stop_reason, usage = await _fallback_attempts(
            chain, spec, hooks, state, request, conv, emit
        )
    else:
        while True:  # the attempts, inline: one coroutine frame less per suspended step
            attempt += 1
            try:
                if observer is None:
                    message, stop_reason, usage, _ = await _stream_response(
                        spec.model, request, conv, emit, attempt
                    )
                else:
                    message, stop_reason, usage, _ = await _observed_attempt(
                        observer, request, conv, emit, attempt, spec.model
                    )
                break
            except _ModelFailed as failed:
                await _failed_attempt(failed, attempt, hooks, request, conv, emit)
        conv.append(message, None, usage)
    state.last_message = message
    state.last_stop_reason = stop_reason
    if stop_reason in _STICKY_STOPS:
        state.hit_length = state.hit_length or stop_reason == "length"
        if state.sticky_stop in (None, "length"):
            state.sticky_stop = stop_reason
    if usage is not None:
        state.input_tokens += usage.input_tokens
        state.output_tokens += usage.output_tokens
        state.cache_read_tokens += usage.cache_read_tokens
        state.cache_write_tokens += usage.cache_write_tokens
    if stop_reason == "tool_call":
        run_batch = _batch_runner or _load_batch_runner()
        await run_batch(message, spec, hooks, conv, emit, host)
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
    hooks: StepHooks = DEFAULT_HOOKS,
    host: trio.Nursery | None = None,
) -> TurnOutcome:
    """Run steps until the model stops, the budget is spent, a hook stops it or it fails.

    After each step that would go on (a tool batch ran, or ``hooks.has_input``):
    the step budget is checked (``max_steps``), then ``after_step``, then the
    queued input is taken and appended. Queued input stays queued when the
    turn ends. Cancellation propagates; the conversation then holds only
    complete messages (a cancelled batch may leave calls unanswered, which
    ``repair_transcript`` or the next turn answers explicitly). ``host`` is a
    nursery where tool calls that ignore cancellation may go on after their
    batch (see ``ToolBatch``); without one, a batch waits for its calls.
    """
    # the output tool finds the turn's slot here (put back after: a tool may run a
    # turn of another agent in this very task)
    slot = spec.output
    slot_token = None if slot is None or slot.spec.tool is None else CURRENT_SLOT.set(slot)
    try:
        while True:
            stop_reason = await _step(conversation, spec, hooks, state, emit, host)
            again: str | None = None
            awaiting = (
                hooks.awaiting_approval()
                if stop_reason == "tool_call" and hooks is not DEFAULT_HOOKS
                else None
            )
            if awaiting is not None:  # no request while a call of the last step is undecided
                return TurnOutcome("stopped", stop_reason=stop_reason, stop=awaiting)
            if spec.output is not None:
                verdict = await judge_output(spec.output, stop_reason, state.last_message)
                if type(verdict) is OutputEnd:
                    _record_output(conversation, verdict)
                    return _output_outcome(verdict)
                again = verdict
            if again is None and stop_reason != "tool_call" and not hooks.has_input(stop_reason):
                return TurnOutcome("completed", stop_reason=stop_reason)
            if state.steps >= spec.max_steps:
                return TurnOutcome("max_steps", stop_reason=stop_reason)
            stop = (
                await call_hook("after_step", hooks.after_step, state)
                if hooks.checks_steps
                else None
            )
            if stop is not None:
                return TurnOutcome("stopped", stop_reason=stop_reason, stop=stop)
            if again is not None:  # ask for the typed answer again
                taken = conversation.linker.message_ids
                retry_id = f"output-retry-{conversation.requests:03d}"
                while retry_id in taken:  # an id the caller chose for a message of its own
                    retry_id += "-"
                # steering queued meanwhile goes with the request for the answer
                steering = hooks.take_input(stop_reason)
                await accept(conversation, [UserMessage(retry_id, again), *steering], emit)
                continue
            pending = hooks.take_input(stop_reason)
            if pending:
                await accept(conversation, pending, emit)
            elif stop_reason != "tool_call":  # the queue was emptied meanwhile
                return TurnOutcome("completed", stop_reason=stop_reason)
    except StepError as failure:  # its detail may quote an exception: keep it encodable
        detail = without_lone_surrogates(failure.detail)
        return TurnOutcome("failed", code=failure.code, detail=detail, error=failure.error)
    finally:
        if slot_token is not None:
            CURRENT_SLOT.reset(slot_token)
