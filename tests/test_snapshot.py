"""A run owns snapshots of its input: nothing the caller, a model or a tool
does later reaches its transcript or its tools (DESIGN 6, 7)."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import add, call, settle, start, user

from trio_agent import AssistantMessage, Tool, ToolRegistry, ToolResultMessage, UserMessage, tool
from trio_agent.testing import scripted_response


def history_with_nested_arguments() -> tuple[list, dict[str, Any]]:
    arguments = {"left": 1, "right": 2, "meta": {"tags": ["a", "b"], "deep": {"k": 1}}}
    messages = [
        user(),
        AssistantMessage("a-1", (call("add", "old-call", arguments),)),
        ToolResultMessage("r-1", "old-call", "add", '{"sum":3}'),
        UserMessage("u-2", "again"),
    ]
    return messages, arguments


async def test_later_changes_to_the_input_list_do_not_reach_the_run():
    messages, _ = history_with_nested_arguments()
    run, model = start([scripted_response("r1", "ok")], messages=messages)
    expected = tuple(messages)
    messages.append(UserMessage("u-3", "injected"))
    messages.pop(0)
    result = await run.wait()
    assert model.requests[0].messages == expected
    assert result.messages[:4] == expected


async def test_later_changes_to_nested_tool_arguments_do_not_reach_the_run():
    messages, arguments = history_with_nested_arguments()
    run, model = start([scripted_response("r1", "ok")], messages=messages)
    arguments["meta"]["tags"].append("c")
    arguments["meta"]["deep"]["k"] = 99
    arguments["left"] = 1000
    await run.wait()
    sent = model.requests[0].messages[1].content[0].arguments
    assert sent == {"left": 1, "right": 2, "meta": {"tags": ["a", "b"], "deep": {"k": 1}}}
    assert sent["meta"] is not arguments["meta"]


async def test_later_registrations_do_not_reach_the_run():
    @tool
    async def late() -> str:
        return "should not run"

    registry = ToolRegistry([add])
    run, model = start(
        [scripted_response("r1", [call("late", "c1")]), scripted_response("r2", "ok")],
        tools=registry,
    )
    registry.register(late)
    result = await run.wait()
    assert [spec.name for spec in model.requests[0].tools] == ["add"]
    assert [spec.name for spec in model.requests[1].tools] == ["add"]
    late_result = result.messages[2]
    assert late_result.is_error and 'Unknown tool "late"' in late_result.content


async def test_later_changes_to_a_tool_schema_do_not_reach_the_run():
    schema = {"type": "object", "properties": {}}

    async def execute(arguments: dict[str, Any]) -> str:
        return "done"

    raw = Tool(name="raw", description="d", parameters=schema, execute=execute)
    run, model = start([scripted_response("r1", "ok")], tools=ToolRegistry([raw]))
    schema["properties"]["injected"] = {"type": "string"}
    await run.wait()
    assert model.requests[0].tools[0].parameters == {"type": "object", "properties": {}}


@pytest.mark.parametrize("observed", [True, False])
async def test_a_tool_gets_its_own_copy_of_the_arguments(observed):
    # Unobserved (``wait()``), a step keeps the copy made as the call streamed: the
    # tool's copy is still its own.
    async def vandal(arguments: dict[str, Any]) -> str:
        arguments["items"].append("tool was here")
        arguments["new"] = True
        return "mutated"

    registry = ToolRegistry([Tool(name="vandal", description="", parameters={}, execute=vandal)])
    the_call = call("vandal", "c1", {"items": ["x"]})
    run, model = start(
        [scripted_response("r1", [the_call]), scripted_response("r2", "ok")], tools=registry
    )
    if observed:
        events, result = await settle(run)
        started = next(e for e in events if e.type == "tool.started")
        assert started.call.arguments == {"items": ["x"]}
    else:
        result = await run.wait()
    assert result.messages[1].content[0].arguments == {"items": ["x"]}
    assert model.requests[1].messages[1].content[0].arguments == {"items": ["x"]}
    assert the_call.arguments == {"items": ["x"]}  # nor the model's own


async def test_a_model_mutating_its_response_later_does_not_reach_the_transcript():
    arguments = {"left": 1, "right": 2}
    the_call = call("add", "c1", arguments)
    run, model = start([scripted_response("r1", [the_call]), scripted_response("r2", "ok")])

    events = []
    async with run:
        async for event in run:
            events.append(event)
            if event.type == "tool.started":
                arguments["left"] = 40  # the model's own object, changed after the fact
    assert run.result.messages[1].content[0].arguments == {"left": 1, "right": 2}
    assert run.result.messages[2].content == '{"sum":3}'


async def test_a_consumer_editing_a_streamed_call_changes_neither_transcript_nor_tool():
    # The message keeps copies of its own: the streamed copies went out in
    # model.chunk events, and a consumer may do anything to those.
    seen: list[dict[str, Any]] = []

    async def spy(arguments: dict[str, Any]) -> str:
        seen.append(arguments)
        return "ok"

    registry = ToolRegistry([Tool(name="spy", description="", parameters={}, execute=spy)])
    run, _ = start(
        [scripted_response("r1", [call("spy", "c1", {"n": 1})]), scripted_response("r2", "ok")],
        tools=registry,
    )
    async with run:
        async for event in run:
            if event.type == "model.chunk" and hasattr(event.chunk, "arguments"):
                event.chunk.arguments["n"] = 666
                event.chunk.arguments["extra"] = True
    assert seen == [{"n": 1}]
    assert run.result.messages[1].content[0].arguments == {"n": 1}


async def test_a_shared_tool_schema_is_read_only_and_reaches_no_other_run():
    import copy
    import pickle

    import msgspec
    import pytest

    run, model = start([scripted_response("r1", "ok")])
    await run.wait()
    parameters = model.requests[0].tools[0].parameters
    assert parameters == add.parameters and parameters is add.spec().parameters
    with pytest.raises(TypeError, match="read-only"):
        parameters["properties"]["injected"] = {"type": "string"}
    with pytest.raises(TypeError, match="read-only"):
        parameters["required"].append("injected")
    with pytest.raises(TypeError, match="read-only"):
        parameters.update({"x": 1})
    # it still encodes, copies and pickles as plain JSON, and a copy can be changed
    assert msgspec.json.decode(msgspec.json.encode(parameters)) == add.parameters
    changed = copy.deepcopy(parameters)
    assert pickle.loads(pickle.dumps(parameters)) == parameters == changed
    changed["properties"]["x"] = {}  # a deep copy is the caller's own
    assert "x" not in add.spec().parameters["properties"]
