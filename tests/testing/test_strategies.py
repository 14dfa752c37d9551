"""The hypothesis strategies of ``trio_agent.testing.strategies`` (issue 7): any
scripted run keeps the invariants, with or without a cancel; arguments at a limit
pass and just outside it are protocol errors; ``scripted_runs(tools=...)`` gives
scripts whose calls carry arguments valid for each tool."""

from __future__ import annotations

import datetime
import uuid
from typing import Annotated, Any, Literal, Optional

import msgspec
import pytest
import trio
import trio.lowlevel
from helpers import add, user
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from trio_agent import (
    Agent,
    ToolCall,
    ToolRegistry,
    UserMessage,
    check_arguments,
    run_agent_loop,
    tool,
)
from trio_agent.testing import (
    ScriptedModel,
    assert_run_invariants,
    explore_cancellation,
    scripted_response,
)
from trio_agent.testing.strategies import (
    arguments_at_limits,
    arguments_outside_limits,
    scripted_runs,
)


@tool
async def echo(text: str) -> str:
    """Echo."""
    return text


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(scripted_runs(["echo", "add"]), st.none() | st.integers(0, 60))
def test_any_scripted_run_keeps_the_invariants_with_or_without_a_cancel(script, cancel_at):
    async def main():
        def scenario():
            return run_agent_loop(
                messages=[user()],
                model=ScriptedModel(script),
                tools=ToolRegistry([echo, add]),
                max_steps=4,
            )

        # only=k: cancel after checkpoint k (a k past the end cancels nothing)
        report = await explore_cancellation(
            scenario, assert_run_invariants, only=10**9 if cancel_at is None else cancel_at
        )
        if cancel_at is None:
            assert report.outcomes[0] in ("completed", "max_steps")

    trio.run(main)


@settings(max_examples=30, deadline=None)
@given(arguments_outside_limits())
def test_arguments_just_outside_a_limit_are_protocol_errors(arguments):
    from trio_agent import ToolCall

    async def main():
        script = [scripted_response("r1", [ToolCall("c1", "echo", arguments)])]
        result = await run_agent_loop(
            messages=[user()], model=ScriptedModel(script), tools=ToolRegistry([echo]), max_steps=1
        ).wait()
        assert result.code == "MODEL_PROTOCOL_ERROR"

    trio.run(main)


@settings(max_examples=20, deadline=None)
@given(arguments_at_limits())
def test_arguments_at_a_limit_are_accepted(arguments):
    assert check_arguments(arguments) == arguments


@settings(max_examples=30, deadline=None)
@given(scripted_runs(["echo", "add"]), st.none() | st.integers(0, 80))
def test_any_scripted_agent_turn_keeps_the_invariants(script, cancel_at):
    async def main():
        def scenario():
            agent = Agent(model=ScriptedModel(script), tools=ToolRegistry([echo, add]), max_steps=4)
            agent.steer(UserMessage("s1", "also this"))
            return agent.turn(UserMessage("u1", "go"))

        await explore_cancellation(
            scenario, assert_run_invariants, only=10**9 if cancel_at is None else cancel_at
        )

    trio.run(main)


BODIES: list[str] = []


class Item(msgspec.Struct):
    sku: Annotated[str, msgspec.Meta(min_length=1, max_length=4)]
    quantity: Annotated[int, msgspec.Meta(ge=1, le=9)] = 1


@tool
async def order(items: list[Item], when: datetime.datetime, rush: bool = False) -> str:
    """Order items (a plain datetime: its schema alone says nothing of the format)."""
    assert all(isinstance(item, Item) for item in items) and isinstance(when, datetime.datetime)
    BODIES.append("order")
    return f"{len(items)} items"


@tool
async def weigh(
    grams: Annotated[float, msgspec.Meta(multiple_of=0.1, ge=0, le=1)],
    unit: Literal["g", "kg"] = "g",
    ref: Optional[uuid.UUID] = None,  # noqa: UP045 (as users write it)
) -> str:
    """Weigh something."""
    assert 0 <= grams <= 1
    BODIES.append("weigh")
    return "weighed"


@tool
def tag(labels: dict[str, Annotated[int, msgspec.Meta(ge=0)]], day: datetime.date) -> str:
    """Tag something (a plain def)."""
    assert all(value >= 0 for value in labels.values())
    BODIES.append("tag")
    return "tagged"


TOOLS = ToolRegistry([order, weigh, tag])
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def calls_of(script: list[Any]) -> list[ToolCall]:
    return [block for response in script for block in response.content if type(block) is ToolCall]


@SETTINGS
@given(scripted_runs(tools=TOOLS))
def test_every_call_scripted_for_the_tools_passes_their_validation(script):
    assume(calls_of(script))
    for call in calls_of(script):
        chosen = TOOLS.get(call.name)
        assert chosen is not None
        BODIES.clear()
        trio.run(chosen.execute, call.arguments)  # a ToolArgumentsError fails the test
        assert BODIES == [call.name]


@SETTINGS
@given(scripted_runs(tools=[order, weigh.spec()], max_steps=3))
def test_tools_and_specs_mix_and_max_steps_bounds_the_steps(script):
    assert len(script) <= 3 and script[-1].id == "final"
    assert {call.name for call in calls_of(script)} <= {"order", "weigh"}


@SETTINGS
@given(scripted_runs(tools=TOOLS))
def test_a_run_with_such_a_script_reaches_every_called_tool_body(script):
    calls = calls_of(script)
    assume(calls)

    async def run() -> Any:
        agent = Agent(model=ScriptedModel(script), tools=TOOLS, max_steps=8)
        return await agent.prompt(UserMessage("u1", "go"))

    BODIES.clear()
    result = trio.run(run)
    errors = [m.content for m in result.messages if getattr(m, "is_error", False)]
    assert errors == [] and result.end.reason == "completed"
    assert sorted(BODIES) == sorted(call.name for call in calls)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_the_old_form_with_names_still_gives_calls_to_those_names(data):
    script = data.draw(scripted_runs(["echo", "add"]))
    assert script[-1].id == "final"
    assert {call.name for call in calls_of(script)} <= {"echo", "add"}
    shorter = data.draw(scripted_runs(["echo"], max_steps=2))
    assert len(shorter) <= 2


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((), {}), ((["a"],), {"tools": TOOLS}), (("echo",), {})],
    ids=["neither", "both", "one-str"],
)
def test_scripted_runs_takes_tool_names_or_tools(args, kwargs):
    with pytest.raises(TypeError, match=r"tool_names|tools"):
        scripted_runs(*args, **kwargs)
