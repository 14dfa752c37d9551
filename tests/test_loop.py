"""The loop's event order, requests, budget and AgentRun lifecycle (DESIGN 7)."""

from __future__ import annotations

import pytest
import trio
from helpers import add, assert_stream_shape, call, make_echo, settle, start, user

from trio_agent import (
    AssistantMessage,
    Completed,
    MaxSteps,
    MessageAccepted,
    ModelChunk,
    RunFinished,
    TextBlock,
    TextDelta,
    ToolFinished,
    ToolRegistry,
    ToolResultMessage,
    ToolSpec,
    ToolStarted,
    run_agent_loop,
)
from trio_agent.testing import ScriptedModel, scripted_response


def one_tool_script():
    add_call = call("add", "call-add-001", {"left": 20, "right": 22})
    return add_call, [
        scripted_response("response-tool-001", [add_call], "tool_call"),
        scripted_response("response-tool-002", [TextBlock("The sum is 42.")], "stop"),
    ]


async def test_one_tool_run_appends_call_and_result_before_second_request():
    add_call, script = one_tool_script()
    run, model = start(script, max_steps=2)
    events, result = await settle(run)

    assert model.call_count == 2
    assert [r.id for r in model.requests] == ["request-001", "request-002"]
    assert model.requests[1].messages == (
        user(),
        AssistantMessage(id="message-response-tool-001", content=(add_call,)),
        ToolResultMessage(
            id="tool-result-call-add-001",
            tool_call_id="call-add-001",
            tool_name="add",
            content='{"sum":42}',
            is_error=False,
        ),
    )
    assert [e.type for e in events] == [
        "message.accepted",
        "model.chunk",
        "tool.started",
        "tool.finished",
        "model.chunk",
        "run.finished",
    ]
    assert [type(e) for e in events] == [
        MessageAccepted,
        ModelChunk,
        ToolStarted,
        ToolFinished,
        ModelChunk,
        RunFinished,
    ]
    assert [e.sequence for e in events] == [0, 1, 2, 3, 4, 5]
    assert isinstance(result, Completed)
    assert result.status == "completed"
    assert result.final_text == "The sum is 42."
    assert result.stop_reason == "stop"
    assert result.steps == 2
    assert result.messages == (
        *model.requests[1].messages,
        AssistantMessage(id="message-response-tool-002", content=(TextBlock("The sum is 42."),)),
    )
    assert events[1].chunk == add_call and events[1].request_id == "request-001"
    assert events[4].chunk == TextDelta("The sum is 42.")
    assert events[2].call == add_call
    assert events[3].result == result.messages[2]
    assert_stream_shape(events, result)


@pytest.mark.parametrize("text", ['{"left": 20, "right": 22}', "42", "null"])
async def test_without_an_output_type_the_output_is_none_whatever_the_text(text):
    """Section 11.4: ``Completed.output`` is None without ``output_type``, even
    when the final text is JSON; the request asks for no output shape."""
    run, model = start([scripted_response("r1", text, "stop")])
    _, result = await settle(run)
    assert isinstance(result, Completed) and result.final_text == text
    assert result.output is None and model.requests[0].output is None


async def test_first_request_carries_transcript_specs_and_system():
    _, script = one_tool_script()
    run, model = start(script, system="Be brief.")
    await run.wait()
    first = model.requests[0]
    assert first.messages == (user(),)
    assert first.system == "Be brief."
    assert first.tools == (
        ToolSpec(
            name="add",
            description="Add two integers.",
            parameters={
                "type": "object",
                "properties": {"left": {"type": "integer"}, "right": {"type": "integer"}},
                "required": ["left", "right"],
                "additionalProperties": False,
            },
        ),
    )


async def test_max_steps_one_runs_the_whole_batch_and_opens_no_second_request():
    executed: list[str] = []
    calls = [call("echo", f"call-echo-00{i}", {"text": f"call-echo-00{i}"}) for i in (1, 2, 3)]
    run, model = start(
        [
            scripted_response("response-budget-001", calls, "tool_call"),
            scripted_response("response-budget-002", "must not run", "stop"),
        ],
        messages=[user("Echo three values.")],
        tools=ToolRegistry([make_echo(executed)]),
        max_steps=1,
    )
    events, result = await settle(run)
    assert executed == ["call-echo-001", "call-echo-002", "call-echo-003"]
    assert model.call_count == 1
    assert result == MaxSteps(messages=result.messages, steps=1, max_steps=1)
    assert result.status == "max_steps"
    assert events[-1] == RunFinished(sequence=len(events) - 1, result=result)
    # results in call order, each right after its tool.finished
    assert [m.tool_call_id for m in result.messages[2:]] == [c.id for c in calls]
    assert [e.type for e in events[1:]] == [
        "model.chunk",
        "model.chunk",
        "model.chunk",
        "tool.started",
        "tool.finished",
        "tool.started",
        "tool.finished",
        "tool.started",
        "tool.finished",
        "run.finished",
    ]


