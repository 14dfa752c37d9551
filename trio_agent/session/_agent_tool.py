"""``Agent.as_tool``: one agent as a tool of another.

Each call of the tool runs one turn of the inner agent on the call's input and
answers with that turn's output (``TurnResult.output`` for an agent with an
``output_type``, else its final text). The inner turn keeps its own
transcript, tools, step budget and (optionally) ledger; its progress is
reported as ``tool.updated`` events of the outer call.

Two ways to run a call (``fresh``):

- ``fresh=True`` (the default, as the Agents SDK's ``as_tool``): each call runs
  on a new ``Agent`` built with the inner agent's options and a copy of its
  transcript as it is then (usually empty: instructions live in ``system``).
  The inner agent itself is a template: it never runs and never changes.
  Calls are independent, so parallel calls run in parallel. With
  ``store=`` each call records a session of its own there.
- ``fresh=False``: every call is a turn of the inner agent itself, which keeps
  its conversation (and its own ledger session, if it has a store) across
  calls. An agent runs one turn at a time, so calls wait for each other
  (a ``trio.Lock``) instead of failing with "already running a turn".

The inner turn gets the outer call's ``deps`` (``ctx.deps``, the outer turn's),
the same object: the inner agent's tools read what the outer agent's do.

A ledger-recorded inner turn is linked from the outer ``tool/result``: its
content ends with a text block ``[agent session <id>, turn <n>]`` (success
and error alike; ``linked_session`` reads it back), and a fresh call's
session records ``{"agent_tool": {"name": ..., "call_id": ...}}`` in its
metadata, the way back.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Annotated, Any, Final, Protocol, final

import msgspec
import trio

from ..engine._options import check_store
from ..events import (
    AttemptFailed,
    ContextCompacted,
    ModelChunk,
    SessionEvent,
    ToolFinished,
    ToolStarted,
    ToolUpdated,
    TurnAwaitingApproval,
    TurnBlocked,
    TurnCancelled,
    TurnCompleted,
    TurnContentFilter,
    TurnFailed,
    TurnLength,
    TurnMaxSteps,
    TurnRefusal,
    TurnRepeatedFailure,
    TurnResult,
    TurnTokenBudget,
    TurnUsageLimit,
)
from ..limits import OUTPUT_TOOL_NAME, cut_text
from ..messages._ir import (
    AssistantMessage,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ToolCall,
    ToolResultMessage,
)
from ..model import TextDelta, ThinkingDelta
from ..stores._base import SessionStore
from ..tools._codec import json_type
from ..tools._context import PROGRESS_INTERVAL, ToolContext, tool_context
from ..tools._tool import Tool, ToolArgumentsError, ToolError, ToolResult
from ..tools._types import TypeMismatch, json_bytes

if TYPE_CHECKING:
    from ._turn_run import TurnRun


class _Agent(Protocol):
    """What an agent tool runs: an ``Agent``, as far as this module uses one."""

    @property
    def session_id(self) -> str | None: ...

    def turn(
        self,
        message: str | None = None,
        *,
        cancel_scope: trio.CancelScope | None = None,
        deps: Any = None,
    ) -> TurnRun[Any]: ...

    async def aclose(self) -> None: ...


Copy = Callable[[SessionStore | None, dict[str, Any], str], _Agent]
"""Makes a fresh copy of the agent (recording in the store given, if any, with
the metadata given over its own, named as it is or else as the tool)."""

__all__ = ["agent_tool", "linked_session", "settled"]

_TEXT_TAIL: Final = 120
"""Characters of the inner answer's latest text a progress report shows."""
_PARTIAL_TEXT: Final = 1000
"""Characters of a cut or refused inner answer an error result quotes."""
_LINK: Final = re.compile(r"\[agent session ([A-Za-z0-9_.-]{1,128}), turn ([0-9]+)\]\Z")
_INPUT_DESCRIPTION: Final = "The request for the agent, as a self-contained message."


# ------------------------------------------------------------------ input


