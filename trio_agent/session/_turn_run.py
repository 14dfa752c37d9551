"""``TurnRun``: one turn of an ``Agent``, from taking its input to recording
its end (the session's turn as an ``EventRun``)."""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, final

import trio

from .._settings import ModelSettings
from ..engine._approvals import resolve
from ..engine._emit import Emitter
from ..engine._handoff import Handoff
from ..engine._hooks import TurnSpec, TurnState, step_spec
from ..engine._lifecycle import end_turn, leave_turn, start_turn
from ..engine._outcomes import turn_end_of
from ..engine._run import EventRun, cancelled_from_outside
from ..engine._turn import TurnOutcome, accept, run_turn
from ..errors import INTERNAL_ERROR, describe
from ..events import (
    OutputT,
    SessionEvent,
    TurnCancelled,
    TurnEnd,
    TurnFailed,
    TurnFinished,
    TurnResult,
    TurnStarted,
)
from ..messages._ir import Message, ToolResultMessage, UserMessage, text_from_assistant
from ..model import Usage
from ..output._spec import OutputSpec
from ..telemetry._pricing import priced_turn
from ._hooks import SessionHooks, ledger_failure
from ._inbox import owes_reply
from ._limits import UsageLimits, UsageMeter, resolve_prices

if TYPE_CHECKING:
    from ._state import SessionState

__all__ = ["TurnRun"]

_UNSCOPED = nullcontext()  # stands in for the scope of a turn no caller can cancel


def _code_of(end: TurnEnd) -> str | None:
    return end.code if isinstance(end, TurnFailed) else None


