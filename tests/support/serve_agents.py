"""The serving tests' agents (``--agent serve_agents:make_agent``): a scripted model
that answers each user message by what it says, and the tools it calls.

- ``"hold NAME"``: a ``hold`` call, which waits for ``release(NAME)`` (in this
  process), then the text ``held NAME``;
- ``"guard"``: a ``guarded`` call, held for a person's approval, then ``guarded``;
  ``"guard call ID"``: the same, the call's id ``ID``;
- ``"think"``: thinking (``pondering``), then the text ``thought``;
- ``"use frontend"``: a call of ``pick_color``, a tool the AG-UI client offers,
  then ``the client said ANSWER``;
- anything else: ``echo: MESSAGE`` streamed in five text chunks.
"""

from __future__ import annotations

import trio

from trio_agent import (
    Agent,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    tool,
)
from trio_agent.fleet import agent_maker
from trio_agent.testing import CallableModel, scripted_response

_gates: dict[str, trio.Event] = {}
holding: dict[str, trio.Event] = {}  # set once the hold call NAME is under way


def gate(name: str) -> trio.Event:
    return _gates.setdefault(name, trio.Event())


def release(name: str) -> None:
    gate(name).set()


def reset() -> None:
    _gates.clear()
    holding.clear()


@tool
async def hold(name: str) -> str:
    """Wait until the test releases NAME."""
    holding.setdefault(name, trio.Event()).set()
    await gate(name).wait()
    return f"released {name}"


@tool(requires_approval=True)
async def guarded(note: str) -> str:
    """A call a person approves first."""
    return f"done {note}"


def answers(request):
    last = request.messages[-1]
    if isinstance(last, ToolResultMessage):
        asked = [m for m in request.messages if isinstance(m, UserMessage)][-1].content
        if asked == "use frontend":
            return scripted_response(f"r-{request.id}", f"the client said {last.content}")
        return scripted_response(f"r-{request.id}", f"after {asked}", text_chunks=3)
    text = last.content if isinstance(last, UserMessage) else ""
    text = text if isinstance(text, str) else "?"
    if text.startswith("hold "):
        name = text.removeprefix("hold ")
        call = ToolCall(f"c-{request.id}", "hold", {"name": name})
        return scripted_response(f"r-{request.id}", [call])
    if text == "guard" or text.startswith("guard call "):
        call_id = text.removeprefix("guard call ") if text != "guard" else f"c-{request.id}"
        call = ToolCall(call_id, "guarded", {"note": "n"})
        return scripted_response(f"r-{request.id}", [call])
    if text == "use frontend":
        call = ToolCall(f"c-{request.id}", "pick_color", {"hint": "warm"})
        return scripted_response(f"r-{request.id}", [call])
    if text == "think":
        blocks = [ThinkingBlock("pondering"), TextBlock("thought")]
        return scripted_response(f"r-{request.id}", blocks)
    return scripted_response(f"r-{request.id}", f"echo: {text}", text_chunks=5)


def make_agent_model() -> CallableModel:
    return CallableModel(answers)


make_agent = agent_maker(model=make_agent_model(), tools=[hold, guarded])

template = Agent(model=make_agent_model(), tools=[hold, guarded])  # --agent serve_agents:template