@final
class _Input:
    """How a call's arguments become the inner agent's prompt: ``str`` travels as
    ``{"input": "..."}``; a Struct, dataclass, TypedDict or pydantic model as
    itself, validated (by msgspec, or pydantic for its types) and given to the
    agent as its JSON."""

    __slots__ = ("codec", "schema", "wrapped")

    def __init__(self, input_type: Any) -> None:
        self.wrapped = input_type is str
        if self.wrapped:
            text = Annotated[str, msgspec.Meta(min_length=1, description=_INPUT_DESCRIPTION)]
            input_type = msgspec.defstruct(
                "input", [("input", text)], kw_only=True, forbid_unknown_fields=True
            )
        try:
            codec = json_type(input_type, wrapped=False)
        except TypeError as exc:
            raise TypeError(f"as_tool: input_type: {exc}") from None
        if codec.schema.get("type") != "object":
            raise TypeError(
                "as_tool: input_type must be str or a type whose JSON Schema is an object "
                f"(a Struct, dataclass, TypedDict or pydantic model), got {input_type!r}"
            )
        self.codec = codec
        self.schema = codec.schema

    def prompt(self, arguments: dict[str, Any]) -> str:
        """The prompt text for ``arguments``, or ``ToolArgumentsError`` with the JSON path."""
        try:
            value = self.codec.convert(arguments)
        except TypeMismatch as exc:
            raise ToolArgumentsError(str(exc)) from None
        if self.wrapped:
            return str(value.input)
        return json_bytes(value).decode()


# --------------------------------------------------------------- progress


@final
class _Progress:
    """The inner turn's events as progress reports of the outer call.

    ``ToolContext.report`` drops a report that comes within ``PROGRESS_INTERVAL``
    of the previous one, so this keeps the newest unsent line (``pending``)
    and sends it once the interval has passed (``due``): a burst of text
    deltas becomes one line, and the last line of a burst is not lost.
    """

    __slots__ = ("_context", "_pending", "_request", "_sent", "_step", "_text")

    def __init__(self, context: ToolContext) -> None:
        self._context = context
        self._pending: str | None = None
        self._sent = -math.inf
        self._step = 0
        self._request: str | None = None
        self._text = ""

    @property
    def due(self) -> float:
        """When the pending line can be sent (``inf``: none is pending)."""
        if self._pending is None:
            return math.inf
        return self._sent + PROGRESS_INTERVAL + 1e-6  # past the context's own limit

    def see(self, event: SessionEvent) -> None:
        line = self._line(event)
        if line is not None:
            self._pending = line
            self.flush()

    def flush(self) -> None:
        """Send the pending line if it is due. Never blocks, never raises."""
        now = trio.current_time()
        if self._pending is not None and now >= self.due:
            self._context.report(self._pending)
            self._sent, self._pending = now, None

    def _line(self, event: SessionEvent) -> str | None:
        if isinstance(event, ModelChunk):
            return self._chunk(event)
        step = f"step {max(self._step, 1)}"
        if isinstance(event, ToolStarted | ToolUpdated | ToolFinished):
            return f"{step}: {_tool_line(event)}"
        if isinstance(event, AttemptFailed):
            self._text = ""  # that attempt's text is void
            again = "retrying" if event.retry_in is not None else "giving up"
            return f"{step}: the model failed ({event.error:.200}), {again}"
        if isinstance(event, ContextCompacted):
            return f"{step}: context compacted"
        return None

    def _chunk(self, event: ModelChunk) -> str | None:
        if event.request_id != self._request:  # a new step (a retried attempt keeps its id)
            self._step += 1
            self._request = event.request_id
            self._text = ""
        chunk = event.chunk
        if type(chunk) is TextDelta:
            self._text = (self._text + chunk.text)[-_TEXT_TAIL:]
            return f"step {self._step}: writing: {' '.join(self._text.split())}"
        if type(chunk) is ThinkingDelta or type(chunk) is RedactedThinkingBlock:
            return f"step {self._step}: thinking"
        return None  # a tool call: tool.started follows


def _tool_line(event: ToolStarted | ToolUpdated | ToolFinished) -> str:
    name = event.call.name
    if isinstance(event, ToolStarted):
        return "giving its answer" if name == OUTPUT_TOOL_NAME else f"calling {name}"
    if isinstance(event, ToolUpdated):
        return f"{name}: {event.message}"
    return f"{name} {'failed' if event.result.is_error else 'done'}"


async def _watch(run: TurnRun[Any], progress: _Progress) -> TurnResult[Any]:
    """Run the turn, reporting its events, and return its result. Cancellation:
    leaving ``async with run`` cancels the turn, which records itself as
    cancelled; then ``Cancelled`` propagates (no result)."""
    async with run:
        while True:
            with trio.move_on_at(progress.due):  # a pending line is sent when due
                try:
                    event = await anext(run)
                except StopAsyncIteration:
                    break
                progress.see(event)
            progress.flush()
    result = run.result
    assert result is not None  # the turn finished: it always has a result
    return result


# ---------------------------------------------------------------- outcome


