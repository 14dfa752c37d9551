"""Sessions: an ``Agent`` keeps a conversation across turns.

A turn is ``trio_agent.engine.run_turn`` with session hooks: an inbox
(steering before the next request, follow-ups when the turn would end),
user hooks, retries of transient model failures inside a step, budgets that
end a turn with their own reason, and a context-window guard. One event
counter runs across all turns of a session.
"""

from __future__ import annotations

import math
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from contextlib import nullcontext
from typing import Any, Literal, final

import attrs
import msgspec
import trio

from ._run import EventRun, cancelled_from_outside, exit_nursery
from .engine import (
    HOOK_ERROR,
    Conversation,
    Emitter,
    StepFailure,
    StepHooks,
    TurnOutcome,
    TurnSpec,
    TurnState,
    accept,
    call_hook,
    run_turn,
)
from .events import (
    INTERNAL_ERROR,
    ContextCompacted,
    SessionEvent,
    TurnBlocked,
    TurnCancelled,
    TurnCompleted,
    TurnEnd,
    TurnFailed,
    TurnFinished,
    TurnInterrupted,
    TurnLength,
    TurnMaxSteps,
    TurnRepeatedFailure,
    TurnResult,
    TurnStarted,
    TurnTokenBudget,
)
from .ledger import (
    DerivedSession,
    FsyncPolicy,
    Ledger,
    LedgerError,
    SessionChangedError,
    SessionWriter,
    check_fsync,
    derive,
)
from .limits import cut_text
from .loop import check_messages_and_model, check_system, check_tool_execution
from .messages import (
    INTERRUPTED_RESULT_TEXT,
    Message,
    ToolCall,
    ToolResultMessage,
    TranscriptError,
    UserMessage,
    text_from_assistant,
    tool_result,
    validate_transcript,
)
from .model import ContextOverflowError, Model, ModelRequest, TransientModelError, Usage
from .stores import SessionStore
from .tools import ToolRegistry, _describe

__all__ = [
    "CONTEXT_OVERFLOW",
    "Agent",
    "RetryPolicy",
    "ToolBlocked",
    "TurnRun",
    "block",
    "estimate_tokens",
    "truncate_text",
]

CONTEXT_OVERFLOW = "CONTEXT_OVERFLOW"
RESERVED_PREFIXES = ("message-", "tool-result-")
"""Id prefixes of the messages the loop makes; input messages may not use them."""

TransformContext = Callable[[tuple[Message, ...]], Awaitable[Sequence[Message]]]
BeforeToolCall = Callable[[ToolCall], Awaitable["ToolBlocked | None"]]
AfterToolCall = Callable[[ToolCall, ToolResultMessage], Awaitable[ToolResultMessage]]
ShouldStopTurn = Callable[[TurnState], Awaitable[bool]]
Compact = Callable[[tuple[Message, ...]], Awaitable[Sequence[Message]]]
CountTokens = Callable[[ModelRequest], int]


@final
@attrs.frozen
class ToolBlocked:
    """What ``before_tool_call`` returns to stop a call; build it with ``block(reason)``."""

    reason: str


def block(reason: str) -> ToolBlocked:
    """Block a tool call: it does not run, and the model sees ``reason`` as an error result."""
    if type(reason) is not str:
        raise TypeError(f"block() takes a str reason, got {reason!r}")
    return ToolBlocked(reason)


def _positive(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) not in (int, float) or not value > 0 or not math.isfinite(value):  # type: ignore[operator]
        raise ValueError(f"{attribute.name} must be a finite number > 0, got {value!r}")


