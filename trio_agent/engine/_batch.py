"""A step's tool batch: its calls, run one after another or as tasks.

``run_tool_batch`` runs the calls of an assistant message. Sequentially (the
default) each call runs in the step's own task, with no nursery: the hot
path. A parallel batch, and a single call of a tool that reports progress,
run as tasks under a ``ToolBatch``: a small state machine over the calls
(which are waiting, running, finished), fed by the call tasks through a
channel of ``Report`` values. Either way a result joins the transcript (and
the ledger) in its call's place the moment it is known, and is announced
by ``tool.finished``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from typing import Any, final

import trio

from ..errors import HOOK_ERROR, TOOL_FATAL, StepError, describe
from ..events import ToolFinished, ToolStarted, ToolUpdated
from ..limits import OUTPUT_TOOL_NAME, check_arguments
from ..messages._ir import (
    AssistantMessage,
    ToolCall,
    ToolResultMessage,
    TranscriptError,
    tool_result,
)
from ..messages._rules import checked_message
from ..tools._context import CURRENT, ToolContext
from ..tools._execute import execute_tool_call
from ..tools._tool import FatalToolError, Tool
from ._emit import Emitter, Journal
from ._hooks import DEFAULT_HOOKS, StepHooks, TurnSpec, call_hook, key_of
from ._transcript import Conversation

__all__ = ["ToolBatch", "run_tool_batch"]


async def run_tool_batch(
    message: AssistantMessage,
    spec: TurnSpec,
    hooks: StepHooks,
    conversation: Conversation,
    emit: Emitter,
    host: trio.Nursery | None,
) -> None:
    """Run the message's calls, sequentially (the default) or in parallel.

    Sequential: one after another, each result appended as it returns.
    Parallel (``spec.tool_execution == "parallel"``): see ``ToolBatch``.
    A result, once appended, is always announced by ``tool.finished``.
    Calls a session holds for approval (``hooks.hold_calls``) are not run: they
    stay open. ``FatalToolError`` fails the turn with no result for that call; so does a
    ``before_tool_call`` hook that raises. If ``after_tool_call`` raises or is
    interrupted, the tool's own result is stored first. Cancellation
    propagates with no result for an interrupted call. ``host`` is where
    calls that ignore cancellation may go on after the batch (the run's or
    the agent's nursery), if any.
    """
    content = message.content
    if len(content) == 1 and type(content[0]) is ToolCall:  # most steps: one call
        calls = [content[0]]
    else:
        calls = [block for block in content if type(block) is ToolCall]
    plain_hooks = hooks is DEFAULT_HOOKS
    if not plain_hooks and hooks.may_hold(calls, spec):  # a person's approval first
        held = await hooks.hold_calls(calls, spec)
        if held:
            calls = [call for call in calls if call.id not in held]
    if spec.tool_execution == "parallel":
        await ToolBatch(calls, spec, hooks, conversation, emit).run(host)
    else:
        for call in calls:
            found = spec.tools.get(call.name)
            if found is not None and found.progress:  # reports need a task of its own
                await ToolBatch([call], spec, hooks, conversation, emit).run(host)
            else:
                await _sequential_call(call, spec, hooks, conversation, emit)
    open_calls = conversation.linker.open_calls
    # calls held for approval stay open until the turn that resolves them
    if open_calls and (plain_hooks or not set(open_calls) <= hooks.still_open()):
        conversation.linker.require_answered()


# ------------------------------------------------------------- one call


async def _gate(call: ToolCall, spec: TurnSpec, hooks: StepHooks, plain: bool) -> str | None:
    """Why ``call`` must not run (its error result says so), or None to run it.

    With hooks, their ``before_tool_call`` decides (a session holds the calls
    needing approval before this, so what reaches here was approved). The
    bare loop has no one to ask: a call whose tool needs a person's approval
    is refused, never run (fail closed). The check is a dict lookup and an
    attribute test per call unless a tool has an approval rule.
    """
    if not plain:
        if not hooks.gates_calls:
            return None
        reason = await call_hook("before_tool_call", hooks.before_tool_call, call)
        if reason is None:
            return None
        if call.name == OUTPUT_TOOL_NAME and spec.output is not None:  # the turn says why
            spec.output.reason = f"before_tool_call blocked the answer's call: {reason}"
        return str(reason)
    tool = spec.tools.get(call.name)
    if tool is None or tool.requires_approval is False:
        return None
    try:  # on a copy: the rule cannot change what would run
        needs = tool.needs_approval(check_arguments(call.arguments))
    except Exception as exc:  # cannot tell: the answer is no
        return f"its approval rule failed ({exc!r:.200}) and this run has no one to ask"
    if not needs:
        return None
    return "it needs a person's approval and this run has no one to ask (use an Agent session)"


def _blocked_result(call: ToolCall, reason: str) -> ToolResultMessage:
    return tool_result(call, f'Tool call "{call.name}" was blocked: {reason}', True)


def _finished(call: ToolCall, result: ToolResultMessage) -> Callable[[int], ToolFinished]:
    return lambda sequence: ToolFinished(sequence=sequence, call=call, result=result)


def _fatal(call: ToolCall, error: FatalToolError, journal: Journal | None) -> StepError:
    """The failure a fatal tool error ends the turn with, recorded as the call's end."""
    if journal is not None:
        journal.tool_failed(call, describe(error))
    return StepError(
        TOOL_FATAL, f'tool "{call.name}" (call {call.id!r}) failed fatally: {error}', error
    )


async def _start(
    call: ToolCall, spec: TurnSpec, conversation: Conversation, emit: Emitter, dispatch: bool
) -> None:
    """Record ``tool/call`` (for a call about to be dispatched, with its tool's
    effect), then emit ``tool.started``. If that emit is cancelled, the call will
    not run: the ledger says so (``tool/skipped``), so a resume does not call it
    'unknown'."""
    journal = conversation.journal if dispatch else None
    if journal is not None:
        tool = spec.tools.get(call.name)
        # recorded before it can be dispatched
        journal.tool_call(call, "once" if tool is None else tool.effect)
    try:
        if journal is not None:
            await journal.barrier("event")  # and stored, whatever the store
        if emit.silent:
            emit.skip()
        else:
            await emit(ToolStarted(sequence=emit.next, call=call))
    except trio.Cancelled:
        if journal is not None:
            journal.tool_skipped(call)
        raise


def _checked_result(call: ToolCall, result: object) -> ToolResultMessage:
    if (
        type(result) is not ToolResultMessage
        or result.id != f"tool-result-{call.id}"
        or result.tool_call_id != call.id
        or result.tool_name != call.name
    ):
        raise StepError(
            HOOK_ERROR,
            f"hook after_tool_call must return the ToolResultMessage of call {call.id!r} "
            f"(same id, tool_call_id and tool_name), got {result!r:.200}",
        )
    try:  # a result in, a result out (a list of blocks as a tuple)
        return checked_message(result, 0)  # type: ignore[return-value]
    except TranscriptError as exc:
        raise StepError(HOOK_ERROR, f"hook after_tool_call returned {exc}") from None


def _kept(call: ToolCall, result: ToolResultMessage, hooks: StepHooks) -> ToolResultMessage:
    """The result to store, once no hook reviews it (or after ``_reviewed``)."""
    hooks.result_kept(call, result)
    return hooks.finalize_result(result)


async def _reviewed(
    call: ToolCall,
    result: ToolResultMessage,
    hooks: StepHooks,
    conversation: Conversation,
    emit: Emitter,
) -> ToolResultMessage:
    """The result to store, from ``after_tool_call`` (for hooks that review results:
    the others keep the tool's own, ``_kept``, with nothing to await). The tool did
    run: if the hook fails or is interrupted, its own result is stored (and its
    event owed) first."""
    final: ToolResultMessage | None = None
    try:
        returned = await call_hook("after_tool_call", hooks.after_tool_call, call, result)
        # the tool's own result, given back: checked as the core's is (not again)
        final = result if returned is result else _checked_result(call, returned)
    finally:
        if final is None:
            kept = hooks.finalize_result(result)
            conversation.append(kept)
            emit.owe([_finished(call, kept)])
    return _kept(call, final, hooks)


async def _sequential_call(
    call: ToolCall, spec: TurnSpec, hooks: StepHooks, conversation: Conversation, emit: Emitter
) -> None:
    plain = hooks is DEFAULT_HOOKS  # the core: no hook calls on the hot path
    # hooks that gate no call: no gate to await (one coroutine less a call)
    reason = None if not plain and not hooks.gates_calls else await _gate(call, spec, hooks, plain)
    silent = emit.silent and conversation.journal is None  # nothing to record or send
    if silent:
        emit.skip()  # ``_start``'s whole work here
    else:
        await _start(call, spec, conversation, emit, dispatch=reason is None)
    if reason is not None:
        result = _blocked_result(call, reason)
    else:  # run it in this task; fatal or cancelled, it has no result (the journal says which)
        # inside another call (a nested run): never report to that call
        token = None if CURRENT.get() is None else CURRENT.set(None)
        try:
            if spec.observer is None:
                result = await execute_tool_call(spec.tools, call)
            else:
                result = await spec.observer.run_tool(call, execute_tool_call, spec.tools)
        except FatalToolError as exc:
            raise _fatal(call, exc, conversation.journal) from exc
        except trio.Cancelled:
            if conversation.journal is not None:
                conversation.journal.tool_cancelled(call)
            raise
        finally:
            if token is not None:
                CURRENT.reset(token)
    if not plain:
        if hooks.reviews_results:
            result = await _reviewed(call, result, hooks, conversation, emit)
        else:
            result = _kept(call, result, hooks)
    conversation.append(result)
    if silent:
        emit.skip()
    else:
        await emit.announce([_finished(call, result)])


# ------------------------------------------------------------ call tasks


class Report(enum.Enum):
    """What a call task tells its batch."""

    UPDATE = "update"  # a progress report is waiting in ``ToolBatch.latest``
    DONE = "done"  # it returned a result (the payload)
    FATAL = "fatal"  # it raised FatalToolError (the payload)
    EXITED = "exited"  # it ended without a result: it was cancelled


@final
class ToolBatch:
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
    end; a call still running then is left to the host nursery (when there
    is one: ``async with run``, or an agent entered with ``async with``), so
    the run ends; leaving that block still waits for it, as trio cannot
    abandon a task.
    """

    __slots__ = (
        "_calls",
        "_conversation",
        "_emit",
        "_exclusive_running",
        "_hooks",
        "_latest",
        "_plain",
        "_receive",
        "_running",
        "_scopes",
        "_send",
        "_spec",
        "_started",
        "_tools",
    )

    def __init__(
        self,
        calls: list[ToolCall],
        spec: TurnSpec,
        hooks: StepHooks,
        conversation: Conversation,
        emit: Emitter,
    ) -> None:
        self._calls = calls
        self._spec = spec
        self._hooks = hooks
        self._conversation = conversation
        self._emit = emit
        self._plain = hooks is DEFAULT_HOOKS
        self._tools: list[Tool | None] = [spec.tools.get(call.name) for call in calls]
        self._send, self._receive = trio.open_memory_channel[tuple[Report, int, Any]](math.inf)
        self._scopes: dict[int, trio.CancelScope] = {}
        self._running: set[int] = set()  # indexes of the calls whose tasks run
        self._exclusive_running = False
        self._started = 0  # calls dispatched (or blocked) so far, in call order
        self._latest: dict[int, tuple[str, float | None]] = {}  # newest unsent report per call

    async def run(self, host: trio.Nursery | None) -> None:
        """Run the batch to its end. Cancellation: every running call is cancelled
        and the batch stops as described above, then ``Cancelled`` propagates."""
        if host is not None:
            await self._run_in(host)
            return
        failure: StepError | None = None
        async with trio.open_nursery() as nursery:
            try:
                await self._run_in(nursery)
            except StepError as exc:  # keep it out of the nursery's exception group
                failure = exc
        if failure is not None:
            raise failure

    async def _run_in(self, host: trio.Nursery) -> None:
        ending = "interrupted"  # by cancellation, until known otherwise
        try:
            await self._coordinate(host)
            ending = "done"
        except StepError:
            ending = "failed"
            raise
        finally:
            if ending != "done":
                await self._stop(cancelled=ending == "interrupted")

    # -- dispatching
    def _admits(self, index: int) -> bool:
        """Whether call ``index`` may start now (pure: reads the pool only)."""
        tool = self._tools[index]
        if tool is not None and tool.exclusive:
            return not self._running
        return not self._exclusive_running and len(self._running) < self._spec.max_parallel_tools

    async def _coordinate(self, host: trio.Nursery) -> None:
        total = len(self._calls)
        while self._started < total or self._running:
            while self._started < total and self._admits(self._started):
                index = self._started
                self._started += 1
                await self._dispatch(host, index)
            if self._running:
                await self._settle(*await self._receive.receive())

    async def _dispatch(self, host: trio.Nursery, index: int) -> None:
        """Start call ``index``, unless ``before_tool_call`` blocks it (then its
        error result is its end)."""
        call = self._calls[index]
        reason = await _gate(call, self._spec, self._hooks, self._plain)
        await _start(call, self._spec, self._conversation, self._emit, dispatch=reason is None)
        if reason is not None:
            await self._finished(index, _blocked_result(call, reason))
            return
        scope = self._scopes[index] = trio.CancelScope()
        host.start_soon(
            self._call_task, index, scope, name=f"trio_agent.tool:{call.name}:{call.id}"
        )
        self._running.add(index)
        tool = self._tools[index]
        self._exclusive_running = self._exclusive_running or bool(tool and tool.exclusive)

    async def _call_task(self, index: int, scope: trio.CancelScope) -> None:
        call = self._calls[index]
        spec = self._spec
        context = ToolContext(
            call,
            lambda message, fraction: self._report(index, message, fraction),
            spec.deps,
            f"{key_of(spec)}/{call.id}",
        )
        token = CURRENT.set(context)
        outcome: tuple[Report, int, Any] = (Report.EXITED, index, None)
        try:
            with scope:
                try:
                    observer = self._spec.observer
                    if observer is None:
                        result = await execute_tool_call(self._spec.tools, call)
                    else:
                        result = await observer.run_tool(call, execute_tool_call, self._spec.tools)
                    outcome = (Report.DONE, index, result)
                except FatalToolError as exc:
                    outcome = (Report.FATAL, index, exc)
        finally:
            context.close()
            CURRENT.reset(token)
            try:
                self._send.send_nowait(outcome)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the batch stopped waiting for this call

    def _report(self, index: int, message: str, fraction: float | None) -> None:
        # Only the newest report of a call waits to be sent: a slow consumer
        # never builds a backlog that delays tool.finished.
        poke = index not in self._latest
        self._latest[index] = (message, fraction)
        if poke:
            try:
                self._send.send_nowait((Report.UPDATE, index, None))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    # -- settling
    async def _settle(self, kind: Report, index: int, payload: Any) -> None:
        """Act on one report of a call task, while the batch runs."""
        if kind is Report.UPDATE:
            update = self._latest.pop(index, None)
            if update is not None and index in self._running:  # dropped once it finished
                message, fraction = update
                emit = self._emit
                call = self._calls[index]
                await emit(
                    ToolUpdated(sequence=emit.next, call=call, message=message, fraction=fraction)
                )
            return
        self._running.discard(index)
        tool = self._tools[index]
        if tool is not None and tool.exclusive:
            self._exclusive_running = False
        if kind is Report.FATAL:
            raise _fatal(self._calls[index], payload, self._conversation.journal)
        if kind is Report.DONE:
            await self._finished(index, await self._after(index, payload))

    async def _finished(self, index: int, result: ToolResultMessage) -> None:
        self._conversation.append(result)  # recorded now; placed in call order
        await self._emit.announce([_finished(self._calls[index], result)])

    async def _after(self, index: int, result: ToolResultMessage) -> ToolResultMessage:
        if self._plain:
            return result
        call, hooks = self._calls[index], self._hooks
        if not hooks.reviews_results:
            return _kept(call, result, hooks)
        return await _reviewed(call, result, hooks, self._conversation, self._emit)

    # -- stopping early
    async def _stop(self, cancelled: bool) -> None:
        """Cancel what still runs, wait the grace period, keep what finished. Under
        cancellation no hook can run: each result is kept as its tool returned it.
        Otherwise each goes through ``after_tool_call``; one that fails keeps the
        tool's own result and neither loses the others nor hides why the batch
        stopped."""
        for index in self._running:
            self._scopes[index].cancel()
        kept: list[tuple[int, ToolResultMessage]] = []
        with trio.move_on_after(self._spec.tool_grace_period) as waiting:
            waiting.shield = True
            while self._running:  # what is already waiting first: nothing lost at grace 0
                try:
                    self._take(*self._receive.receive_nowait(), kept)
                except trio.WouldBlock:
                    self._take(*await self._receive.receive(), kept)
        self._receive.close()  # calls still running after the grace period are left behind
        for position, (index, result) in enumerate(kept):
            if cancelled:
                stored = self._hooks.finalize_result(result)
            else:
                try:
                    stored = await self._after(index, result)
                except StepError:  # the hook failed: _reviewed stored the result
                    continue
                except trio.Cancelled:  # no more hooks: the rest are kept as they came
                    self._keep_as_returned(kept[position + 1 :])
                    raise
            self._conversation.append(stored)
            self._emit.owe([_finished(self._calls[index], stored)])

    def _take(
        self, kind: Report, index: int, payload: Any, kept: list[tuple[int, ToolResultMessage]]
    ) -> None:
        """Note how a call ended while the batch stops."""
        if kind is Report.UPDATE:
            return
        self._running.discard(index)
        journal = self._conversation.journal
        if kind is Report.DONE:  # it finished in spite of the stop: it ran
            kept.append((index, payload))
        elif journal is not None:  # it ended without a result
            if kind is Report.FATAL:
                journal.tool_failed(self._calls[index], describe(payload))
            else:
                journal.tool_cancelled(self._calls[index])

    def _keep_as_returned(self, rest: list[tuple[int, ToolResultMessage]]) -> None:
        for index, result in rest:
            stored = self._hooks.finalize_result(result)
            self._conversation.append(stored)
            self._emit.owe([_finished(self._calls[index], stored)])