def _link(session_id: str | None, turn: int) -> str | None:
    return None if session_id is None else f"[agent session {session_id}, turn {turn}]"


def linked_session(result: ToolResultMessage) -> tuple[str, int] | None:
    """The inner session id and turn an agent tool's result links to, or None
    (a result of another tool, or of an inner agent with no ledger)."""
    content = result.content
    if type(content) is str:
        text = content
    else:
        texts = [block.text for block in content if type(block) is TextBlock]
        text = texts[-1] if texts else ""
    found = _LINK.search(text)
    return None if found is None else (found.group(1), int(found.group(2)))


def _quoted(text: str) -> str:
    return f"; its partial answer: {cut_text(text, _PARTIAL_TEXT)}" if text else ""


def _failure(result: TurnResult, max_seconds: float | None) -> str | None:
    """Why the inner turn gave no answer, for the model; None when it did."""
    end = result.end
    if type(end) is TurnCompleted:
        return None
    if type(end) is TurnFailed:
        return f"the agent's turn failed ({end.code}): {end.detail}"
    if type(end) is TurnMaxSteps:
        return f"the agent used all {end.max_steps} of its steps without finishing"
    if type(end) is TurnTokenBudget:
        return f"the agent reached its token budget ({end.used} of {end.limit} tokens)"
    if type(end) is TurnUsageLimit:
        return f"the agent reached its {end.scope}'s {end.name} limit ({end.used} of {end.limit})"
    if type(end) is TurnRepeatedFailure:
        return f"the agent stopped after {end.count} failed calls of {end.tool_name} in a row"
    if type(end) is TurnBlocked:
        return f"the agent's turn was stopped: {end.detail}"
    if type(end) is TurnCancelled:
        if max_seconds is not None:
            return f"the agent did not finish within {max_seconds:g} seconds"
        return "the agent's turn was cancelled"
    if type(end) is TurnLength:
        return "the agent's answer was cut at its model's output limit" + _quoted(result.final_text)
    if type(end) is TurnRefusal:
        return "the agent's model refused to answer" + _quoted(result.final_text)
    if type(end) is TurnContentFilter:
        return "the provider's content filter stopped the agent's answer"
    if type(end) is TurnAwaitingApproval:
        calls = ", ".join(end.call_ids)
        return f"the agent's calls {calls} need a person's approval first; they did not run"
    return f"the agent's turn ended: {end.reason}"


def _answer(result: TurnResult, typed: bool, link: str | None, max_seconds: float | None) -> Any:
    """The tool's return value: the output (typed) or the final text, with the
    link block after it; ``ToolError`` for a turn that gave no answer."""
    failure = _failure(result, max_seconds)
    if failure is not None:
        raise ToolError(failure if link is None else f"{failure} {link}")
    value = result.output if typed else result.final_text
    if link is None:
        return value  # a str as it is; anything else JSON-encoded by the tool machinery
    text = value if type(value) is str else json_bytes(value).decode()
    return ToolResult((TextBlock(text), TextBlock(link)))


# ---------------------------------------------------------------- runners