@final
class TurnRun(EventRun[SessionEvent, TurnResult[OutputT]]):
    """One turn of an ``Agent``: enter it once and iterate its events, or ``await wait()``.

    Events: ``turn.started``, the turn's input as ``message.accepted``, the
    core's step events, ``attempt.failed`` for retried attempts,
    ``context.compacted``, and last ``turn.finished``. Sequences continue
    the session's one counter. ``TurnRun[T]`` (a turn of an ``Agent[T]``, or
    one given ``output_type=T``): its result is a ``TurnResult[T]``.
    """

    _task_name = "trio_agent.turn"

    def __init__(
        self,
        state: SessionState,
        prompt: UserMessage | None,
        scope: trio.CancelScope | None,
        settings: ModelSettings | None = None,
        output: OutputSpec | None = None,
        deps: Any = None,
        usage_limits: UsageLimits | None = None,
    ) -> None:
        super().__init__(scope)
        self._state = state
        self._prompt = prompt
        self._settings = settings  # the turn's own, over the agent's
        self._output = output
        self._deps = deps  # given to the turn's tools and hooks, never recorded
        self._limits = usage_limits  # the turn's own, instead of the agent's
        self._spec: TurnSpec | None = None  # the turn's, once it has begun
        self._meter: UsageMeter | None = None  # with usage limits: what the turn used

    def __del__(self) -> None:
        # A turn made and dropped without ever being entered or awaited lets its
        # message's id go, as a turn that could not start does (the id is reserved
        # from ``turn()`` on, so nothing queued meanwhile can take it).
        if self._prompt is not None and self._never_started:
            self._state.inbox.release(self._prompt)

    @property
    def owner(self) -> object:
        """What this turn belongs to: its agent's session (an opaque value; turns of
        one agent have the same owner)."""
        return self._state

    def _emitter(self, send: Handoff[SessionEvent] | None) -> Emitter:
        state = self._state
        return Emitter(send, start=state.next_sequence, journal=state.ledger)

    def _on_enter(self) -> None:
        """Take the session as ``async with turn:`` enters, before the turn's task
        starts: another turn made inside the block is then refused with
        ``RuntimeError`` rather than taking the session from under this one (which
        then failed in its task). ``RuntimeError`` here if a turn already runs."""
        self._state.claim(self, self._scope, self._prompt)

    async def _drive(self, emit: Emitter, host: trio.Nursery | None) -> None:
        # One frame for the whole turn: a suspended turn's coroutine frames are
        # most of what it costs in memory.
        session = self._state
        conversation = session.conversation
        policy = session.policy
        try:
            spec = session.spec(self._settings, self._output, self._deps)  # the tools as now
        except Exception:  # a source changed since turn(): the claim and the id let go
            if session.active is self:
                session.end_turn(self, emit.next)
            session.inbox.release(self._prompt)  # inline too: nothing claimed, id admitted
            raise
        turn_state = TurnState()
        outcome: TurnOutcome | None = None
        try:
            limited = self._limits or policy.usage_limits or policy.session_usage_limits
            meter = self._meter = None if limited is None else await self._usage_meter()
            if session.active is not self:  # awaited inline: not claimed on entry
                session.claim(self, self._scope, self._prompt)
            if session.pending is not None:  # the session's first use: create its ledger
                await session.open(self._prompt)
                emit.attach(session.ledger)
            turn, taken, repairs = session.begin_turn(self._prompt, self._scope, emit.next)
            spec = self._spec = start_turn(spec, session.session_id, turn, session.name)
            try:
                with _UNSCOPED if self._scope is None else self._scope:
                    approvals = session.approvals
                    hooks = SessionHooks(
                        policy,
                        session.inbox,
                        emit,
                        turn,
                        approvals,
                        session.ledger,
                        self._deps,
                        meter,
                        session.model,
                    )
                    outcome = await self._open(turn, taken, repairs, spec, hooks, emit, host)
                    reached = None if meter is None else meter.check(turn_state, session.model)
                    if outcome is None and reached is not None:  # not even a first request
                        outcome = TurnOutcome("stopped", stop=reached)
                    if outcome is None:
                        outcome = await run_turn(
                            conversation, spec, turn_state, emit, hooks, session.host or host
                        )
            except Exception as exc:  # a bug, or a group of them: end visibly, raise it
                broken = ledger_failure(exc)
                if broken is not None:  # nothing can be recorded now, so nothing is sent
                    if broken is exc:
                        raise
                    raise broken from exc
                failed = TurnFailed(code=INTERNAL_ERROR, detail=describe(exc))
                await self._end(turn, failed, turn_state, emit)
                raise
            except (trio.Cancelled, BaseExceptionGroup) as exc:
                if cancelled_from_outside(exc):
                    await self._end(turn, TurnCancelled(), turn_state, emit)
                raise
            end = (
                TurnCancelled()
                if outcome is None
                else turn_end_of(outcome, turn_state, policy.max_steps)
            )
            output = None if outcome is None else outcome.output
            await self._end(turn, end, turn_state, emit, output)
        finally:
            leave_turn(spec)
            session.end_turn(self, emit.next)

    async def _usage_meter(self) -> UsageMeter | None:
        """The meter that holds this turn to its usage limits and the session's, if
        it has any (priced when one is a cost limit: ``ValueError`` for a model
        with no known price, before the turn starts, its message's id let go)."""
        session = self._state
        policy = session.policy
        limits = policy.usage_limits if self._limits is None else self._limits
        whole = policy.session_usage_limits
        if limits is None and whole is None:
            return None
        prices = None
        if any(each is not None and each.cost is not None for each in (limits, whole)):
            ready = False
            try:
                prices = await resolve_prices(session.model, policy.prices)
                ready = True
            finally:
                if not ready:
                    session.inbox.release(self._prompt)
        return UsageMeter(limits, whole, session.used, prices)

    async def _open(
        self,
        turn: int,
        taken: tuple[Message, ...],
        repairs: tuple[ToolResultMessage, ...],
        spec: TurnSpec,
        hooks: SessionHooks,
        emit: Emitter,
        host: trio.Nursery | None,
    ) -> TurnOutcome | None:
        """Append the turn's input, after running again the calls a resume left to
        run again (``run_again``; those the approval rule holds, as it would a fresh
        call, wait for their decision) and answering the calls the last step held
        for approval (run if approved, an error result if rejected); the turn's end
        if it cannot go on (undecided calls: the input waits in the inbox; nothing
        to do), else None."""
        state = self._state
        conversation, approvals = state.conversation, state.approvals
        started = [lambda sequence: TurnStarted(sequence=sequence, turn=turn)]
        if approvals.reruns:  # a resumed session's calls to run again, before all else
            await accept(conversation, repairs, emit, first=started)
            started, repairs = [], ()
            from ..engine._reruns import run_again  # with the tool batch: when first used

            ready = step_spec(spec)  # with the tool sources' tools, as they are now
            await hooks.hold_reruns(ready, state.unvetted)  # asked as a fresh call is
            await run_again(approvals, conversation, ready, hooks, emit, state.host or host)
        if not approvals.held:
            await accept(conversation, repairs + taken, emit, first=started)
            if taken or owes_reply(conversation):
                return None
            return TurnOutcome("completed", stop_reason=None)  # nothing to do
        await accept(conversation, repairs, emit, first=started)
        waiting = hooks.awaiting_approval()
        if waiting is not None:  # no request while a held call is undecided
            state.inbox.requeue(taken)
            return TurnOutcome("stopped", stop=waiting)
        ready = step_spec(spec)  # a decided call may be a tool source's
        await resolve(approvals, conversation, ready, hooks, emit, state.host or host)
        await accept(conversation, taken, emit)
        return None

    async def _end(
        self, turn: int, end: TurnEnd, state: TurnState, emit: Emitter, output: Any = None
    ) -> None:
        """Record ``turn/end`` (as durable as the policy asks), then deliver
        ``turn.finished``."""
        session = self._state
        last = state.last_message
        final_text = "" if last is None else text_from_assistant(last)
        ledger = session.ledger
        if ledger is not None:
            # the sequence after turn.finished: where the next turn's events start
            ledger.turn_ended(turn, end, emit.next + emit.owed + 1)
            with trio.CancelScope(shield=True):
                await ledger.barrier("turn")
        meter = self._meter
        if meter is not None and meter.session_limits is not None:
            session.used = meter.session_after(state, session.model)
        usage = await priced_turn(
            Usage(
                input_tokens=state.input_tokens,
                output_tokens=state.output_tokens,
                cache_read_tokens=state.cache_read_tokens,
                cache_write_tokens=state.cache_write_tokens,
            ),
            session.model if state.fallback_usage is None else state.fallback_usage,
            session.policy.prices,
        )
        if self._spec is not None:
            end_turn(
                self._spec, session.session_id, turn, end.reason, state.steps, usage, _code_of(end)
            )
        result = TurnResult(
            turn=turn,
            end=end,
            steps=state.steps,
            final_text=final_text,
            usage=usage,
            messages=session.conversation.snapshot(),
            output=output,
        )
        await self._finish(
            result, lambda sequence: TurnFinished(sequence=sequence, turn=turn, result=result), emit
        )