@final
@attrs.frozen
class RetryPolicy:
    """Retries of a model attempt that failed with ``TransientModelError``.

    ``attempts`` counts all tries (the first included). The delay before try
    ``n + 1`` is ``initial_delay * 2**(n - 1)``, at most ``max_delay``, times a
    random factor in ``1 +- jitter``. A ``retry_after`` hint on the error is
    honoured instead; a hint longer than ``max_retry_after`` gives up at once.
    Any other error is never retried. Waits use trio's clock.
    """

    attempts: int = attrs.field(default=5)
    initial_delay: float = attrs.field(default=0.5, validator=_positive)
    max_delay: float = attrs.field(default=10.0, validator=_positive)
    jitter: float = attrs.field(default=0.1)
    max_retry_after: float = attrs.field(default=60.0, validator=_positive)

    def __attrs_post_init__(self) -> None:
        if type(self.attempts) is not int or self.attempts < 1:
            raise ValueError(f"attempts must be an int >= 1, got {self.attempts!r}")
        if type(self.jitter) not in (int, float) or not 0 <= self.jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter!r}")

    def delay(self, error: Exception, attempt: int, rng: random.Random) -> float | None:
        """Seconds before the next try after ``attempt`` failed with ``error``, or None.

        An ``ExceptionGroup`` (from a provider's nursery) is transient when all
        its leaves are; the longest ``retry_after`` among them is honoured.
        """
        leaves = _leaves(error)
        if attempt >= self.attempts or not all(
            isinstance(leaf, TransientModelError) for leaf in leaves
        ):
            return None
        hints = [leaf.retry_after for leaf in leaves if leaf.retry_after is not None]  # type: ignore[attr-defined]
        hint = max(hints) if hints else None
        if hint is not None and math.isfinite(hint) and hint >= 0:
            return None if hint > self.max_retry_after else float(hint)
        base = min(self.max_delay, self.initial_delay * 2 ** (attempt - 1))
        return base * (1 + rng.uniform(-self.jitter, self.jitter))


_DEFAULT_RETRY = RetryPolicy()  # frozen: one shared by every Agent that takes the default
_UNSCOPED = nullcontext()  # stands in for the scope of a turn no caller can cancel


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def estimate_tokens(request: ModelRequest) -> int:
    """A cheap pre-flight estimate: one token per 4 bytes of the request as JSON."""
    return math.ceil(len(msgspec.json.encode(request)) / 4)


def truncate_text(text: str, limit: int) -> str:
    """``text`` if it fits ``limit`` characters, else its head and tail around a marker."""
    return cut_text(text, limit, f"result longer than {limit}")


def _new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def _as_user_message(message: str | UserMessage) -> UserMessage:
    if type(message) is str:
        return UserMessage(_new_id("user"), message)
    if type(message) is UserMessage:
        return message
    raise TypeError(f"expected a str or UserMessage, got {type(message).__name__}")


def _optional_hook(name: str, value: object) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be an async callable or None, got {value!r}")


