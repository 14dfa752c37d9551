"""A tool's return value that cannot be JSON-encoded is an error result, not a crash
(issue 12, item 13)."""

from __future__ import annotations

import datetime
import enum
from typing import Any

import pytest
from helpers import call, user

from trio_agent import (
    Agent,
    Tool,
    ToolCall,
    ToolError,
    ToolRegistry,
    TurnCompleted,
    execute_tool_call,
    run_agent_loop,
    tool,
)
from trio_agent.testing import ScriptedModel, scripted_response


def cycle() -> dict[str, Any]:
    value: dict[str, Any] = {"name": "node"}
    value["self"] = value
    return value


def deep() -> list[Any]:
    value: list[Any] = []
    for _ in range(100_000):
        value = [value]
    return value


class Opaque:
    """An object msgspec does not know how to encode."""


class BrokenZone(datetime.tzinfo):
    """A time zone whose lookup fails while the value is encoded."""

    def utcoffset(self, dt: datetime.datetime | None) -> datetime.timedelta:
        raise LookupError("no zone data")


class Colour(enum.Enum):
    RED = object()  # an enum member whose value cannot be encoded


# (case name, factory of the returned value, words the reason must contain)
UNENCODABLE = [
    ("cycle", cycle, "reference cycle or is nested too deeply"),
    ("deep", deep, "reference cycle or is nested too deeply"),
    ("object", Opaque, "Encoding objects of type Opaque is unsupported"),
    ("tuple keys", lambda: {(1, 2): "pair"}, "str-like or number-like keys"),
    ("enum of an object", lambda: [Colour.RED], "unsupported"),
    ("lone surrogate", lambda: {"name": "caf\udce9"}, "surrogates not allowed"),
    ("failing tzinfo", lambda: datetime.datetime(2020, 1, 1, tzinfo=BrokenZone()), "no zone data"),
]


def returning(factory) -> Tool:
    async def execute(arguments: dict[str, Any]) -> Any:
        return factory()

    return Tool(name="produce", description="Returns a value.", parameters={}, execute=execute)


def script() -> list:
    return [
        scripted_response("r1", [call("produce", "c1")]),
        scripted_response("r2", "went on"),
    ]


def assert_error_result(result, reason: str) -> None:
    assert result.is_error and result.tool_call_id == "c1"
    assert result.content.startswith('Tool "produce" returned a ')
    assert "cannot be encoded as JSON" in result.content and reason in result.content


@pytest.mark.parametrize(
    ("case", "factory", "reason"), UNENCODABLE, ids=[c[0] for c in UNENCODABLE]
)
async def test_unencodable_return_is_an_error_result_and_the_loop_goes_on(case, factory, reason):
    model = ScriptedModel(script())
    result = await run_agent_loop(
        messages=[user()], model=model, tools=ToolRegistry([returning(factory)]), max_steps=4
    ).wait()
    assert result.status == "completed" and result.final_text == "went on"
    assert model.call_count == 2  # the next step happened, and saw the error
    assert_error_result(model.requests[1].messages[-1], reason)
    assert_error_result(result.messages[2], reason)


@pytest.mark.parametrize(
    ("case", "factory", "reason"), UNENCODABLE, ids=[c[0] for c in UNENCODABLE]
)
async def test_unencodable_return_is_an_error_result_and_the_turn_goes_on(case, factory, reason):
    model = ScriptedModel(script())
    agent = Agent(model=model, tools=ToolRegistry([returning(factory)]))
    result = await agent.prompt("go")
    assert isinstance(result.end, TurnCompleted) and result.final_text == "went on"
    assert model.call_count == 2
    assert_error_result(model.requests[1].messages[-1], reason)
    assert_error_result(result.messages[-2], reason)


async def test_a_recursion_error_the_tool_raises_is_not_taken_for_an_encoding_failure():
    async def execute(arguments: dict[str, Any]) -> Any:
        raise RecursionError("the tool's own recursion")

    tool = Tool(name="produce", description="Raises.", parameters={}, execute=execute)
    result = await execute_tool_call(ToolRegistry([tool]), call("produce", "c1"))
    assert result.is_error
    assert result.content == 'Tool "produce" raised RecursionError: the tool\'s own recursion'


async def test_values_msgspec_can_encode_stay_results():
    values = {"big": 2**100, "nan": float("nan"), "keys": {1: "one"}, "set": {3}}
    result = await execute_tool_call(
        ToolRegistry([returning(lambda: values)]), call("produce", "c1")
    )
    assert not result.is_error
    assert (
        result.content
        == '{"big":1267650600228229401496703205376,"nan":null,"keys":{"1":"one"},"set":[3]}'
    )


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class UnprintableToolError(ToolError):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


@pytest.mark.parametrize("error", [Unprintable, UnprintableToolError])
async def test_an_exception_whose_str_raises_still_gives_an_error_result(error):
    async def execute(arguments: dict[str, Any]) -> Any:
        raise error()

    tool = Tool(name="produce", description="Raises.", parameters={}, execute=execute)
    model = ScriptedModel(script())
    result = await run_agent_loop(
        messages=[user()], model=model, tools=ToolRegistry([tool]), max_steps=4
    ).wait()
    assert result.status == "completed" and model.call_count == 2
    answer = result.messages[2]
    assert answer.is_error and '"produce"' in answer.content
    assert answer.content.endswith("(its message could not be read: RuntimeError)")
    if error is Unprintable:
        assert answer.content.startswith('Tool "produce" raised Unprintable: ')


async def test_a_str_int_or_float_subclass_returned_is_its_value_not_an_error():
    """A tool that returned a ``str`` subclass (``numpy.str_``, ``markupsafe.Markup``), or
    held one or an ``int`` or ``float`` subclass in what it returned, got an error result
    ("cannot be encoded as JSON"): its output was lost. A ``str`` subclass is the content,
    as a ``str`` is; in a value, each is its plain value (not what an override says)."""

    class Name(str):
        def __str__(self) -> str:
            return "overridden"

    class Count(int):
        pass

    class Ratio(float):
        pass

    @tool
    async def plain_text() -> str:
        return Name("Ada")

    @tool
    async def record() -> dict[str, Any]:
        return {"name": Name("Ada"), "count": Count(3), "ratio": Ratio(0.5)}

    text = await execute_tool_call(ToolRegistry([plain_text]), ToolCall("c1", "plain_text", {}))
    assert (text.content, text.is_error) == ("Ada", False)
    value = await execute_tool_call(ToolRegistry([record]), ToolCall("c2", "record", {}))
    assert (value.content, value.is_error) == ('{"name":"Ada","count":3,"ratio":0.5}', False)