async def test_max_steps_two_lets_the_queued_follow_up_complete():
    executed: list[str] = []
    calls = [call("echo", f"c{i}", {"text": str(i)}) for i in (1, 2, 3)]
    run, model = start(
        [
            scripted_response("r1", calls, "tool_call"),
            scripted_response("r2", "done", "stop"),
        ],
        tools=ToolRegistry([make_echo(executed)]),
        max_steps=2,
    )
    result = await run.wait()
    assert model.call_count == 2
    assert result.status == "completed" and result.final_text == "done"


async def test_request_ids_start_at_request_sequence_start():
    script = [
        scripted_response(f"r{i}", [call("add", f"c{i}", {"left": i, "right": 0})])
        for i in range(3)
    ]
    run, model = start(script, request_sequence_start=62, max_steps=3)
    result = await run.wait()
    assert [r.id for r in model.requests] == ["request-062", "request-063", "request-064"]
    assert result.status == "max_steps" and result.steps == 3


async def test_length_stop_completes_with_its_text():
    run, _ = start([scripted_response("r1", "cut off mid", "length", text_chunks=3)])
    events, result = await settle(run)
    assert result.status == "completed"
    assert result.stop_reason == "length" and result.final_text == "cut off mid"
    assert [e.chunk.text for e in events if isinstance(e, ModelChunk)] == ["cut ", "off ", "mid"]


async def test_text_and_calls_keep_the_response_blocks_as_given():
    blocks = [
        TextBlock("a"),
        TextBlock("b"),
        call("add", "c1", {"left": 1, "right": 2}),
        TextBlock(""),
        TextBlock("c"),
    ]
    run, model = start(
        [scripted_response("r1", blocks, "tool_call"), scripted_response("r2", "ok")]
    )
    result = await run.wait()
    assert result.messages[1] == AssistantMessage("message-r1", tuple(blocks))
    assert result.messages[2].content == '{"sum":3}'


async def test_empty_initial_transcript_is_valid():
    run, model = start([scripted_response("r1", "hi")], messages=[])
    events, result = await settle(run)
    assert model.requests[0].messages == ()
    assert [e.type for e in events] == ["model.chunk", "run.finished"]
    assert result.messages == (AssistantMessage("message-r1", (TextBlock("hi"),)),)


async def test_wait_without_async_with_returns_the_same_result():
    _, script = one_tool_script()
    observed, _ = start(script)
    silent, _ = start(script)
    _, expected = await settle(observed)
    assert await silent.wait() == expected
    assert silent.result == expected
    assert await silent.wait() == expected  # idempotent once finished


async def test_wait_inside_async_with_drains_the_rest():
    _, script = one_tool_script()
    run, _ = start(script)
    async with run:
        first = await run.__anext__()
        assert first.type == "message.accepted"
        result = await run.wait()
    assert result.status == "completed"
    assert run.result is result


async def test_result_is_none_until_finished():
    _, script = one_tool_script()
    run, _ = start(script)
    assert run.result is None
    async with run:
        async for event in run:
            if event.type != "run.finished":
                assert run.result is None
            else:
                assert run.result == event.result


async def test_iterating_outside_async_with_raises():
    _, script = one_tool_script()
    run, _ = start(script)
    with pytest.raises(RuntimeError, match="async with"):
        async for _ in run:
            pass
    await settle(run)
    with pytest.raises(RuntimeError, match="async with"):
        await run.__anext__()


async def test_a_run_is_entered_only_once():
    _, script = one_tool_script()
    run, _ = start(script)
    await settle(run)
    with pytest.raises(RuntimeError, match="only once"):
        async with run:
            pass
    other, _ = start(script)
    await other.wait()
    with pytest.raises(RuntimeError, match="only once"):
        async with other:
            pass


async def test_exception_in_the_consumer_body_propagates_unwrapped():
    _, script = one_tool_script()
    run, _ = start(script)
    with pytest.raises(KeyError):
        async with run:
            async for _ in run:
                raise KeyError("consumer bug")
    assert run.result is not None and run.result.status == "cancelled"


async def test_many_runs_in_one_nursery():
    results = []

    async def one(i: int) -> None:
        run, _ = start(
            [
                scripted_response(f"r{i}", [call("add", f"c{i}", {"left": i, "right": i})]),
                scripted_response(f"s{i}", str(i * 2)),
            ]
        )
        results.append(await run.wait())

    async with trio.open_nursery() as nursery:
        for i in range(50):
            nursery.start_soon(one, i)
    assert sorted(r.final_text for r in results) == sorted(str(i * 2) for i in range(50))


def test_run_agent_loop_can_be_created_outside_trio_and_run_later():
    _, script = one_tool_script()
    run = run_agent_loop(
        messages=[user()], model=ScriptedModel(script), tools=ToolRegistry([add]), max_steps=2
    )
    result = trio.run(run.wait)
    assert result.status == "completed"