@final
class _SessionHooks(StepHooks):
    """The engine hooks of one session turn."""

    def __init__(self, agent: Agent, emit: Emitter) -> None:
        self._agent = agent
        self._emit = emit
        self._failing_key: bytes | None = None
        self._failing_count = 0
        self._failing_tool = ""

    # -- inbox
    def has_input(self, stop_reason: str) -> bool:
        agent = self._agent
        return bool(agent._steering) or (stop_reason != "tool_call" and bool(agent._follow_ups))

    def take_input(self, stop_reason: str) -> tuple[Message, ...]:
        agent = self._agent
        if agent._steering:
            return _drain(agent._steering, agent._reserved)
        if stop_reason != "tool_call":
            return _drain(agent._follow_ups, agent._reserved)
        return ()

    # -- requests
    async def _view(
        self, request: ModelRequest, conversation: Conversation, *, rebuilt: bool
    ) -> ModelRequest:
        """The request as sent: ``transform_context`` applied to the transcript.

        ``rebuilt``: the transcript changed (compaction) since ``request`` was made.
        """
        transform = self._agent._transform_context
        if transform is None:
            if not rebuilt:
                return request
            return msgspec.structs.replace(request, messages=conversation.snapshot())
        returned = await call_hook("transform_context", transform, conversation.snapshot())
        try:
            messages = tuple(returned)
            validate_transcript(messages)
        except (TypeError, TranscriptError) as exc:
            raise StepFailure(
                HOOK_ERROR, f"hook transform_context returned an invalid transcript: {exc}", exc
            ) from None
        return msgspec.structs.replace(request, messages=messages)

    async def prepare_request(
        self, request: ModelRequest, conversation: Conversation
    ) -> ModelRequest:
        agent = self._agent
        request = await self._view(request, conversation, rebuilt=False)
        window = agent._context_window
        if window is None:
            return request
        budget = window - agent._reserve_output_tokens
        needed = self._count(request)
        if needed <= budget:
            return request
        if agent._compact is None:
            raise StepFailure(
                CONTEXT_OVERFLOW,
                f"{request.id} needs about {needed} tokens; the window "
                f"leaves {budget} after reserving {agent._reserve_output_tokens} for output",
            )
        compacted = await call_hook("compact", agent._compact, conversation.snapshot())
        try:
            if type(compacted) not in (list, tuple):
                raise TypeError(f"a list or tuple of messages, not {type(compacted).__name__}")
            conversation.replace(compacted)
        except (TypeError, TranscriptError) as exc:
            raise StepFailure(
                HOOK_ERROR, f"hook compact returned an unusable transcript: {exc}", exc
            ) from None
        messages = conversation.snapshot()
        await self._emit.announce(
            [
                lambda sequence: ContextCompacted(
                    sequence=sequence, request_id=request.id, messages=messages
                )
            ]
        )
        request = await self._view(request, conversation, rebuilt=True)
        needed = self._count(request)
        if needed > budget:
            raise StepFailure(
                CONTEXT_OVERFLOW,
                f"{request.id} needs about {needed} tokens after compaction; the window "
                f"leaves {budget}",
            )
        return request

    def _count(self, request: ModelRequest) -> int:
        try:
            count = self._agent._count_tokens(request)
        except Exception as exc:
            raise StepFailure(HOOK_ERROR, f"count_tokens raised {_describe(exc)}", exc) from exc
        if type(count) is not int:
            raise StepFailure(HOOK_ERROR, f"count_tokens must return an int, got {count!r:.100}")
        return count

    def retry_delay(self, error: Exception, attempt: int) -> float | None:
        return self._agent._retry.delay(error, attempt, self._agent._jitter())

    # -- tools
    async def before_tool_call(self, call: ToolCall) -> str | None:
        hook = self._agent._before_tool_call
        if hook is None:
            return None
        decision = await call_hook("before_tool_call", hook, call)
        if decision is None:
            return None
        if type(decision) is not ToolBlocked:
            raise StepFailure(
                HOOK_ERROR,
                f"hook before_tool_call must return None or block(reason), got {decision!r:.200}",
            )
        return decision.reason

    async def after_tool_call(self, call: ToolCall, result: ToolResultMessage) -> ToolResultMessage:
        agent = self._agent
        if agent._after_tool_call is not None:
            result = await call_hook("after_tool_call", agent._after_tool_call, call, result)
            if type(result) is not ToolResultMessage:
                return result  # the engine names the hook in its error
        self._track_failures(call, result)
        return result

    def finalize_result(self, result: ToolResultMessage) -> ToolResultMessage:
        limit = self._agent._max_tool_result_chars
        if limit is not None and len(result.content) > limit:
            return msgspec.structs.replace(result, content=truncate_text(result.content, limit))
        return result

    def _track_failures(self, call: ToolCall, result: ToolResultMessage) -> None:
        if not result.is_error:
            self._failing_key, self._failing_count = None, 0
            return
        key = call.name.encode() + b"\0" + msgspec.json.encode(call.arguments, order="sorted")
        if key == self._failing_key:
            self._failing_count += 1
        else:
            self._failing_key, self._failing_count, self._failing_tool = key, 1, call.name

    # -- policies
    async def after_step(self, state: TurnState) -> TurnEnd | None:
        agent = self._agent
        stop = agent._should_stop_turn
        if stop is not None and await call_hook("should_stop_turn", stop, state):
            return TurnBlocked(detail="should_stop_turn returned True")
        if agent._max_turn_tokens is not None and state.total_tokens >= agent._max_turn_tokens:
            return TurnTokenBudget(used=state.total_tokens, limit=agent._max_turn_tokens)
        limit = agent._max_repeated_failures
        if limit is not None and self._failing_count >= limit:
            return TurnRepeatedFailure(tool_name=self._failing_tool, count=self._failing_count)
        return None


def _drain(queue: list[Message], reserved: dict[str, None]) -> tuple[Message, ...]:
    """Take everything queued; the ids are no longer reserved (once in the
    transcript, it refuses them). A tuple: an empty one costs nothing."""
    taken = tuple(queue)
    queue.clear()
    for message in taken:
        reserved.pop(message.id, None)
    return taken


