"""The session's side of a turn: ``SessionHooks``, the engine hooks that read the
session's frozen ``SessionPolicy`` and its ``Inbox`` (never the ``Agent``), and
what a session says when a turn cannot start."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, final

import msgspec

from ..engine._approvals import Approvals, hold_for_approval, rejection
from ..engine._emit import Emitter, Journal
from ..engine._hooks import StepHooks, TurnSpec, TurnState, call_hook
from ..engine._transcript import Conversation
from ..errors import CONTEXT_OVERFLOW, HOOK_ERROR, StepError, describe, leaves
from ..events import (
    ContextCompacted,
    TurnAwaitingApproval,
    TurnBlocked,
    TurnEnd,
    TurnRepeatedFailure,
    TurnTokenBudget,
)
from ..ledger._errors import LedgerError
from ..limits import OUTPUT_TOOL_NAME
from ..messages._ir import (
    Message,
    ToolCall,
    ToolResultMessage,
    TranscriptError,
)
from ..messages._rules import validate_transcript as validate
from ..model import Model, ModelRequest
from ..tools._context import ToolContext
from ._inbox import Inbox
from ._limits import UsageMeter
from ._policy import SessionPolicy, ToolBlocked
from ._retry import truncate_content

__all__ = ["BUSY", "SessionHooks", "closed_message", "ledger_failure"]

BUSY = "this Agent is already running a turn; use steer() or follow_up()"


def closed_message(session_id: str, recorded: bool) -> str:
    """Why a turn of an ``Agent`` whose session ``aclose()`` closed is refused."""
    if recorded:
        return (
            f"this Agent's session {session_id!r} is closed; resume it with "
            f"Agent.resume(store, {session_id!r})"
        )
    return (
        f"this Agent was closed before its session {session_id!r} was created (nothing "
        "was recorded); make a new Agent"
    )


def ledger_failure(error: BaseException) -> LedgerError | None:
    """The ledger's own failure in ``error`` (bare or in a group), if any."""
    return next((e for e in leaves(error) if isinstance(e, LedgerError)), None)


