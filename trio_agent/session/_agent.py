"""``Agent``: a conversation across turns, a thin shell over its ``SessionState``
(what it and its turns share); its turns are ``TurnRun``s. The package page
says what a session is."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, Literal, final, overload

import attrs
import msgspec
import trio

from .._settings import ModelSettings, check_run_settings, check_settings, merge_settings
from ..engine._approvals import ApprovalPolicy, decide, private_copy
from ..engine._options import (
    check_cancel_scope,
    check_fsync,
    check_session_store,
    claim_cancel_scope,
    model_of,
)
from ..engine._run import exit_nursery, require_trio
from ..events import ApprovalDecision, OutputT, TurnResult
from ..limits import is_valid_unicode
from ..messages._ir import Message, ToolCall, ToolResultMessage, UserMessage
from ..messages._view import Transcript
from ..model import Model
from ..output._spec import OutputValidator, check_output_tool, offered, output_spec
from ..tools._context import DepsT
from ..tools._tool import Tool, ToolRegistry, ToolSource
from ._hooks import closed_message
from ._inbox import owes_reply
from ._limits import UsageLimits, check_limits, check_priced
from ._options import AGENT_OPTIONS, RESUMED_OPTIONS, SESSION_OPTIONS, AgentOptions
from ._policy import (
    AfterToolCall,
    BeforeToolCall,
    Compact,
    CountTokens,
    ShouldStopTurn,
    TransformContext,
)
from ._retry import RetryPolicy, estimate_tokens
from ._state import SessionState
from ._turn_run import TurnRun

__all__ = ["Agent"]

if TYPE_CHECKING:  # for resume: an agent resumed without deps_type is Agent[..., Any]
    from typing_extensions import TypeVar

    from ..ledger._ledger import FsyncPolicy
    from ..stores._base import SessionStore
    from ..telemetry._pricing import Price

    D = TypeVar("D", default=Any)
else:
    from typing import TypeVar

    D = TypeVar("D")
T = TypeVar("T")

NO_DEPS: Any = None
"""The ``deps`` of a turn given none: None (typed ``Any``, so a checker accepts it
as any agent's dependencies)."""


@final
class Agent(Generic[OutputT, DepsT]):
    """A conversation with a model across turns.

    ``await agent.prompt(text)`` runs one turn and returns its ``TurnResult``;
    ``agent.turn(text)`` returns the ``TurnRun`` to watch its events. The
    transcript and the request numbering carry over from turn to turn.
    ``max_steps`` (an int in 1..``MAX_AGENT_STEPS``, as for ``run_agent_loop``)
    is the step budget of each turn: request numbers run on across turns (a
    session can have many), where ``run_agent_loop`` runs one unit whose
    request numbers end at ``request-064``. ``steer()`` and ``follow_up()``
    queue input from any task, also while a turn runs. One turn runs at a time:
    one started while another runs raises ``RuntimeError``, its message's id free.

    ``tools``: a ``ToolRegistry`` (kept: tools registered later reach later
    turns) or any iterable of ``Tool`` (a registry is built: a duplicate name
    raises ``ValueError``, an item that is not a ``Tool`` ``TypeError``).

    With a ``store`` the session is recorded in a ledger. Its id is fixed at
    once (``session_id``; a new one when none is given) but nothing is
    created in ``__init__``: the ledger is created on first use, in a worker
    thread, by ``async with agent`` or the first turn, whichever comes first.
    The store's errors surface there: ``SessionExistsError`` (resume it
    instead), ``SessionLockedError`` (another writer holds it), another
    ``LedgerError``; the agent is left as it was, to try again. An agent
    closed before either creates nothing: it recorded nothing to resume.
    ``metadata``: run configuration recorded with the session (plain JSON,
    str keys, at most 64 KiB; never a secret), read back as ``agent.metadata``,
    or before resuming as ``derive((await store.load(id)).records).metadata``.
    ``prices`` (model name to ``pricing.Price``) sets each ``TurnResult``'s
    ``usage.cost`` (else the ``genai-prices`` package does, when installed);
    ``name`` names the agent in traces (``invoke_agent {name}``).

    ``model``: a ``Model``, or a model name (``"openai:gpt-4o"``,
    ``"ollama:llama3.2"``: ``providers.infer_model``), or a ``FallbackModel``.
    ``usage_limits`` (a ``UsageLimits``) hold each turn (a turn's own
    ``usage_limits=`` replaces them for it); ``session_usage_limits`` hold the
    session's turns together, across resumes too (what was used is read from
    the ledger). A turn that reaches one ends with reason ``usage_limit``
    (``TurnUsageLimit``). A cost limit needs each model's price (``prices``, or
    genai-prices installed): ``ValueError`` here otherwise.

    Hooks (each optional, async or plain): ``transform_context(messages)``
    returns the messages to send (the transcript itself is unchanged);
    ``before_tool_call(call)`` returns None or ``block(reason)``;
    ``after_tool_call(call, result)`` returns the result to record;
    ``should_stop_turn(state)`` returning True ends the turn as ``blocked``
    (False or None goes on; anything else fails it, ``HOOK_ERROR``);
    ``compact(messages)`` returns a shorter transcript when a request would
    not fit ``context_window``. A hook that raises ends the turn as failed
    with ``HOOK_ERROR``, the transcript intact. ``before_tool_call(call, ctx)``
    and ``after_tool_call(call, result, ctx)`` (one argument more, read from
    the signature) also get the call's ``ToolContext``, with the turn's ``deps``.

    Typed: ``Agent(output_type=Report)`` is an ``Agent[Report]``, whose turns'
    results are ``TurnResult[Report]``; ``deps_type=MyDeps`` makes it an
    ``Agent[Report, MyDeps]``, whose ``prompt(..., deps=)`` a type checker holds
    to ``MyDeps`` (for checkers only: the deps are not checked at run time). A
    turn's ``deps`` reach its tools as ``ctx.deps`` (a parameter annotated
    ``ToolContext[MyDeps]``) and its tool-call hooks; they are never recorded.
    ``tools``: an iterable of tools of any signatures (a checker infers
    ``list[object]`` for ``[async_tool, def_tool]``, so any iterable is taken
    and each item is checked at once: ``TypeError`` if it is not a ``Tool``).
    """

    # No per-instance dict: 1.2 KB less per concurrent run (benchmarks W3).
    __slots__ = ("_host_manager", "_state", "closed_on_resume", "resume_warnings")

    @overload
    def __init__(
        self,
        *,
        model: Model | str,
        tools: ToolRegistry | Iterable[object] | None = None,
        settings: ModelSettings | None = None,
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
        metadata: Mapping[str, Any] | None = None,
        output_type: type[OutputT],
        deps_type: type[DepsT] | None = None,
        output_mode: Literal["tool", "native"] = "tool",
        output_retries: int = 2,
        output_validator: OutputValidator | None = None,
        approval: ApprovalPolicy | None = None,
        tool_sources: Sequence[ToolSource] = (),
        prices: Mapping[str, Price] | None = None,
        name: str | None = None,
        usage_limits: UsageLimits | None = None,
        session_usage_limits: UsageLimits | None = None,
    ) -> None: ...
    @overload
    def __init__(
        self,
        *,
        model: Model | str,
        tools: ToolRegistry | Iterable[object] | None = None,
        settings: ModelSettings | None = None,
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
        metadata: Mapping[str, Any] | None = None,
        output_type: Any = None,
        deps_type: type[DepsT] | None = None,
        output_mode: Literal["tool", "native"] = "tool",
        output_retries: int = 2,
        output_validator: OutputValidator | None = None,
        approval: ApprovalPolicy | None = None,
        tool_sources: Sequence[ToolSource] = (),
        prices: Mapping[str, Price] | None = None,
        name: str | None = None,
        usage_limits: UsageLimits | None = None,
        session_usage_limits: UsageLimits | None = None,
    ) -> None: ...
    def __init__(
        self,
        *,
        model: Model | str,
        tools: ToolRegistry | Iterable[object] | None = None,
        settings: ModelSettings | None = None,
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
        metadata: Mapping[str, Any] | None = None,
        output_type: Any = None,
        deps_type: Any = None,
        output_mode: Literal["tool", "native"] = "tool",
        output_retries: int = 2,
        output_validator: OutputValidator | None = None,
        approval: ApprovalPolicy | None = None,
        tool_sources: Sequence[ToolSource] = (),
        prices: Mapping[str, Price] | None = None,
        name: str | None = None,
        usage_limits: UsageLimits | None = None,
        session_usage_limits: UsageLimits | None = None,
    ) -> None:
        given = locals()  # the options by name: AgentOptions is their one declaration
        options = AgentOptions(**{key: given[key] for key in AGENT_OPTIONS})
        self._state = SessionState.new(options, **{key: given[key] for key in SESSION_OPTIONS})
        self.resume_warnings: tuple[str, ...] = ()
        self.closed_on_resume: tuple[tuple[ToolResultMessage, str], ...] = ()
        self._host_manager: Any = None

    @classmethod
    def _of(cls, state: SessionState) -> Agent:
        """An agent over ``state`` (one that ``Agent.resume`` rebuilt)."""
        self = cls.__new__(cls)
        self._state = state
        self.resume_warnings = ()
        self.closed_on_resume = ()
        self._host_manager = None
        return self

    @overload
    @classmethod
    async def resume(
        cls,
        store: SessionStore,
        session_id: str,
        *,
        model: Model | str,
        tools: ToolRegistry | Iterable[object] | None = None,
        settings: ModelSettings | None = None,
        system: str | None = None,
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
        fsync: FsyncPolicy = "step",
        tool_execution: Literal["sequential", "parallel"] = "sequential",
        max_parallel_tools: int = 10,
        tool_grace_period: float = 5.0,
        output_type: type[T],
        deps_type: type[D] | None = None,
        output_mode: Literal["tool", "native"] = "tool",
        output_retries: int = 2,
        output_validator: OutputValidator | None = None,
        approval: ApprovalPolicy | None = None,
        tool_sources: Sequence[ToolSource] = (),
        prices: Mapping[str, Price] | None = None,
        name: str | None = None,
        usage_limits: UsageLimits | None = None,
        session_usage_limits: UsageLimits | None = None,
    ) -> Agent[T, D]: ...
    @overload
    @classmethod
    async def resume(
        cls,
        store: SessionStore,
        session_id: str,
        *,
        model: Model | str,
        tools: ToolRegistry | Iterable[object] | None = None,
        settings: ModelSettings | None = None,
        system: str | None = None,
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
        fsync: FsyncPolicy = "step",
        tool_execution: Literal["sequential", "parallel"] = "sequential",
        max_parallel_tools: int = 10,
        tool_grace_period: float = 5.0,
        output_type: Any = None,
        deps_type: type[D] | None = None,
        output_mode: Literal["tool", "native"] = "tool",
        output_retries: int = 2,
        output_validator: OutputValidator | None = None,
        approval: ApprovalPolicy | None = None,
        tool_sources: Sequence[ToolSource] = (),
        prices: Mapping[str, Price] | None = None,
        name: str | None = None,
        usage_limits: UsageLimits | None = None,
        session_usage_limits: UsageLimits | None = None,
    ) -> Agent[Any, D]: ...
    @classmethod
    async def resume(
        cls,
        store: SessionStore,
        session_id: str,
        *,
        model: Model | str,
        tools: ToolRegistry | Iterable[object] | None = None,
        settings: ModelSettings | None = None,
        system: str | None = None,
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
        fsync: FsyncPolicy = "step",
        tool_execution: Literal["sequential", "parallel"] = "sequential",
        max_parallel_tools: int = 10,
        tool_grace_period: float = 5.0,
        output_type: Any = None,
        deps_type: Any = None,
        output_mode: Literal["tool", "native"] = "tool",
        output_retries: int = 2,
        output_validator: OutputValidator | None = None,
        approval: ApprovalPolicy | None = None,
        tool_sources: Sequence[ToolSource] = (),
        prices: Mapping[str, Price] | None = None,
        name: str | None = None,
        usage_limits: UsageLimits | None = None,
        session_usage_limits: UsageLimits | None = None,
    ) -> Agent[Any, Any]:
        """Rebuild a recorded session, from its ledger, to go on with it.

        The transcript, the turn and request counters, the event numbering and
        ``metadata`` are derived from the records; ``system=None`` (the
        default) keeps the recorded system prompt. The other options are those
        of ``Agent()``, and mean the same. The resumed agent becomes the
        session's one writer: ``SessionLockedError`` (naming the holder) if
        another writer has it; if one appended and closed after this load,
        the session is loaded again. Calls left without a result are answered
        with explicit error results, written to the ledger as such:
        ``TOOL_NOT_STARTED`` (never dispatched), ``TOOL_CANCELLED`` /
        ``TOOL_FATAL`` (recorded as cancelled or failed), or
        ``TOOL_OUTCOME_UNKNOWN`` (dispatched by a process that died before
        its end was recorded, its tool's effect ``"once"``). An open turn is
        closed as ``interrupted``. A call dispatched by a process that died
        whose tool's effect was ``"idempotent"`` or ``"pure"`` is left open
        instead (``rerun_calls``): the next turn runs it again, with the same
        ``idempotency_key``, before anything else. ``awaiting_reply`` says
        whether the model owes an answer, and ``prompt()`` with no message
        continues. ``resume_warnings``
        says when the last writer did not close the session (it crashed or was
        killed) and reports a torn last line, which is ignored; a damaged
        ledger raises ``LedgerCorruptError``, and so does one whose records are
        another session's (copied or renamed: fork it). Cancellation: nothing is
        held afterwards (the writer is closed).
        """
        check_session_store(store)  # before anything is opened
        check_fsync(fsync)
        require_trio()
        given = locals()
        options = AgentOptions(
            model=model_of(model), fsync=fsync, **{key: given[key] for key in RESUMED_OPTIONS}
        )
        from ._resume import log_resume, resume_session  # replay: loaded when first used

        resumed = await resume_session(store, session_id, options, system)
        agent = cls._of(resumed.state)
        agent.closed_on_resume = resumed.closed
        agent.resume_warnings = resumed.warnings
        log_resume(resumed)
        return agent

    @classmethod
    async def fork(
        cls,
        store: SessionStore,
        session_id: str,
        *,
        at_turn: int,
        new_session_id: str | None = None,
        to_store: SessionStore | None = None,
    ) -> str:
        """Start a new session whose history is ``session_id``'s through the end of
        turn ``at_turn`` (0: as created, before its first turn), to take another
        path from there; returns the new session's id (``new_session_id``, or a
        fresh one). Continue it with ``Agent.resume(to_store or store, new_id,
        ...)``.

        The new session has the source's records up to that turn's end: its
        transcript, system prompt, ``metadata``, usage and counters, and its
        calls held for approval as they stood then (decisions taken later are
        not copied). It lives in ``to_store`` (default: ``store``; a JSONL store
        and a PostgreSQL one fork into each other). The source is only read:
        its records stay byte for byte as they were, and it may even be in use.
        Errors: ``LedgerError`` naming the turn when the session has no such
        turn, or the turn has not ended (the writer died in it: resume it first);
        ``SessionExistsError`` when ``new_session_id`` exists; ``ValueError`` for
        a bad id or ``at_turn``; ``TypeError`` for a store that is not a
        ``SessionStore``; ``LedgerCorruptError`` for a damaged source.
        A call the source left to run again after a crash (``rerun_calls``) is
        answered ``TOOL_OUTCOME_UNKNOWN`` in the fork, never run there (its
        idempotency key is the source's). Cancellation: the new session is
        made whole or not at all (its records are stored in one worker-thread
        step, then flushed shielded)."""
        require_trio()
        from ._fork import fork_session  # the ledger's replay, loaded when first used

        return await fork_session(store, session_id, at_turn, new_session_id, to_store)

    async def __aenter__(self) -> Agent:
        """Create the session's ledger if it is not made yet (``SessionExistsError``,
        ``SessionLockedError`` or another ``LedgerError`` here; the agent can be
        entered again after one), then open a nursery for the agent's lifetime,
        where a tool call that ignores cancellation goes on after its turn ended
        (``tool_grace_period``), so no turn waits for it. Leaving the block waits
        for such calls, then closes the ledger. A turn of the agent still running
        then (started in another task) keeps the session open: leaving the
        block raises ``RuntimeError`` saying so (``aclose()`` once it ended).
        Cancellation: the ledger is either made whole (the worker thread is
        waited for) or not at all."""
        state = self._state
        if self._host_manager is not None or state.closed is not None:
            raise RuntimeError(state.closed or "an Agent can be entered only once")
        require_trio()
        await state.open()
        self._host_manager = trio.open_nursery()
        state.host = await self._host_manager.__aenter__()
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            await exit_nursery(self._host_manager, exc)
        finally:
            self._state.host = None
            if self._state.active is None:
                await self.aclose()
        if self._state.active is not None and exc is None:  # not closed: say so
            raise RuntimeError(
                "left `async with agent` while a turn of it, started in another task, "
                "still runs: the session is not closed; await the turn inside the block, "
                "or call aclose() once it has ended"
            )

    async def aclose(self) -> None:
        """Record ``session/closed``, flush and close the session's ledger (if it has
        one), letting the session's lock go. A session never used (no turn, no
        ``async with``) has no ledger: nothing is created. Cancellation: shielded,
        so what was recorded is made durable. With a store, the agent takes no
        turn afterwards (``RuntimeError``: go on with ``Agent.resume(store, id)``);
        one without a store has nothing to close and goes on."""
        state = self._state
        if state.active is not None:
            raise RuntimeError("cannot close the agent while a turn of it runs; cancel it first")
        if state.session_id is not None:  # a session with a store: no turn records in it now
            state.closed = closed_message(state.session_id, state.pending is None)
        ledger = state.detach()
        if ledger is not None:
            with trio.CancelScope(shield=True):
                try:
                    ledger.session_closed(state.next_sequence)  # a clean close, not a crash
                finally:
                    await ledger.aclose()

    # -- approvals
    @property
    def pending_approvals(self) -> tuple[ToolCall, ...]:
        """Calls held for a person's approval (``@tool(requires_approval=True)`` or
        ``Agent(approval=)``) and not decided yet, in call order, with the
        arguments the model gave: each can be approved or rejected once. (A
        decided call leaves this list for ``decided_approvals``.)"""
        return self._state.approvals.pending()

    @property
    def rerun_calls(self) -> tuple[ToolCall, ...]:
        """Calls a resume left open to run again (process died mid-call, effect
        ``"idempotent"``/``"pure"``), in call order, run first by the next turn but one
        the approval rule holds (no approval in the ledger); empty otherwise."""
        reruns = self._state.approvals.reruns or {}
        return tuple(private_copy(call) for call in reruns.values())

    @property
    def decided_approvals(self) -> tuple[ToolCall, ...]:
        """Held calls already approved or rejected (here, or by another process
        before ``Agent.resume``: ``trio-agent approve``), that the next turn runs
        or answers; in call order, with the arguments the model gave."""
        return self._state.approvals.decided_calls()

    async def approve(
        self,
        call_id: str,
        *,
        arguments: dict[str, Any] | None = None,
        by: str = "",
        reason: str = "",
        seal: str | None = None,
    ) -> None:
        """Approve a held call, once: the next turn runs it (with ``arguments`` in
        place of the model's, if given: checked like a model's); ``reason`` is
        kept with the decision (the model does not read it). Recorded in the
        ledger, durably, before this returns, with ``seal`` if given (the
        approver's attestation, kept as is: ``trio-agent approve`` seals its own);
        ``ValueError`` for an unknown call or one already decided; ``RuntimeError``
        while a turn runs, or once ``aclose()`` closed the session (decide after
        ``Agent.resume``: no decision is kept unrecorded). Cancellation: the record
        is made at once and flushed shielded."""
        require_trio()  # before anything is decided
        state = self._state
        state.check_open()
        busy = state.active is not None
        approvals, ledger, tools = state.approvals, state.ledger, state.tools
        await decide(approvals, ledger, tools, busy, call_id, True, reason, by, arguments, seal)

    async def reject(
        self, call_id: str, reason: str = "", *, by: str = "", seal: str | None = None
    ) -> None:
        """Reject a held call, once: the next turn answers it with an error result
        carrying ``reason`` (the model reads it). As ``approve`` otherwise."""
        require_trio()  # before anything is decided
        state = self._state
        state.check_open()
        busy = state.active is not None
        approvals, ledger, tools = state.approvals, state.ledger, state.tools
        await decide(approvals, ledger, tools, busy, call_id, False, reason, by, None, seal)

    @property
    def approval_decisions(self) -> Mapping[str, ApprovalDecision]:
        """The decision on each call of ``decided_approvals``, by call id (as
        recorded: who, when, the arguments it runs with, its ``seal``)."""
        return MappingProxyType(dict(self._state.approvals.decisions))

    def overrule(self, call_id: str, reason: str, *, by: str = "") -> None:
        """Answer an approved call of ``decided_approvals`` as rejected (``reason``)
        instead of running it, for an approval this application cannot trust
        (``trio-agent resume``: one without the user's seal). The ledger keeps its
        one decision: the call's error result (next turn) records this. Between
        turns; ``ValueError`` for a call that is not approved (undecided, or
        rejected: its recorded reason is what the model reads), ``TypeError`` for a
        ``reason`` or ``by`` that is no valid text (as ``reject``)."""
        require_trio()
        state = self._state
        state.check_open()
        if state.active is not None:
            raise RuntimeError("overrule a decision between turns, not while a turn runs")
        decision = state.approvals.decisions.get(call_id) if type(call_id) is str else None
        if decision is None:
            raise ValueError(f"no decided call {call_id!r} waits to run in this session")
        if not decision.approved:
            raise ValueError(f"call {call_id!r} was rejected already: nothing to overrule")
        for name, value in (("reason", reason), ("by", by)):
            if type(value) is not str or not is_valid_unicode(value):
                raise TypeError(f"{name} must be a str (valid Unicode), got {value!r:.80}")
        rejection = ApprovalDecision(
            call_id=call_id, approved=False, reason=reason, by=by, at=time.time()
        )
        state.approvals.record(rejection)

    # -- state
    @property
    def options(self) -> AgentOptions:
        """How this agent runs (its model, tools, hooks, budgets, output, approvals,
        ...) as it was made, checked: an ``AgentOptions``, to make another agent
        alike. ``Agent(**agent.options.as_keywords(), store=..., session_id=...)``
        starts another session with them, ``await Agent.resume(store, session_id,
        **agent.options.resume_keywords())`` goes on with a recorded one, and
        ``fleet.agent_maker(**agent.options.as_keywords())`` does both for a
        fleet (``trio-agent --agent`` takes an ``Agent`` as such a template). The
        session itself (transcript, store, id, metadata) is not part of it."""
        return self._state.options()

    @property
    def name(self) -> str | None:
        """The agent's name in traces (``invoke_agent {name}``), or None."""
        return self._state.name

    @property
    def session_id(self) -> str | None:
        """The ledger's session id (fixed when the agent is made, before its ledger
        is created), or None for a session kept in memory only."""
        return self._state.session_id

    @property
    def metadata(self) -> Mapping[str, Any]:
        """The run configuration recorded with the session (``Agent(metadata=...)``,
        or the ledger's on resume): a read-only copy; empty when none was given."""
        return MappingProxyType(
            msgspec.json.decode(msgspec.json.encode(self._state.metadata or {}))
        )

    @property
    def messages(self) -> Transcript:
        """The session transcript: complete messages only, frozen (a ``Transcript``,
        made in constant time: later messages do not join one taken earlier)."""
        return self._state.conversation.snapshot()

    @property
    def awaiting_reply(self) -> bool:
        """Whether the model owes an answer: the transcript ends on a user message or
        a tool result (or calls a cut turn left open, answered as interrupted next
        turn), as after resuming an interrupted turn. ``prompt()`` then continues."""
        return owes_reply(self._state.conversation)

    @property
    def turns(self) -> int:
        """Turns started so far."""
        return self._state.turns

    @property
    def requests(self) -> int:
        """Model requests opened so far; the next is ``request-{requests + 1:03d}``."""
        return self._state.conversation.requests

    @property
    def running(self) -> bool:
        return self._state.active is not None

    @property
    def queued_steering(self) -> tuple[Message, ...]:
        return tuple(self._state.inbox.steering)

    @property
    def queued_follow_ups(self) -> tuple[Message, ...]:
        return tuple(self._state.inbox.follow_ups)

    def clear_queued(self) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
        """Remove and return the queued (steering, follow-up) messages."""
        return self._state.inbox.clear()

    # -- input
    def steer(self, message: str | UserMessage) -> None:
        """Queue guidance for the current turn, delivered before its next model request.

        The running tool batch still finishes first. With no turn running it
        waits for the next one. Raises ``TypeError``/``TranscriptError`` for
        a bad message at once, ``RuntimeError`` once ``aclose()`` closed the
        session (no turn of it would take the message).
        """
        state = self._state
        state.check_open()
        state.inbox.steer(message, state.conversation)

    def follow_up(self, message: str | UserMessage) -> None:
        """Queue input delivered when the current turn would otherwise end; it continues it.
        Errors as for ``steer()``."""
        state = self._state
        state.check_open()
        state.inbox.follow_up(message, state.conversation)

    # -- turns
    @overload
    def turn(
        self,
        message: str | UserMessage | None = None,
        *,
        cancel_scope: trio.CancelScope | None = None,
        settings: ModelSettings | None = None,
        output_type: type[T],
        output_validator: OutputValidator | None = None,
        deps: DepsT = NO_DEPS,
        usage_limits: UsageLimits | None = None,
    ) -> TurnRun[T]: ...
    @overload
    def turn(
        self,
        message: str | UserMessage | None = None,
        *,
        cancel_scope: trio.CancelScope | None = None,
        settings: ModelSettings | None = None,
        output_type: None = None,
        output_validator: OutputValidator | None = None,
        deps: DepsT = NO_DEPS,
        usage_limits: UsageLimits | None = None,
    ) -> TurnRun[OutputT]: ...
    @overload
    def turn(
        self,
        message: str | UserMessage | None = None,
        *,
        cancel_scope: trio.CancelScope | None = None,
        settings: ModelSettings | None = None,
        output_type: Any,
        output_validator: OutputValidator | None = None,
        deps: DepsT = NO_DEPS,
        usage_limits: UsageLimits | None = None,
    ) -> TurnRun[Any]: ...
    def turn(
        self,
        message: str | UserMessage | None = None,
        *,
        cancel_scope: trio.CancelScope | None = None,
        settings: ModelSettings | None = None,
        output_type: Any = None,
        output_validator: OutputValidator | None = None,
        deps: Any = None,
        usage_limits: UsageLimits | None = None,
    ) -> TurnRun[Any]:
        """A turn on ``message`` (if any) plus the queued input; nothing runs until entered.

        ``message``'s id is the turn's from now on (nothing queued can take it);
        a turn dropped without being entered or awaited lets it go.

        With no message and nothing queued the model is called only when it
        owes an answer (``awaiting_reply``): the turn continues the
        conversation; otherwise it ends with zero steps. ``cancel_scope``: a
        ``trio.CancelScope`` not yet entered (``TypeError``/``ValueError``
        otherwise, as for ``run_agent_loop``), the turn's own from now on: given
        to another turn it raises ``ValueError`` there; entered before the turn
        starts, the turn raises ``ValueError`` then, having recorded nothing and
        let its message's id go. Its deadline or ``run.cancel()`` ends the turn
        as ``cancelled``, a result, not an error. ``settings``: this turn's
        ``ModelSettings``, merged field by field over the agent's own
        (``Agent(settings=)``), checked now (``TypeError``/``ValueError``).
        ``output_type``: this turn's typed answer, instead of the agent's
        (``Agent(output_type=)``, with the agent's mode and retries, and this
        turn's ``output_validator``, if any: the agent's is for its own type);
        ``str`` asks for plain text. ``TurnResult.output`` holds the answer.
        ``output_validator`` alone checks the agent's output type in place of
        the agent's validator (``ValueError`` when there is no output type).
        ``deps``: this turn's dependencies, as they are (not copied, never
        recorded): its tools read them as ``ctx.deps``, its tool-call hooks too,
        and the calls it runs after their approval (given by an earlier turn)
        see this turn's. ``RuntimeError`` at once when a tool source was never
        entered, or an approved call this turn would run names a tool the agent
        was not given.
        ``usage_limits``: this turn's ``UsageLimits``, instead of the agent's
        (``Agent(usage_limits=)``); the session's (``session_usage_limits``) hold
        as well.
        """
        scope = trio.CancelScope() if cancel_scope is None else cancel_scope
        return self._new_turn(
            message,
            cancel_scope,
            scope,
            settings,
            output_type,
            output_validator,
            deps,
            usage_limits,
        )

    def _new_turn(
        self,
        message: str | UserMessage | None,
        given: trio.CancelScope | None,
        scope: trio.CancelScope | None,
        settings: ModelSettings | None,
        output_type: Any = None,
        output_validator: OutputValidator | None = None,
        deps: Any = None,
        usage_limits: UsageLimits | None = None,
    ) -> TurnRun[Any]:
        check_cancel_scope(given)
        state = self._state
        if usage_limits is not None:
            check_limits("usage_limits", usage_limits)
            check_priced(state.model, state.policy.prices, usage_limits)
        if output_type is None and output_validator is not None:  # for the agent's type
            if state.output is None:
                raise ValueError(
                    "output_validator checks a typed answer: this turn has no output_type "
                    "(pass output_type=, or give the agent one)"
                )
            output_type = state.output.type
        output = (  # the agent's validator is for its own type
            state.output
            if output_type is None
            else output_spec(output_type, state.output_mode, state.output_retries, output_validator)
        )
        if output is not None and output.tool is not None:  # now, its message's id free
            check_output_tool(state.tools)
        settings = check_settings(settings)  # the turn's, over the agent's (checked whole now)
        check_run_settings(
            merge_settings(state.policy.settings, settings),
            offered(state.tools, output, state.sources),
        )
        state.check_free()
        state.check_ready()  # the tool sources entered, the approved calls' tools given
        prompt = None if message is None else state.inbox.admit(message, state.conversation)
        claim_cancel_scope(given)  # the turn's own: no other turn may take it now
        return TurnRun(state, prompt, scope, settings, output, deps, usage_limits)

    @overload
    async def prompt(
        self,
        message: str | UserMessage | None = None,
        *,
        cancel_scope: trio.CancelScope | None = None,
        settings: ModelSettings | None = None,
        output_type: type[T],
        output_validator: OutputValidator | None = None,
        deps: DepsT = NO_DEPS,
        usage_limits: UsageLimits | None = None,
    ) -> TurnResult[T]: ...
    @overload
    async def prompt(
        self,
        message: str | UserMessage | None = None,
        *,
        cancel_scope: trio.CancelScope | None = None,
        settings: ModelSettings | None = None,
        output_type: None = None,
        output_validator: OutputValidator | None = None,
        deps: DepsT = NO_DEPS,
        usage_limits: UsageLimits | None = None,
    ) -> TurnResult[OutputT]: ...
    @overload
    async def prompt(
        self,
        message: str | UserMessage | None = None,
        *,
        cancel_scope: trio.CancelScope | None = None,
        settings: ModelSettings | None = None,
        output_type: Any,
        output_validator: OutputValidator | None = None,
        deps: DepsT = NO_DEPS,
        usage_limits: UsageLimits | None = None,
    ) -> TurnResult[Any]: ...
    async def prompt(
        self,
        message: str | UserMessage | None = None,
        *,
        cancel_scope: trio.CancelScope | None = None,
        settings: ModelSettings | None = None,
        output_type: Any = None,
        output_validator: OutputValidator | None = None,
        deps: Any = None,
        usage_limits: UsageLimits | None = None,
    ) -> TurnResult[Any]:
        """Run one turn and return its result (``TurnResult[T]`` for an ``Agent[T]``,
        or with ``output_type=T``).

        A deadline on the turn: pass ``cancel_scope=trio.CancelScope(deadline=...)``
        (or ``relative_deadline=``), not yet entered, a fresh one for each turn
        (as for ``turn()``). When it fires, the turn
        ends as ``cancelled`` and that result is returned: nothing is raised.
        Cancellation from outside (an enclosing ``trio.move_on_after``, a
        cancelled nursery) also ends the turn as ``cancelled`` and records it,
        then propagates as ``trio.Cancelled``, as trio intends, so no result
        is returned. Either way the transcript keeps only complete messages
        and queued input stays queued. ``settings``, ``output_type``,
        ``output_validator``, ``deps`` and ``usage_limits`` as for ``turn()``. Awaited outside
        trio (``asyncio.run``), ``RuntimeError`` at once, saying so.
        """
        require_trio()  # before the message takes an id: nothing is left behind
        # With no scope given, nothing but the caller's own scopes can cancel the turn:
        # it needs no cancel scope (and trio's 500 B per entered scope) of its own.
        run = self._new_turn(
            message,
            cancel_scope,
            cancel_scope,
            settings,
            output_type,
            output_validator,
            deps,
            usage_limits,
        )
        await run.drive_inline()  # as run.wait(), with one frame less per suspended turn
        result = run.result
        assert result is not None  # a turn always finishes with a result
        return result

    def as_tool(
        self,
        name: str,
        description: str,
        input_type: Any = str,
        *,
        fresh: bool = True,
        store: SessionStore | None = None,
        max_seconds: float | None = None,
    ) -> Tool[..., Any]:
        """This agent as a ``Tool`` of another: each call runs one turn of it.

        Parameters: ``{"input": "<text>"}`` for ``input_type=str``; for a Struct,
        dataclass or TypedDict its own schema (validated; the JSON goes in). The
        result is the turn's ``output`` (with an ``output_type``), else its final
        text; a turn that does not complete is an error result saying why; its
        progress is reported as ``tool.updated``. ``fresh=True`` (the default):
        each call runs on a new copy of this agent (model, tools, options,
        transcript), so calls run side by side; ``store=`` records each copy's
        session there. ``fresh=False``: each call is a turn of this agent, calls
        take turns, and a call while it runs a turn of its own is an error result.
        A recorded turn's result ends with ``[agent session <id>, turn <n>]``.
        ``max_seconds``: each call's turn is cancelled past it (an error result).
        Each call's turn gets the calling turn's ``deps`` (the same object).

        Cancellation: cancelling the outer call cancels the turn (recorded as
        cancelled); ``trio.Cancelled`` propagates and the call gets no result.
        """
        from ._agent_tool import agent_tool  # loaded when first used

        typed = self._state.output is not None
        return agent_tool(
            self,
            self._copy,
            typed,
            name,
            description,
            input_type,
            fresh=fresh,
            store=store,
            max_seconds=max_seconds,
        )

    def _copy(self, store: SessionStore | None, metadata: dict[str, Any], name: str) -> Agent:
        """A new agent with this one's model, tools, options and transcript (as it
        is now), recording in ``store`` (if any) under a new session id, with
        ``metadata`` over this one's; named as this one is, else ``name``."""
        from ._agent_tool import settled

        state = self._state
        options = attrs.evolve(state.options(), name=state.name or name)
        if store is None:
            options = attrs.evolve(options, fsync="step")
        return Agent(
            **options.as_keywords(),
            messages=settled(self.messages),
            request_sequence_start=self.requests + 1,
            store=store,
            metadata={**(state.metadata or {}), **metadata},
        )