def _ledger_failure(error: BaseException) -> LedgerError | None:
    """The ledger's own failure in ``error`` (bare or in a group), if any."""
    return next((e for e in _leaves(error) if isinstance(e, LedgerError)), None)


def _end_of(outcome: TurnOutcome, state: TurnState, max_steps: int) -> TurnEnd:
    if outcome.kind == "completed":
        return TurnLength() if state.hit_length else TurnCompleted()
    if outcome.kind == "max_steps":
        return TurnMaxSteps(max_steps=max_steps)
    if outcome.kind == "stopped":
        return outcome.stop  # type: ignore[return-value]
    code = outcome.code or ""
    if outcome.error is not None and any(
        isinstance(leaf, ContextOverflowError) for leaf in _leaves(outcome.error)
    ):
        code = CONTEXT_OVERFLOW
    return TurnFailed(code=code, detail=outcome.detail or "")


@final
class TurnRun(EventRun[SessionEvent, TurnResult]):
    """One turn of an ``Agent``: enter it once and iterate its events, or ``await wait()``.

    Events: ``turn.started``, the turn's input as ``message.accepted``, the
    core's step events, ``attempt.failed`` for retried attempts,
    ``context.compacted``, and last ``turn.finished``. Sequences continue
    the session's one counter.
    """

    _task_name = "trio_agent.turn"

    def __init__(
        self, agent: Agent, prompt: UserMessage | None, scope: trio.CancelScope | None
    ) -> None:
        super().__init__(scope)
        self._agent = agent
        self._prompt = prompt

    def _emitter(self, send: trio.MemorySendChannel[SessionEvent] | None) -> Emitter:
        emit = Emitter(send, start=self._agent._next_sequence, journal=self._agent._ledger)
        emit.host = self._agent._host
        return emit

    async def _drive(self, emit: Emitter) -> None:
        # One frame for the whole turn: a suspended turn's coroutine frames are
        # most of what it costs in memory.
        agent = self._agent
        if agent._active is not None:
            raise RuntimeError("this Agent is already running a turn; use steer() or follow_up()")
        agent._active = self
        try:
            conversation = agent._conversation
            turn = agent._turns = agent._turns + 1
            spec = TurnSpec(
                model=agent._model,
                tools=agent._tools.copy(),
                specs=agent._tools.specs(),
                system=agent._system,
                max_steps=agent._max_steps,
                tool_execution=agent._tool_execution,
                max_parallel_tools=agent._max_parallel_tools,
                tool_grace_period=agent._tool_grace_period,
            )
            state = TurnState()
            # Everything taken for this turn is appended before the first await, so a
            # cancellation cannot lose it; its events are owed if cancellation lands first.
            repairs = tuple(
                tool_result(call, INTERRUPTED_RESULT_TEXT, True)
                for call in conversation.unanswered_calls()
            )
            taken = _drain(agent._steering, agent._reserved)
            if self._prompt is not None:
                agent._reserved.pop(self._prompt.id, None)
                taken = (self._prompt, *taken)
            if not taken:
                taken = _drain(agent._follow_ups, agent._reserved)
            outcome: TurnOutcome | None = None
            if agent._ledger is not None:
                agent._ledger.turn_started(turn, emit.next)
            try:
                with _UNSCOPED if self._scope is None else self._scope:
                    await accept(
                        conversation,
                        repairs + taken,
                        emit,
                        first=[lambda sequence: TurnStarted(sequence=sequence, turn=turn)],
                    )
                    if not taken:
                        outcome = TurnOutcome("completed", stop_reason=None)  # nothing to do
                    else:
                        hooks = _SessionHooks(agent, emit)
                        outcome = await run_turn(conversation, spec, state, emit, hooks)
            except Exception as exc:  # a bug, or a group of them: end visibly, raise it
                broken = _ledger_failure(exc)
                if broken is not None:  # nothing can be recorded now, so nothing is sent
                    if broken is exc:
                        raise
                    raise broken from exc
                failed = TurnFailed(code=INTERNAL_ERROR, detail=_describe(exc))
                await self._end(turn, failed, state, conversation, emit)
                raise
            except (trio.Cancelled, BaseExceptionGroup) as exc:
                if cancelled_from_outside(exc):
                    await self._end(turn, TurnCancelled(), state, conversation, emit)
                raise
            end = TurnCancelled() if outcome is None else _end_of(outcome, state, spec.max_steps)
            await self._end(turn, end, state, conversation, emit)
        finally:
            agent._active = None
            agent._next_sequence = emit.next

    async def _end(
        self,
        turn: int,
        end: TurnEnd,
        state: TurnState,
        conversation: Conversation,
        emit: Emitter,
    ) -> None:
        last = state.last_message
        final_text = "" if last is None else text_from_assistant(last)
        ledger = self._agent._ledger
        if ledger is not None:
            # turn/end is written, and as durable as the policy asks, before
            # turn.finished can be observed.
            # the sequence after turn.finished: where the next turn's events start
            ledger.turn_ended(turn, end, emit.next + emit.owed + 1)
            with trio.CancelScope(shield=True):
                await ledger.barrier("turn")
        result = TurnResult(
            turn=turn,
            end=end,
            steps=state.steps,
            final_text=final_text,
            usage=Usage(input_tokens=state.input_tokens, output_tokens=state.output_tokens),
            messages=conversation.snapshot(),
        )
        await self._finish(
            result, lambda sequence: TurnFinished(sequence=sequence, turn=turn, result=result), emit
        )


