"""Human approval of tool calls (DESIGN 11.5): which calls of a step are held,
the decisions taken on them, and what the next turn does with each.

A held call stays unanswered in the transcript (no request is sent while one
is undecided); ``approve``/``reject`` record a decision, once; the next turn
runs each approved call (at most once: ``tool/call`` is recorded before it is
dispatched) and answers each rejected one with an error result, before any
new input. ``Approvals`` is the agent's state for it, rebuilt from the ledger
on resume.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, TypeVar, final

import attrs
import trio

from ..errors import HOOK_ERROR, StepError
from ..events import ApprovalDecided, ApprovalDecision, ApprovalRequested
from ..limits import OUTPUT_TOOL_NAME, ArgumentsError, check_arguments, is_valid_unicode
from ..messages._ir import AssistantMessage, ToolCall
from ..tools._tool import ToolArgumentsError, ToolRegistry
from ._emit import Emitter, Journal
from ._hooks import StepHooks, TurnSpec, call_hook
from ._transcript import Conversation

__all__ = [
    "ApprovalDecision",
    "ApprovalPolicy",
    "Approvals",
    "decide",
    "hold_for_approval",
    "private_copy",
    "run_passing",
    "rejection",
    "resolve",
]


def private_copy(call: ToolCall) -> ToolCall:
    """``call`` with a copy of its arguments of its own."""
    return ToolCall(call.id, call.name, check_arguments(call.arguments))


_NOTHING: Final[Mapping[str, Any]] = MappingProxyType({})
"""What an ``Approvals`` holds until its first call is held or decided: one empty
map for every session (three empty dicts are 192 bytes a session that never asks)."""

_V = TypeVar("_V")


def _own(mapping: Mapping[str, _V]) -> dict[str, _V]:
    """``mapping`` to change in place: a new dict instead of the shared empty map."""
    return mapping if type(mapping) is dict else dict(mapping)


@final
@attrs.define(eq=False)
class Approvals:
    """The calls held for approval, in the order they were asked for, and the
    decisions on them. A call leaves when the turn that resolves it answers it.
    Read the maps; change them through the methods (an empty one is shared)."""

    held: Mapping[str, ToolCall] = _NOTHING
    decisions: Mapping[str, ApprovalDecision] = _NOTHING
    passing: Mapping[str, ApprovalDecision] = _NOTHING
    """Decided calls being run or answered now (by the turn that resolves them)."""
    reruns: dict[str, ToolCall] | None = None
    """Calls of a resumed session to run again (their first run's outcome is unknown
    and their effect allows it), open in the transcript like held calls; the next
    turn runs them before anything else (``run_again``). Not held: they ran once."""
    rerunning: str | None = None
    """The call ``run_again`` runs again now: counted as a tool call at its first
    dispatch (``UsageLimits``), so not counted again."""

    def hold(self, call: ToolCall) -> None:
        held = self.held = _own(self.held)
        held[call.id] = call

    def record(self, decision: ApprovalDecision) -> None:
        """Keep ``decision`` on its held call."""
        decisions = self.decisions = _own(self.decisions)
        decisions[decision.call_id] = decision

    def pending(self) -> tuple[ToolCall, ...]:
        """The held calls not decided yet, as copies (what a person sees cannot
        change what runs)."""
        decisions = self.decisions
        return tuple(private_copy(c) for key, c in self.held.items() if key not in decisions)

    def decided_calls(self) -> tuple[ToolCall, ...]:
        """The held calls decided and not yet answered, as copies."""
        decisions = self.decisions
        return tuple(private_copy(c) for key, c in self.held.items() if key in decisions)

    def undecided(self) -> tuple[ToolCall, ...]:
        """Held calls with no decision yet."""
        return tuple(call for key, call in self.held.items() if key not in self.decisions)

    def decided(self) -> tuple[tuple[ToolCall, ApprovalDecision], ...]:
        """Held calls with their decision, in call order."""
        return tuple(
            (call, self.decisions[key]) for key, call in self.held.items() if key in self.decisions
        )

    def check_decidable(self, call_id: object) -> ToolCall:
        """The held call ``call_id`` names; ``ValueError`` for an unknown call, one
        that is not held (or no longer: it was answered) or one already decided."""
        if type(call_id) is not str:
            raise TypeError(f"call_id must be a str, got {type(call_id).__name__}")
        call = self.held.get(call_id)
        if call is None:
            raise ValueError(f"no call {call_id!r} is waiting for approval in this session")
        if call_id in self.decisions:
            raise ValueError(f"call {call_id!r} was already decided")
        return call

    def done(self, call_id: str) -> None:
        """The call was answered (run, or rejected): it is held no more."""
        _own(self.held).pop(call_id, None)
        _own(self.decisions).pop(call_id, None)


# --------------------------------------------------------------- the engine's side

ApprovalPolicy = Callable[[ToolCall], Awaitable[bool] | bool]
"""``Agent(approval=...)``: given a call, whether it needs a person's yes (an async
function, or a plain one, called on the trio thread)."""


def _requested(call: ToolCall) -> Callable[[int], ApprovalRequested]:
    return lambda sequence: ApprovalRequested(sequence=sequence, call=call)


def _decided(call: ToolCall, decision: ApprovalDecision) -> Callable[[int], ApprovalDecided]:
    return lambda sequence: ApprovalDecided(
        sequence=sequence,
        call=call,
        approved=decision.approved,
        reason=decision.reason,
        by=decision.by,
    )


async def hold_for_approval(
    approvals: Approvals,
    calls: Sequence[ToolCall],
    spec: TurnSpec,
    policy: ApprovalPolicy | None,
    journal: Journal | None,
    emit: Emitter,
) -> frozenset[str]:
    """Hold the calls that need approval (the tool's ``requires_approval``, or the
    agent's ``approval`` policy): recorded (``approval/requested``) and announced
    (``approval.requested``); the ids of the held ones. A decided call being
    resolved passes. Cancellation: what was recorded stays held (its events are
    owed)."""
    held: list[ToolCall] = []
    for call in calls:
        tool = spec.tools.get(call.name)
        if tool is None or call.name == OUTPUT_TOOL_NAME or call.id in approvals.passing:
            continue  # an unknown tool is an error result; a decided call is resolving
        try:  # on a copy: the rule cannot change what runs
            needs = tool.needs_approval(private_copy(call).arguments)
        except Exception as exc:  # the tool's own rule failed: as a hook that raised
            raise StepError(
                HOOK_ERROR, f"requires_approval of tool {call.name!r} failed: {exc!r:.200}"
            ) from exc
        if not needs and policy is not None:
            needs = await call_hook("approval", policy, private_copy(call))
            if type(needs) is not bool:
                raise StepError(HOOK_ERROR, f"hook approval must return a bool, got {needs!r:.80}")
        if needs:
            held.append(private_copy(call))  # what is recorded is what will run
    if held and spec.output is not None:  # no final answer while calls of its step wait
        spec.output.held = True
    for call in held:  # recorded at once: no await between the holds
        approvals.hold(call)
        if journal is not None:
            journal.approval_requested(call)
    await emit.announce([_requested(call) for call in held])
    return frozenset(call.id for call in held)


def rejection(call_id: str, approvals: Approvals) -> str | None:
    """Why a call being resolved is answered instead of run (its rejection), or None."""
    decision = approvals.passing.get(call_id)
    if decision is None or decision.approved:
        return None
    who = f" by {decision.by}" if decision.by else ""
    return f"rejected{who}: {decision.reason or 'no reason given'}"


async def resolve(
    approvals: Approvals,
    conversation: Conversation,
    spec: TurnSpec,
    hooks: StepHooks,
    emit: Emitter,
    host: trio.Nursery | None,
) -> None:
    """Before a turn's new input: announce each decision (``approval.decided``),
    then, in call order, run each approved call (with the approver's arguments,
    if set) and answer each rejected one (``rejection`` blocks it). A decision is
    used once: its call leaves ``approvals`` just before it is run, so a
    cancellation never runs it twice (one that lands before the dispatch leaves
    the call to be answered as interrupted by the next turn)."""
    for call, decision in approvals.decided():
        # not owed if cancelled: the decision is not used then, and a later turn says it
        await emit(_decided(call, decision)(emit.next))
        approvals.done(call.id)
        edited = decision.approved and decision.arguments is not None
        run = ToolCall(call.id, call.name, decision.arguments) if edited else call  # type: ignore[arg-type]
        batch = AssistantMessage(f"approved-{call.id}", (run,))
        await run_passing(batch, decision, approvals, conversation, spec, hooks, emit, host)


async def run_passing(
    batch: AssistantMessage,
    decision: ApprovalDecision,
    approvals: Approvals,
    conversation: Conversation,
    spec: TurnSpec,
    hooks: StepHooks,
    emit: Emitter,
    host: trio.Nursery | None,
) -> None:
    """Run the one call of ``batch`` as any call, but with ``decision`` as it passes
    the approval gate (``approvals.passing``: never held again; a rejection is its
    error result), for the time it runs."""
    from ._batch import run_tool_batch  # imported with the first tool call

    [call] = batch.content
    assert type(call) is ToolCall
    passing = approvals.passing = _own(approvals.passing)
    passing[call.id] = decision
    try:
        await run_tool_batch(batch, spec, hooks, conversation, emit, host)
    finally:
        del passing[call.id]


async def decide(
    approvals: Approvals,
    journal: Journal | None,
    tools: ToolRegistry,
    busy: bool,
    call_id: object,
    approved: bool,
    reason: object,
    by: object,
    arguments: object,
    seal: object = None,
) -> None:
    """Record a decision on a held call (``Agent.approve`` / ``reject``): checked
    (``ValueError``/``TypeError``; ``RuntimeError`` while a turn runs), written at
    once and kept, then flushed as durably as the session's policy asks, shielded.
    ``seal``: the approver's seal on it (``trio-agent approve``), recorded with it."""
    if busy:
        raise RuntimeError("decide on held calls between turns, not while a turn runs")
    call = approvals.check_decidable(call_id)
    for name, value in (("reason", reason), ("by", by)):
        if type(value) is not str or not is_valid_unicode(value):
            raise TypeError(f"{name} must be a str (valid Unicode), got {value!r:.80}")
    if seal is not None and type(seal) is not str:
        raise TypeError(f"seal must be a str or None, got {seal!r:.80}")
    edited = None
    if arguments is not None:
        try:
            edited = check_arguments(arguments)
            tool = tools.get(call.name)
            if tool is not None:
                tool.check_arguments(edited)  # the tool's own parameters, as it will run
        except (ArgumentsError, ToolArgumentsError) as exc:
            raise ValueError(f"arguments for {call.name!r}: {exc}") from None
    decision = ApprovalDecision(
        call_id=call_id,  # type: ignore[arg-type]  # checked above
        approved=approved,
        reason=reason,  # type: ignore[arg-type]
        by=by,  # type: ignore[arg-type]
        at=time.time(),
        arguments=edited,
        seal=seal,
    )
    if journal is not None:
        journal.approval_decided(decision)  # recorded before it counts
    approvals.record(decision)
    if journal is not None:
        with trio.CancelScope(shield=True):
            await journal.barrier("turn")