def settled(messages: Sequence[Message]) -> Sequence[Message]:
    """``messages`` without a step still running at the end (an assistant message
    whose calls are not all answered yet, and the results it has so far): what a
    fresh copy of an agent that is calling its own tool can start from."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if type(message) is AssistantMessage:
            calls = {b.id for b in message.content if type(b) is ToolCall}
            answered = {
                m.tool_call_id for m in messages[index + 1 :] if type(m) is ToolResultMessage
            }
            return messages if calls <= answered else messages[:index]
    return messages


def _scope(max_seconds: float | None) -> trio.CancelScope | None:
    return None if max_seconds is None else trio.CancelScope(relative_deadline=max_seconds)


MAX_NESTING = 8
"""Agent tools inside agent tools, at most: a model that keeps asking a copy of
its own agent would otherwise recurse without end."""
_NESTING: ContextVar[int] = ContextVar("trio_agent_agent_tool_nesting", default=0)


@final
class _Runner:
    """Runs one call's turn: on a fork (``fresh``) or on the agent itself, one
    call at a time."""

    __slots__ = ("_agent", "_copy", "_fresh", "_lock", "_max_seconds", "_name", "_store")

    def __init__(
        self,
        agent: _Agent,
        copy: Copy,
        name: str,
        fresh: bool,
        store: SessionStore | None,
        max_seconds: float | None,
    ) -> None:
        self._agent = agent
        self._copy = copy
        self._name = name
        self._fresh = fresh
        self._store = store
        self._max_seconds = max_seconds
        self._lock = trio.Lock()

    async def run(self, text: str, context: ToolContext) -> tuple[TurnResult, str | None]:
        """The turn's result and its ledger link. Cancellation: the turn ends as
        cancelled (recorded as such) and ``Cancelled`` propagates. Agent tools
        nested deeper than ``MAX_NESTING`` (an agent calling itself, say) give an
        error result instead of a turn."""
        depth = _NESTING.get()
        if depth >= MAX_NESTING:
            raise ToolError(
                f"{self._name}: agent tools are nested {depth} deep, the most there may be "
                "(does an agent call itself?)"
            )
        token = _NESTING.set(depth + 1)
        try:
            return await self._run(text, context)
        finally:
            _NESTING.reset(token)

    async def _run(self, text: str, context: ToolContext) -> tuple[TurnResult, str | None]:
        if self._fresh:
            return await self._run_fresh(text, context)
        agent = self._agent
        if _held_above(self._lock):
            raise ToolError(
                f"{self._name}: this call comes from the agent's own turn, which is "
                "waiting for it: an agent cannot call itself through its tool with fresh=False"
            )
        async with self._lock:  # one turn at a time: later calls wait here
            run = agent.turn(text, cancel_scope=_scope(self._max_seconds), deps=context.deps)
            result = await _watch(run, _Progress(context))
        return result, _link(agent.session_id, result.turn)

    async def _run_fresh(self, text: str, context: ToolContext) -> tuple[TurnResult, str | None]:
        parent = {"agent_tool": {"name": self._name, "call_id": context.call.id}}
        agent = self._copy(self._store, parent, self._name)
        try:
            run = agent.turn(text, cancel_scope=_scope(self._max_seconds), deps=context.deps)
            result = await _watch(run, _Progress(context))
        finally:
            await agent.aclose()  # shielded: a recorded session is closed cleanly
        return result, _link(agent.session_id, result.turn)


def _held_above(lock: trio.Lock) -> bool:
    """Whether ``lock`` is held by this task or one it descends from (a call made
    from inside the turn that holds it would wait for itself forever)."""
    owner = lock.statistics().owner
    task: trio.lowlevel.Task | None = trio.lowlevel.current_task()
    while owner is not None and task is not None:
        if task is owner:
            return True
        nursery = task.parent_nursery
        task = nursery.parent_task if nursery is not None else None
    return False


def _check_options(agent: _Agent, fresh: object, store: object, max_seconds: object) -> None:
    if type(fresh) is not bool:
        raise TypeError(f"as_tool: fresh must be a bool, got {fresh!r}")
    if max_seconds is not None and (
        isinstance(max_seconds, bool)
        or not isinstance(max_seconds, int | float)
        or not 0 < max_seconds < math.inf
    ):
        raise ValueError(f"as_tool: max_seconds must be None or a number > 0, got {max_seconds!r}")
    if store is not None:
        check_store(store, None, "step")
        if not fresh:
            raise ValueError(
                "as_tool: store= records the session of each fresh call; with fresh=False "
                "the calls are turns of this agent, recorded in its own store if it has one"
            )
    if fresh and agent.session_id is not None:
        raise ValueError(
            "as_tool: this agent records a session (store=), but with fresh=True each call "
            "runs on a new agent and this one never runs: pass fresh=False to record the "
            "calls in this agent's session, or build it without a store and give "
            "as_tool(store=...) to record each call in a session of its own"
        )


def agent_tool(
    agent: _Agent,
    copy: Copy,
    typed: bool,
    name: str,
    description: str,
    input_type: Any = str,
    *,
    fresh: bool = True,
    store: SessionStore | None = None,
    max_seconds: float | None = None,
) -> Tool[..., Any]:
    """The ``Tool`` behind ``Agent.as_tool`` (see there): ``copy`` makes the fresh
    agent of a call, ``typed`` says whether the agent answers with an
    ``output_type``. ``TypeError`` / ``ValueError`` at once for options that
    cannot work."""
    _check_options(agent, fresh, store, max_seconds)
    given = _Input(input_type)
    runner = _Runner(agent, copy, name, fresh, store, max_seconds)

    async def execute(arguments: dict[str, Any]) -> Any:
        text = given.prompt(arguments)
        result, link = await runner.run(text, tool_context())
        return _answer(result, typed, link, max_seconds)

    return Tool(
        name=name,
        description=description,
        parameters=given.schema,
        execute=execute,
        progress=True,
    )
