"""Frontend tools: tools an AG-UI client offers in a run (``RunAgentInput.tools``)
and runs itself. ``FrontendTools`` is a session's tool source of them: each
is a ``Tool`` whose every call is held (``requires_approval``), so a call
ends the turn, and the run, as an interrupt for the client. The client's
answer, a tool message in the next run, is recorded as the call's answer and
the call approved; the turn then runs it, and running it gives that answer
back (it never runs anything here).

The tools are kept by name for as long as the session is served here, the
latest offer of a name winning: a held call still finds its tool when the
run answering it offers none.
"""

from __future__ import annotations

from typing import Any, Final, final

import attrs

from ..session._agent import Agent
from ..tools._context import tool_context
from ..tools._tool import Tool, ToolRegistry
from ._bodies import ApiError

__all__ = ["FrontendTools", "ToolOffer", "own_tools", "with_frontend"]

MAX_TOOLS: Final = 128
NO_ANSWER: Final = "the client gave no answer to this call"


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
        made = {}
        for offer in offers:
            if offer.name in taken:
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
        self._tools.update(made)

    def answer(self, call_id: str, content: str) -> None:
        """The client's answer to call ``call_id``, for the call to return."""
        self._answers[call_id] = content

    def forget(self, call_id: str) -> None:
        self._answers.pop(call_id, None)

    async def _answer(self, arguments: dict[str, Any]) -> str:
        call_id = tool_context().call.id
        return self._answers.pop(call_id, NO_ANSWER)


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
