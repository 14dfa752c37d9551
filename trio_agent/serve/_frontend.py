"""Frontend tools: tools an AG-UI client offers in a run (``RunAgentInput.tools``)
and runs itself. ``FrontendTools`` is a session's tool source of them: each
is a ``Tool`` whose every call is held (``requires_approval``), so a call
ends the turn, and the run, as an interrupt for the client. The client's
answer, a tool message in the next run, is recorded as the call's approval,
the answer its reason (``by`` ``ANSWERED_BY``): in the ledger, so a server
that restarts finds it (``recall``); the turn then runs the call, and running
it gives that answer back (it never runs anything here). A run's answers are
checked together first (``check_answers``), so a refused run records none.

The tools are kept by name for as long as the session is served here, the
latest offer of a name winning (``MAX_TOOLS`` in all): a held call still
finds its tool when the run answering it offers none.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final, final

import attrs

from ..events import ApprovalDecision
from ..limits import OUTPUT_TOOL_NAME
from ..messages._ir import ToolCall
from ..session._agent import Agent
from ..tools._context import tool_context
from ..tools._tool import Tool, ToolRegistry
from ..tools._types import json_bytes
from ._bodies import ApiError
from ._views import Decision, check_decisions

__all__ = [
    "ANSWERED_BY",
    "Answer",
    "MAX_ANSWER_CHARS",
    "FrontendTools",
    "ToolOffer",
    "check_answers",
    "own_tools",
    "with_frontend",
]

MAX_TOOLS: Final = 128
MAX_TOOLS_BYTES: Final = 1 << 20
"""Bytes of a thread's frontend tools in all (their descriptions and schemas, as
JSON): they are kept across runs and sent with every request of the session."""
MAX_ANSWER_CHARS: Final = 1 << 18
"""The longest answer to a frontend tool's call: it is recorded twice (the
approval's reason, then the call's result) and read by the model."""
NO_ANSWER: Final = "the client gave no answer to this call"
Answer = tuple[str, str]
"""A client's answer to a call: (the call's id, the answer as text)."""
ANSWERED_BY: Final = "ag-ui client"
"""Who approved a frontend tool's call with the client's answer as its reason."""


@final
@attrs.frozen
class ToolOffer:
    """A tool as the client describes it: its name, what it does, its arguments'
    JSON Schema (None: any object)."""

    name: str
    description: str
    parameters: Any


@final
class FrontendTools:
    """A session's frontend tools (a tool source: ``tools()``) and the answers the
    client gave to their calls, by call id, until a call takes its own."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._sizes: dict[str, int] = {}  # each tool's description and schema, in bytes
        self._answers: dict[str, str] = {}

    def tools(self) -> list[Tool]:
        return list(self._tools.values())

    def names(self) -> frozenset[str]:
        return frozenset(self._tools)

    def offer(self, offers: list[ToolOffer], taken: frozenset[str]) -> None:
        """Take the client's tools (``ApiError(400)`` for one that is no tool, or
        whose name one of the agent's own tools has, in ``taken``)."""
        if len(offers) > MAX_TOOLS:
            raise ApiError(400, f"a run offers at most {MAX_TOOLS} tools")
        made, sizes = {}, {}
        for offer in offers:
            if offer.name in taken or offer.name == OUTPUT_TOOL_NAME:
                raise ApiError(400, f"tools: the agent has its own tool {offer.name!r}")
            parameters = offer.parameters
            if parameters is None:
                parameters = {"type": "object", "properties": {}}
            try:
                made[offer.name] = Tool(
                    name=offer.name,
                    description=offer.description,
                    parameters=parameters,
                    execute=self._answer,
                    requires_approval=True,
                    progress=True,  # its call's context names the call
                )
            except (TypeError, ValueError) as exc:
                raise ApiError(400, f"tools: {exc}") from None
            sizes[offer.name] = len(offer.description.encode()) + len(json_bytes(parameters))
        if len(self._tools.keys() | made.keys()) > MAX_TOOLS:  # kept across runs: bounded
            raise ApiError(400, f"a thread is offered at most {MAX_TOOLS} tools in all")
        if sum({**self._sizes, **sizes}.values()) > MAX_TOOLS_BYTES:
            raise ApiError(
                400,
                f"a thread's tools hold at most {MAX_TOOLS_BYTES} bytes of descriptions and "
                "schemas in all",
            )
        self._tools.update(made)
        self._sizes.update(sizes)

    def answered(self, call_id: str) -> str | None:
        """The answer kept for call ``call_id`` (not yet returned), if any."""
        return self._answers.get(call_id)

    def recall(self, decisions: Mapping[str, ApprovalDecision]) -> None:
        """Take back the answers the ledger holds (a session's ``decisions``, by
        call id: those approved by ``ANSWERED_BY``), for calls not yet run: an
        agent made anew (a restarted server) returns them as recorded."""
        for call_id, decision in decisions.items():
            if decision.approved and decision.by == ANSWERED_BY:
                self._answers.setdefault(call_id, decision.reason)

    def check_approvals(self, decisions: Sequence[Decision], waiting: Sequence[ToolCall]) -> None:
        """``ApiError(400)`` for a decision approving a held call of one of these
        tools: the client runs it and answers with a tool message (approved
        bare, the call would return no answer). A rejection is a no, as for any
        held call."""
        tools = {call.id: call.name for call in waiting}
        for call_id, approved, _ in decisions:
            if approved and tools.get(call_id) in self._tools:
                raise ApiError(
                    400, f"call {call_id!r} is the client's to run: answer it with a tool message"
                )

    async def record(
        self, agent: Agent, answers: Sequence[Answer], decisions: Sequence[Decision]
    ) -> bool:
        """Between turns: record the client's answers to held calls of these tools,
        all or none: ``check_answers`` first (and the run's resume entries,
        ``decisions``, recorded after them, checked with them), then each call
        approved, its answer the approval's reason, in the ledger before this
        returns; the next turn returns each answer as its call's result. Whether
        the run goes on from them (``check_answers``)."""
        waiting = agent.pending_approvals
        decided = {call.id for call in agent.decided_approvals}
        fresh, goes_on = check_answers(answers, {c.id: c.name for c in waiting}, decided, self)
        now = {call_id for call_id, _ in fresh}  # decided by the answers
        check_decisions(decisions, {c.id for c in waiting} - now, decided | now)
        self.check_approvals(decisions, waiting)
        for call_id, content in fresh:
            self._answers[call_id] = content
            try:
                await agent.approve(call_id, by=ANSWERED_BY, reason=content)
            except (ValueError, TypeError, RuntimeError) as exc:
                self._answers.pop(call_id, None)
                raise ApiError(409, str(exc)) from None
        return goes_on

    async def _answer(self, arguments: dict[str, Any]) -> str:
        call_id = tool_context().call.id
        return self._answers.pop(call_id, NO_ANSWER)