@final
class Agent:
    """A conversation with a model across turns.

    ``await agent.prompt(text)`` runs one turn and returns its ``TurnResult``;
    ``agent.turn(text)`` returns the ``TurnRun`` to watch its events. The
    transcript and the request numbering carry over from turn to turn; the
    step budget (``max_steps``) is per turn. ``steer()`` and ``follow_up()``
    queue input from any task, also while a turn runs. One turn runs at a time.

    Hooks (each an optional async callable): ``transform_context(messages)``
    returns the messages to send (the transcript itself is unchanged);
    ``before_tool_call(call)`` returns None or ``block(reason)``;
    ``after_tool_call(call, result)`` returns the result to record;
    ``should_stop_turn(state)`` returning True ends the turn as ``blocked``;
    ``compact(messages)`` returns a shorter transcript when a request would
    not fit ``context_window``. A hook that raises ends the turn as failed
    with ``HOOK_ERROR``, the transcript intact.
    """

    # No per-instance dict: 1.2 KB less per concurrent run (benchmarks W3).
    __slots__ = (
        "_active",
        "_after_tool_call",
        "_before_tool_call",
        "_compact",
        "_context_window",
        "_conversation",
        "_count_tokens",
        "_follow_ups",
        "_host",
        "_host_manager",
        "_ledger",
        "_max_parallel_tools",
        "_max_repeated_failures",
        "_max_steps",
        "_max_tool_result_chars",
        "_max_turn_tokens",
        "_model",
        "_next_sequence",
        "_reserve_output_tokens",
        "_reserved",
        "_retry",
        "_rng",
        "_seed",
        "_session_id",
        "_should_stop_turn",
        "_steering",
        "_system",
        "_tool_execution",
        "_tool_grace_period",
        "_tools",
        "_transform_context",
        "_turns",
        "closed_on_resume",
        "resume_warnings",
    )

    def __init__(
        self,
        *,
        model: Model,
        tools: ToolRegistry | None = None,
        system: str = "",
        messages: Sequence[Message] = (),
        max_steps: int = 32,
        retry: RetryPolicy | None = None,
        max_turn_tokens: int | None = None,
        max_repeated_failures: int | None = 3,
        context_window: int | None = None,
        reserve_output_tokens: int = 4096,
        count_tokens: CountTokens = estimate_tokens,
        max_tool_result_chars: int | None = 32_768,
        transform_context: TransformContext | None = None,
        before_tool_call: BeforeToolCall | None = None,
        after_tool_call: AfterToolCall | None = None,
        should_stop_turn: ShouldStopTurn | None = None,
        compact: Compact | None = None,
        seed: int | None = None,
        request_sequence_start: int = 1,
        sequence_start: int = 0,
        store: SessionStore | None = None,
        session_id: str | None = None,
        fsync: FsyncPolicy = "step",
        tool_execution: Literal["sequential", "parallel"] = "sequential",
        max_parallel_tools: int = 10,
        tool_grace_period: float = 5.0,
    ) -> None:
        check_messages_and_model(messages, model)
        if tools is not None and type(tools) is not ToolRegistry:
            raise TypeError(f"tools must be a ToolRegistry or None, got {type(tools).__name__}")
        check_system(system)
        check_tool_execution(tool_execution, max_parallel_tools, tool_grace_period)
        if type(max_steps) is not int or max_steps < 1:
            raise ValueError(f"max_steps must be an int >= 1, got {max_steps!r}")
        if type(reserve_output_tokens) is not int or reserve_output_tokens < 0:
            raise ValueError(
                f"reserve_output_tokens must be an int >= 0, got {reserve_output_tokens!r}"
            )
        for name, value in (
            ("max_turn_tokens", max_turn_tokens),
            ("max_repeated_failures", max_repeated_failures),
            ("context_window", context_window),
        ):
            if value is not None and (type(value) is not int or value < 1):
                raise ValueError(f"{name} must be None or an int >= 1, got {value!r}")
        if max_tool_result_chars is not None and (
            type(max_tool_result_chars) is not int or max_tool_result_chars < 200
        ):
            raise ValueError(
                "max_tool_result_chars must be None or an int >= 200 (room for the cut marker), "
                f"got {max_tool_result_chars!r}"
            )
        if type(request_sequence_start) is not int or request_sequence_start < 1:
            raise ValueError(
                f"request_sequence_start must be an int >= 1, got {request_sequence_start!r}"
            )
        if type(sequence_start) is not int or sequence_start < 0:
            raise ValueError(f"sequence_start must be an int >= 0, got {sequence_start!r}")
        if retry is not None and type(retry) is not RetryPolicy:
            raise TypeError(f"retry must be a RetryPolicy or None, got {retry!r}")
        if not callable(count_tokens):
            raise TypeError(f"count_tokens must be callable, got {count_tokens!r}")
        hooks = {
            "transform_context": transform_context,
            "before_tool_call": before_tool_call,
            "after_tool_call": after_tool_call,
            "should_stop_turn": should_stop_turn,
            "compact": compact,
        }
        for name, value in hooks.items():
            _optional_hook(name, value)
        # raises TranscriptError
        self._conversation = Conversation.from_messages(messages, request_sequence_start - 1)
        self._model = model
        self._tools = ToolRegistry() if tools is None else tools
        self._tool_execution = tool_execution
        self._max_parallel_tools = max_parallel_tools
        self._tool_grace_period = float(tool_grace_period)
        self._system = system
        self._max_steps = max_steps
        self._retry = _DEFAULT_RETRY if retry is None else retry
        self._seed = seed
        self._rng: random.Random | None = None  # made on the first retry: 2.5 KB each
        self._max_turn_tokens = max_turn_tokens
        self._max_repeated_failures = max_repeated_failures
        self._context_window = context_window
        self._reserve_output_tokens = reserve_output_tokens
        self._count_tokens = count_tokens
        self._max_tool_result_chars = max_tool_result_chars
        self._transform_context = transform_context
        self._before_tool_call = before_tool_call
        self._after_tool_call = after_tool_call
        self._should_stop_turn = should_stop_turn
        self._compact = compact
        # lists, not deques: only appended, drained whole and cleared; an empty deque is 600 B
        self._steering: list[Message] = []
        self._follow_ups: list[Message] = []
        # ids of queued input and pending prompts (a dict: an empty set is 216 B)
        self._reserved: dict[str, None] = {}
        self._ledger: Ledger | None = None
        self._session_id = session_id
        self.resume_warnings: tuple[str, ...] = ()
        self.closed_on_resume: tuple[tuple[ToolResultMessage, str], ...] = ()
        if store is not None:
            for method in ("create", "reopen", "load"):
                if not callable(getattr(store, method, None)):
                    raise TypeError(f"store must be a SessionStore, got {store!r}")
            check_fsync(fsync)
            if session_id is None:
                session_id = _new_id("session")
            self._session_id = session_id
            # The store locks the session for this writer (SessionLockedError if it has
            # one); its first records are stored before the Agent exists.
            ledger = Ledger(store.create(session_id), 0, fsync)
            ledger.session_started(
                session_id, time.time(), system, request_sequence_start, sequence_start
            )
            for message in self._conversation.messages:
                ledger.message(message)
            ledger.commit()
            self._attach(ledger)
        elif session_id is not None or fsync != "step":
            raise ValueError("session_id and fsync need a store")
        self._turns = 0
        self._next_sequence = sequence_start
        self._active: TurnRun | None = None
        self._host: trio.Nursery | None = None
        self._host_manager: Any = None

    def _jitter(self) -> random.Random:
        """The retry-jitter generator, seeded with ``seed``; made on first use because a
        Mersenne Twister state is 2.5 KB and most runs never retry."""
        if self._rng is None:
            self._rng = random.Random(self._seed)
        return self._rng

    def _attach(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._conversation.journal = ledger

    @classmethod
    async def resume(
        cls,
        store: SessionStore,
        session_id: str,
        *,
        model: Model,
        fsync: FsyncPolicy = "step",
        **options: Any,
    ) -> Agent:
        """Rebuild a recorded session, from its ledger, to go on with it.

        The transcript, the turn and request counters and the event numbering
        are derived from the records. The resumed agent becomes the session's
        one writer: ``SessionLockedError`` (naming the holder) if another
        writer has it; if one appended and closed after this load, the
        session is loaded again. Calls left without a result are answered
        with explicit error results, written to the ledger as such:
        ``TOOL_NOT_STARTED`` (never dispatched), ``TOOL_CANCELLED`` /
        ``TOOL_FATAL`` (recorded as cancelled or failed), or
        ``TOOL_OUTCOME_UNKNOWN`` (dispatched by a process that died before
        its end was recorded). An open turn is closed as ``interrupted``.
        Nothing is run again. ``resume_warnings`` says when the last writer
        did not close the session (it crashed or was killed) and reports a
        torn last line, which is ignored; a damaged ledger raises
        ``LedgerCorruptError``. Other options are those of ``Agent()``
        (``system`` defaults to the recorded one). Cancellation: nothing is
        held afterwards (the writer is closed).
        """
        check_fsync(fsync)  # before anything is opened
        for attempt in range(1, 4):
            loaded = await store.load(session_id)
            derived = derive(loaded.records)
            agent = cls(
                model=model,
                messages=derived.closed_messages(),
                request_sequence_start=derived.requests + 1,
                sequence_start=derived.sequence,
                **{"system": derived.system, **options},
            )
            try:
                await agent._take_over(store.reopen(loaded), derived, fsync)
            except SessionChangedError:
                if attempt == 3:
                    raise
                continue  # another writer appended and let go meanwhile: load again
            agent._session_id = session_id
            agent.resume_warnings = (*loaded.warnings, *_resume_warnings(derived))
            return agent
        raise AssertionError("unreachable")  # pragma: no cover

    async def _take_over(
        self, writer: SessionWriter, derived: DerivedSession, fsync: FsyncPolicy
    ) -> None:
        """Become the writer of a resumed session: close what it left open."""
        ledger = Ledger(writer, derived.next_seq, fsync, reserved=derived.reserved)
        done = False
        try:
            closing = derived.closing_results()
            for result, code in closing:
                ledger.message(result, code)
            if derived.open_turn is not None:
                ledger.turn_ended(derived.open_turn, TurnInterrupted(), derived.sequence)
            await ledger.barrier("turn")
            done = True
        finally:
            if not done:
                with trio.CancelScope(shield=True):
                    try:
                        await ledger.aclose()
                    except LedgerError:
                        pass  # the first failure is the one that propagates
        self._attach(ledger)
        self._turns = derived.turns
        self.closed_on_resume = tuple(closing)

    async def __aenter__(self) -> Agent:
        """Optional: a nursery for the agent's lifetime, where a tool call that ignores
        cancellation goes on after its turn ended (``tool_grace_period``), so no turn
        waits for it. Leaving the block waits for such calls, then closes the ledger."""
        if self._host_manager is not None:
            raise RuntimeError("an Agent can be entered only once")
        self._host_manager = trio.open_nursery()
        self._host = await self._host_manager.__aenter__()
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        try:
            return await exit_nursery(self._host_manager, exc)
        finally:
            self._host = None
            if self._active is None:
                await self.aclose()

    async def aclose(self) -> None:
        """Record ``session/closed``, flush and close the session's ledger (if it has
        one), letting the session's lock go. Cancellation: shielded, so what was
        recorded is made durable."""
        if self._active is not None:
            raise RuntimeError("cannot close the ledger while a turn runs; cancel it first")
        ledger, self._ledger = self._ledger, None
        self._conversation.journal = None
        if ledger is not None:
            with trio.CancelScope(shield=True):
                try:
                    ledger.session_closed(self._next_sequence)  # a clean close, not a crash
                finally:
                    await ledger.aclose()

    # -- state
    @property
    def session_id(self) -> str | None:
        """The ledger's session id, or None for a session kept in memory only."""
        return self._session_id

    @property
    def messages(self) -> tuple[Message, ...]:
        """The session transcript: complete messages only."""
        return self._conversation.snapshot()

    @property
    def turns(self) -> int:
        """Turns started so far."""
        return self._turns

    @property
    def requests(self) -> int:
        """Model requests opened so far; the next is ``request-{requests + 1:03d}``."""
        return self._conversation.requests

    @property
    def running(self) -> bool:
        return self._active is not None

    @property
    def queued_steering(self) -> tuple[Message, ...]:
        return tuple(self._steering)

    @property
    def queued_follow_ups(self) -> tuple[Message, ...]:
        return tuple(self._follow_ups)

    def clear_queued(self) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
        """Remove and return the queued (steering, follow-up) messages."""
        return (
            _drain(self._steering, self._reserved),
            _drain(self._follow_ups, self._reserved),
        )

    # -- input
    def _checked(self, message: str | UserMessage) -> UserMessage:
        """Check an input message and reserve its id, so nothing can clash with it later."""
        user = _as_user_message(message)
        self._conversation.check_new(user)
        if user.id.startswith(RESERVED_PREFIXES):
            raise TranscriptError(
                "RESERVED_ID",
                f"message id {user.id!r} uses a prefix the loop keeps for its own messages "
                f"({', '.join(RESERVED_PREFIXES)})",
            )
        if user.id in self._reserved:
            raise TranscriptError("DUPLICATE_MESSAGE_ID", f"message id {user.id!r} is queued")
        self._reserved[user.id] = None
        return user

    def steer(self, message: str | UserMessage) -> None:
        """Queue guidance for the current turn, delivered before its next model request.

        The running tool batch still finishes first. With no turn running it
        waits for the next one. Raises ``TypeError``/``TranscriptError`` for
        a bad message at once.
        """
        self._steering.append(self._checked(message))

    def follow_up(self, message: str | UserMessage) -> None:
        """Queue input delivered when the current turn would otherwise end; it continues it."""
        self._follow_ups.append(self._checked(message))

    # -- turns
    def turn(self, message: str | UserMessage | None = None) -> TurnRun:
        """A turn on ``message`` (if any) plus the queued input; nothing runs until entered.

        With no message and nothing queued the turn ends with zero steps and
        the model is not called.
        """
        return self._new_turn(message, trio.CancelScope())

    def _new_turn(
        self, message: str | UserMessage | None, scope: trio.CancelScope | None
    ) -> TurnRun:
        if self._active is not None:
            raise RuntimeError("this Agent is already running a turn; use steer() or follow_up()")
        return TurnRun(self, None if message is None else self._checked(message), scope)

    async def prompt(self, message: str | UserMessage | None = None) -> TurnResult:
        """Run one turn and return its result.

        Cancellation ends the turn as ``cancelled`` (the transcript keeps only
        complete messages; queued input stays queued) and propagates.
        """
        # No one holds this turn, so nothing but the caller's own scopes can cancel
        # it: it needs no cancel scope (and trio's 500 B per entered scope) of its own.
        run = self._new_turn(message, None)
        await run._inline()  # as run.wait(), with one frame less per suspended turn
        assert run._result is not None  # _drive always finishes with a result
        return run._result


def _resume_warnings(derived: DerivedSession) -> tuple[str, ...]:
    """What a resume should tell about how the last writer left the session."""
    if derived.closed:
        return ()
    if derived.open_turn is None:
        where = "between turns"
    else:
        where = (
            f"during turn {derived.open_turn}; its events are numbered below "
            f"{derived.sequence}, where this writer's begin"
        )
    return (
        f"{derived.session_id}: the last writer did not close the session: it crashed or "
        f"was killed {where}",
    )
