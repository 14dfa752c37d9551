"""Regression tests of tools and ``execute_tool_call``, each named after the bug it
pins (found in review of the core loop)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from helpers import call, start

from trio_agent import Cancelled, FatalToolError, Tool, ToolArgumentsError, ToolRegistry, tool
from trio_agent.testing import scripted_response


async def test_fatal_error_raised_on_cancellation_is_cancellation_not_tool_fatal():
    @tool
    async def converts() -> str:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            raise FatalToolError("cleanup failed") from None
        return "never"

    run, _ = start(
        [scripted_response("r1", [call("converts", "c1")])], tools=ToolRegistry([converts])
    )
    async with run:
        async for event in run:
            if event.type == "tool.started":
                run.cancel()
    assert isinstance(run.result, Cancelled)


async def test_fatal_error_inside_a_tool_nursery_fails_the_run_with_its_message():
    @tool
    async def grouped() -> str:
        async def boom() -> None:
            raise FatalToolError("quota exhausted")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(boom)
        return "never"

    run, model = start(
        [scripted_response("r1", [call("grouped", "c1")]), scripted_response("r2", "no")],
        tools=ToolRegistry([grouped]),
    )
    result = await run.wait()
    assert result.code == "TOOL_FATAL" and "quota exhausted" in result.detail
    assert model.call_count == 1


async def test_plain_error_groups_from_a_tool_name_their_leaves():
    @tool
    async def several() -> str:
        raise ExceptionGroup("batch", [ValueError("bad row"), KeyError("id")])

    run, _ = start(
        [scripted_response("r1", [call("several", "c1")]), scripted_response("r2", "ok")],
        tools=ToolRegistry([several]),
    )
    result = await run.wait()
    assert result.messages[2].content == (
        "Tool \"several\" raised ExceptionGroup (ValueError: bad row; KeyError: 'id')"
    )


def test_tool_with_unencodable_parameters_is_refused_at_construction():
    async def execute(arguments: dict[str, Any]) -> str:
        return ""

    with pytest.raises(TypeError, match="JSON-encodable"):
        Tool(name="t", description="", parameters={"x": object()}, execute=execute)


def test_tool_with_a_sync_execute_is_refused_at_construction():
    with pytest.raises(TypeError, match="async function"):
        Tool(name="t", description="", parameters={}, execute=lambda arguments: "sync")


async def test_tool_execute_may_be_an_async_callable_object():
    class Execute:
        async def __call__(self, arguments: dict[str, Any]) -> str:
            return "called"

    registry = ToolRegistry([Tool(name="obj", description="", parameters={}, execute=Execute())])
    run, _ = start(
        [scripted_response("r1", [call("obj", "c1")]), scripted_response("r2", "ok")],
        tools=registry,
    )
    assert (await run.wait()).messages[2].content == "called"


async def test_a_dict_with_int_keys_is_filled_from_json_object_keys():
    # JSON object keys are strings: "1" must read as the int key 1, as msgspec's JSON
    # decoder would (before: "Expected `int`, got `str` - at `key` in `$.scores`")
    @tool
    async def total(scores: dict[int, float]) -> float:
        """Adds the scores by player number."""
        assert all(type(key) is int for key in scores)
        return sum(scores.values())

    assert await total.execute({"scores": {"1": 2.5, "7": 1.0}}) == 3.5
    with pytest.raises(ToolArgumentsError, match="key"):
        await total.execute({"scores": {"one": 2.5}})