def check_answers(
    answers: Sequence[Answer],
    waiting: Mapping[str, str],
    decided: Collection[str],
    frontend: FrontendTools | None,
) -> tuple[list[Answer], bool]:
    """A run's answers (call id, text), all checked before any is recorded: the
    answers to record, and whether the run goes on from its answers (one is
    new, or repeats the one recorded). ``waiting``: the held calls not decided,
    each by its tool's name; ``decided``: those decided and not yet run.
    ``ApiError``, for an open call: 400 for one answered twice in the run, an
    answer longer than ``MAX_ANSWER_CHARS``, or an answer to a held call of a
    tool not the client's (a resume entry decides it); 409 for a call decided
    already with another answer, or by a decision. A tool message for a call
    not open here (an earlier result, sent again with the history; another
    thread's) is passed over, whatever it holds: it records nothing."""
    names = frozenset() if frontend is None else frontend.names()
    fresh: list[Answer] = []
    goes_on, seen = False, set()
    for call_id, content in answers:
        if call_id not in waiting and call_id not in decided:
            continue  # the history's (any result the client saw), or not this thread's
        if call_id in seen:
            raise ApiError(400, f"call {call_id!r} is answered twice in this run")
        seen.add(call_id)
        if len(content) > MAX_ANSWER_CHARS:
            raise ApiError(
                400, f"the answer to call {call_id!r} is over {MAX_ANSWER_CHARS} characters"
            )
        if call_id in waiting:
            if waiting[call_id] not in names:
                raise ApiError(
                    400,
                    f"call {call_id!r} waits for approval, not for an answer: "
                    "a resume entry decides it",
                )
            fresh.append((call_id, content))
            goes_on = True
        elif call_id in decided:
            if frontend is None or frontend.answered(call_id) != content:
                raise ApiError(409, f"call {call_id!r} is decided already")
            goes_on = True  # the same answer, sent again: recorded once
    return fresh, goes_on


def own_tools(agent: Agent) -> frozenset[str]:
    """The names of the agent's own tools (those it was given, not its sources')."""
    tools = agent.options.tools
    registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools or ())
    return frozenset(spec.name for spec in registry.specs())


async def with_frontend(agent: Agent, frontend: FrontendTools, store: Any, new: bool) -> Agent:
    """``agent`` made anew with ``frontend`` among its tool sources, from its own
    options (and metadata): a new session as ``Agent(...)``, a recorded one
    resumed. The first agent is closed (it recorded nothing of its own)."""
    options = agent.options
    options = attrs.evolve(options, tool_sources=(*options.tool_sources, frontend))
    session_id, metadata = agent.session_id, dict(agent.metadata)
    await agent.aclose()
    if new:
        return Agent(**options.as_keywords(), metadata=metadata, store=store, session_id=session_id)
    assert session_id is not None
    return await Agent.resume(store, session_id, **options.resume_keywords())