@final
class SessionHooks(StepHooks):
    """The engine hooks of one session turn: they read the session's frozen policy
    and its inbox, and keep the turn's repeated-failure count."""

    __slots__ = (
        "_approvals",
        "_deps",
        "_emit",
        "_failing_count",
        "_failing_key",
        "_failing_tool",
        "_inbox",
        "_journal",
        "_meter",
        "_model",
        "_policy",
        "_rng",
        "_turn",
        "prepares_requests",
        "reviews_results",
    )

    def __init__(
        self,
        policy: SessionPolicy,
        inbox: Inbox,
        emit: Emitter,
        turn: int,
        approvals: Approvals | None = None,
        journal: Journal | None = None,
        deps: Any = None,
        meter: UsageMeter | None = None,
        model: Model | None = None,
    ) -> None:
        self._policy = policy
        self._deps = deps  # the turn's: what the tool-call hooks see as ctx.deps
        self._meter = meter  # the turn's usage limits and the session's, if any
        self._model = model  # the turn's model, for the meter's prices
        self._approvals = Approvals() if approvals is None else approvals
        self._journal = journal
        self._inbox = inbox
        self._emit = emit
        self._turn = turn
        self._rng: random.Random | None = None  # made on the first retry: 2.5 KB each
        self._failing_key: bytes | None = None
        self._failing_count = 0
        self._failing_tool = ""
        # the turn's plan: which hooks a step awaits (each a test, not a coroutine);
        # these two follow from the frozen policy alone, so they are read once a turn
        self.prepares_requests = (
            policy.transform_context is not None or policy.context_window is not None
        )
        self.reviews_results = policy.after_tool_call is not None

    @property
    def gates_calls(self) -> bool:  # type: ignore[override]
        # a person's rejection (``passing``: set while the turn resolves its calls),
        # the before hook, or the usage meter's count of calls
        return (
            self._policy.before_tool_call is not None
            or self._meter is not None
            or bool(self._approvals.passing)
        )

    @property
    def checks_steps(self) -> bool:  # type: ignore[override]
        policy = self._policy
        limit = policy.max_repeated_failures
        return (
            policy.should_stop_turn is not None
            or policy.max_turn_tokens is not None
            or self._meter is not None
            or (limit is not None and self._failing_count >= limit)
        )

    # -- inbox (read here, not through a call more: twice a step)
    def has_input(self, stop_reason: str) -> bool:
        inbox = self._inbox
        return bool(inbox.steering) or (stop_reason != "tool_call" and bool(inbox.follow_ups))

    def take_input(self, stop_reason: str) -> tuple[Message, ...]:
        return self._inbox.take_input(stop_reason)

    # -- requests
    async def _view(
        self, request: ModelRequest, conversation: Conversation, *, rebuilt: bool
    ) -> ModelRequest:
        """The request as sent: ``transform_context`` applied to the transcript.

        ``rebuilt``: the transcript changed (compaction) since ``request`` was made.
        """
        transform = self._policy.transform_context
        if transform is None:
            if not rebuilt:
                return request
            return msgspec.structs.replace(request, messages=conversation.snapshot())
        # a tuple, as the hook's type says: what it costs is the hook's own cost (each
        # request's transcript is checked again after it in any case)
        returned = await call_hook("transform_context", transform, tuple(conversation.messages))
        try:
            messages = tuple(returned)
            validate(messages)
        except (TypeError, TranscriptError) as exc:
            raise StepError(
                HOOK_ERROR, f"hook transform_context returned an invalid transcript: {exc}", exc
            ) from None
        return msgspec.structs.replace(request, messages=messages)

    async def prepare_request(
        self, request: ModelRequest, conversation: Conversation
    ) -> ModelRequest:
        policy = self._policy
        request = await self._view(request, conversation, rebuilt=False)
        window = policy.context_window
        if window is None:
            return request
        budget = window - policy.reserve_output_tokens
        needed = self._count(request)
        if needed <= budget:
            return request
        if policy.compact is None:
            raise StepError(
                CONTEXT_OVERFLOW,
                f"{request.id} needs about {needed} tokens; the window "
                f"leaves {budget} after reserving {policy.reserve_output_tokens} for output",
            )
        compacted = await call_hook("compact", policy.compact, tuple(conversation.messages))
        try:
            if type(compacted) not in (list, tuple):
                raise TypeError(f"a list or tuple of messages, not {type(compacted).__name__}")
            conversation.replace(compacted)
        except (TypeError, TranscriptError) as exc:
            raise StepError(
                HOOK_ERROR, f"hook compact returned an unusable transcript: {exc}", exc
            ) from None
        messages = tuple(conversation.messages)
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
            raise StepError(
                CONTEXT_OVERFLOW,
                f"{request.id} needs about {needed} tokens after compaction; the window "
                f"leaves {budget}",
            )
        return request

    def _count(self, request: ModelRequest) -> int:
        try:
            count = self._policy.count_tokens(request)
        except Exception as exc:
            raise StepError(HOOK_ERROR, f"count_tokens raised {describe(exc)}", exc) from exc
        if type(count) is not int:
            raise StepError(HOOK_ERROR, f"count_tokens must return an int, got {count!r:.100}")
        return count

    def retry_delay(self, error: Exception, attempt: int) -> float | None:
        if self._rng is None:  # seeded per turn with (seed, turn): deterministic, stateless
            seed = self._policy.seed
            self._rng = random.Random(None if seed is None else f"{seed}:{self._turn}")
        return self._policy.retry.delay(error, attempt, self._rng)

    # -- tools
    # -- approvals
    def may_hold(self, calls: Sequence[ToolCall], spec: TurnSpec) -> bool:
        if self._policy.approval is not None:
            return True
        tools = spec.tools
        return tools.has_approval_rules() and any(
            (tool := tools.get(c.name)) is not None and tool.requires_approval is not False
            for c in calls
        )

    async def hold_calls(self, calls: Sequence[ToolCall], spec: TurnSpec) -> frozenset[str]:
        approvals, policy = self._approvals, self._policy.approval
        return await hold_for_approval(approvals, calls, spec, policy, self._journal, self._emit)

    async def hold_reruns(self, spec: TurnSpec, unvetted: frozenset[str]) -> None:
        """Hold the calls to run again that are ``unvetted`` (their first run let
        through by no approval the ledger shows: a ``tool/call`` of a ledger handed
        over or edited says nothing of who allowed it) as a fresh call of the model
        is held, by the tool's ``requires_approval`` and the agent's ``approval``:
        a held one leaves ``reruns`` and waits for its decision. Cancellation: what
        was held has left ``reruns``; the rest is asked about again next turn."""
        approvals = self._approvals
        reruns = approvals.reruns
        calls = [call for key, call in (reruns or {}).items() if key in unvetted]
        if not calls or reruns is None or not self.may_hold(calls, spec):
            return
        try:
            await self.hold_calls(calls, spec)
        finally:  # held: never run again without its decision
            for key in approvals.held:
                reruns.pop(key, None)

    def still_open(self) -> frozenset[str]:
        approvals = self._approvals
        return frozenset(approvals.held).union(approvals.reruns or ())

    def awaiting_approval(self) -> TurnAwaitingApproval | None:
        if not self._approvals.held:
            return None
        undecided = self._approvals.undecided()
        return TurnAwaitingApproval(call_ids=tuple(c.id for c in undecided)) if undecided else None

    async def before_tool_call(self, call: ToolCall) -> str | None:
        rejected = rejection(call.id, self._approvals)
        if rejected is not None:  # a person's no, given between turns
            return rejected
        policy = self._policy
        hook = policy.before_tool_call
        if hook is not None:
            if policy.before_takes_context:
                decision = await call_hook("before_tool_call", hook, call, self._context(call))
            else:
                decision = await call_hook("before_tool_call", hook, call)
            if decision is not None:
                if type(decision) is not ToolBlocked:
                    raise StepError(
                        HOOK_ERROR,
                        "hook before_tool_call must return None or block(reason), "
                        f"got {decision!r:.200}",
                    )
                return decision.reason
        meter = self._meter
        if meter is None or call.name == OUTPUT_TOOL_NAME:  # the output tool is no tool call
            return None
        if call.id == self._approvals.rerunning:  # counted when it was first dispatched
            return None
        # last, with no await before the call is dispatched: what it counts is what runs
        return meter.admit_call()

    async def after_tool_call(self, call: ToolCall, result: ToolResultMessage) -> ToolResultMessage:
        policy = self._policy
        hook = policy.after_tool_call
        if hook is not None:
            if policy.after_takes_context:
                result = await call_hook("after_tool_call", hook, call, result, self._context(call))
            else:
                result = await call_hook("after_tool_call", hook, call, result)
        return result  # the engine checks it, and names the hook in its error

    def result_kept(self, call: ToolCall, result: ToolResultMessage) -> None:
        self._track_failures(call, result)

    def _context(self, call: ToolCall) -> ToolContext[Any]:
        """The ``ToolContext`` a tool-call hook that asks for one gets: the call and
        the turn's ``deps``, as the tool sees them (a hook's reports go nowhere)."""
        return ToolContext(call, None, self._deps)

    def finalize_result(self, result: ToolResultMessage) -> ToolResultMessage:
        limit = self._policy.max_tool_result_chars
        content = result.content
        if limit is None or (type(content) is str and len(content) <= limit):
            return result
        cut = truncate_content(content, limit)
        return result if cut is content else msgspec.structs.replace(result, content=cut)

    def _track_failures(self, call: ToolCall, result: ToolResultMessage) -> None:
        if call.name == OUTPUT_TOOL_NAME:  # its refusals count against output_retries
            return
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
        policy = self._policy
        stop = policy.should_stop_turn
        if stop is not None:
            verdict = await call_hook("should_stop_turn", stop, state)
            if verdict is not None and type(verdict) is not bool:  # "no", a coroutine: not True
                raise StepError(
                    HOOK_ERROR, f"hook should_stop_turn must return a bool, got {verdict!r:.200}"
                )
            if verdict:
                return TurnBlocked(detail="should_stop_turn returned True")
        if policy.max_turn_tokens is not None and state.total_tokens >= policy.max_turn_tokens:
            return TurnTokenBudget(used=state.total_tokens, limit=policy.max_turn_tokens)
        limit = policy.max_repeated_failures
        if limit is not None and self._failing_count >= limit:
            return TurnRepeatedFailure(tool_name=self._failing_tool, count=self._failing_count)
        meter = self._meter
        if meter is not None:  # before the next request
            assert self._model is not None
            return meter.check(state, self._model)
        return None
