"""``tool_sources=`` (issue 20): tools whose list can change (an MCP server's) are
read before every step, never during a batch; the agent's own tools keep their
names."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from trio_agent import (
    Agent,
    Tool,
    ToolCall,
    ToolRegistry,
    ToolSource,
    UserMessage,
    run_agent_loop,
    tool,
)
from trio_agent.testing import ScriptedModel, assert_run_invariants, scripted_response


class Source:
    """A tool source whose list a test changes between steps."""

    def __init__(self, *tools: Tool[..., Any]) -> None:
        self.current = list(tools)
        self.read = 0

    def tools(self) -> tuple[Tool[..., Any], ...]:
        self.read += 1
        return tuple(self.current)


def named(name: str, answer: str) -> Tool[..., Any]:
    async def run() -> str:
        return answer

    run.__doc__ = f"The {name} tool."
    return tool(name=name)(run)


async def test_each_step_sees_the_sources_list_as_it_is_then():
    source = Source()

    async def first() -> str:
        source.current = [named("second", "2")]  # the list changes during the batch
        return "1"

    first.__doc__ = "The first tool."
    source.current = [tool(first)]
    model = ScriptedModel(
        [
            scripted_response("r1", [ToolCall("c1", "first", {})]),
            scripted_response("r2", [ToolCall("c2", "second", {})]),
            scripted_response("r3", "done"),
        ]
    )
    run = run_agent_loop(
        messages=[UserMessage("u1", "go")],
        model=model,
        tools=ToolRegistry(),
        max_steps=4,
        tool_sources=[source],
    )
    events = []
    async with run:
        async for event in run:
            events.append(event)
    assert_run_invariants(events, run.result)
    offered = [[spec.name for spec in request.tools] for request in model.requests]
    assert offered == [["first"], ["second"], ["second"]]  # the next step, not mid-batch
    contents = [m.content for m in run.result.messages if type(m).__name__ == "ToolResultMessage"]
    assert contents == ["1", "2"]
    # once as the run starts (a source that cannot list raises there), then once a step
    assert source.read == 4


async def test_an_agents_own_tool_keeps_its_name_over_a_sources(caplog):
    @tool
    async def lookup() -> str:
        """Mine."""
        return "mine"

    caplog.set_level(logging.WARNING, "trio_agent.tools")
    source = Source(named("lookup", "theirs"), named("extra", "x"))
    model = ScriptedModel(
        [scripted_response("r1", [ToolCall("c1", "lookup", {})]), scripted_response("r2", "ok")]
    )
    agent = Agent(model=model, tools=[lookup], tool_sources=[source])
    result = await agent.prompt("go")
    assert result.messages[2].content == "mine"
    assert [spec.name for spec in model.requests[0].tools] == ["lookup", "extra"]
    # the clash is said once (not at each of the two steps), naming the fix
    clashes = [r.getMessage() for r in caplog.records if "is not offered" in r.getMessage()]
    assert len(clashes) == 1 and "'lookup'" in clashes[0] and "prefix" in clashes[0]


def test_a_source_is_a_tool_source():
    assert isinstance(Source(), ToolSource)


@pytest.mark.parametrize(
    ("sources", "says"),
    [(Source(), "list or tuple"), ([object()], r"tool_sources\[0\] has no tools\(\)")],
)
def test_bad_tool_sources_are_refused_at_once(sources, says):
    with pytest.raises(TypeError, match=says):
        Agent(model=ScriptedModel([]), tool_sources=sources)
    with pytest.raises(TypeError, match=says):
        run_agent_loop(
            messages=[],
            model=ScriptedModel([]),
            tools=ToolRegistry(),
            max_steps=1,
            tool_sources=sources,
        )


async def test_tool_choice_may_name_a_sources_tool():
    from trio_agent import ModelSettings

    source = Source(named("extra", "x"))
    forced = ModelSettings(tool_choice="extra")
    model = ScriptedModel(
        [scripted_response("r1", [ToolCall("c1", "extra", {})]), scripted_response("r2", "ok")]
    )
    agent = Agent(model=model, tool_sources=[source], settings=forced)
    result = await agent.prompt("go")
    assert result.messages[2].content == "x"
    with pytest.raises(ValueError, match="not one of the tools"):
        Agent(
            model=model, settings=ModelSettings(tool_choice="nowhere"), tool_sources=[source]
        ).turn("x")


async def test_a_source_that_cannot_list_its_tools_stops_the_turn_before_it_starts(tmp_path):
    """Issue 35: a tool source that could not list its tools (an MCP server never
    entered) was read as offering none, and the turn went on without them. Its error
    now comes out of ``prompt()`` / the run at once, before anything is sent or
    recorded."""
    from trio_agent import Agent, JsonlStore

    class NotReady:
        def tools(self):
            raise RuntimeError("the source is not ready")

    model = ScriptedModel([scripted_response("r1", "hi")])
    agent = Agent(model=model, tool_sources=[NotReady()], store=JsonlStore(tmp_path))
    with pytest.raises(RuntimeError, match="the source is not ready"):
        await agent.prompt("hello")
    assert agent.turns == 0 and list(tmp_path.iterdir()) == []
    run = run_agent_loop(
        messages=[UserMessage("u1", "go")],
        model=model,
        tools=ToolRegistry(),
        max_steps=1,
        tool_sources=[NotReady()],
    )
    with pytest.raises(RuntimeError, match="the source is not ready"):
        async with run:
            async for _ in run:
                raise AssertionError("no event comes before the error")
    assert model.requests == []


async def test_an_approved_call_of_a_sources_tool_runs_in_the_next_turn():
    """A call of a source's tool held for approval runs once approved. Bug: the
    turn ran decided calls with its own tools only (the sources' are read per
    step), so the approved call was answered 'Unknown tool'."""
    guarded = Tool(
        name="guarded",
        description="A source's tool a person approves first.",
        parameters={"type": "object", "properties": {}},
        execute=_ran,
        requires_approval=True,
    )
    model = ScriptedModel(
        [
            scripted_response("r1", [ToolCall("c1", "guarded", {})]),
            scripted_response("r2", "done"),
        ]
    )
    agent = Agent(model=model, tool_sources=[Source(guarded)])
    held = await agent.prompt("go")
    assert held.end.reason == "awaiting_approval"
    await agent.approve("c1")
    result = await agent.prompt(None)
    contents = [m.content for m in result.messages if type(m).__name__ == "ToolResultMessage"]
    assert contents == ["ran"]
    assert result.final_text == "done"


async def _ran(arguments: dict[str, Any]) -> str:
    return "ran"
