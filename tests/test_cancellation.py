"""Cancellation at every kind of point keeps only complete messages, invents no
result, lets the tool see trio.Cancelled and ends with run.finished (DESIGN 7)."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from helpers import add, assert_stream_shape, call, settle, start, user
from waiting import WAIT, cancelled_once_blocked, wait_until

from trio_agent import (
    AssistantMessage,
    Cancelled,
    RunFinished,
    TextBlock,
    ToolRegistry,
    UserMessage,
    repair_transcript,
    tool,
    validate_transcript,
)
from trio_agent.testing import scripted_response


def hanging_tool(log: list[str]):
    @tool
    async def slow(label: str) -> str:
        """Runs until cancelled."""
        log.append(f"start {label}")
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            log.append(f"cancelled {label}")
            raise
        return "never"

    return slow


async def consume_then_cancel(run, when) -> list:
    """Consume events; call run.cancel() right after the first event ``when`` accepts."""
    events = []
    async with run:
        async for event in run:
            events.append(event)
            if when(event):
                run.cancel()
    return events


def assert_cancelled(events, result, initial, *, model_calls=None, model=None):
    assert isinstance(result, Cancelled), result
    assert result.status == "cancelled"
    assert result.messages[: len(initial)] == tuple(initial)
    assert_stream_shape(events, result)
    validate_transcript(repair_transcript(result.messages))
    if model is not None and model_calls is not None:
        assert model.call_count == model_calls


async def test_cancel_before_the_run_starts():
    run, model = start(
        [scripted_response("r1", "never")], messages=[user(), UserMessage("u2", "b")]
    )
    run.cancel()
    events, result = await settle(run)
    assert events == [RunFinished(sequence=0, result=result)]
    assert result == Cancelled(messages=(user(), UserMessage("u2", "b")), steps=0)
    assert model.call_count == 0


async def test_cancel_before_start_with_wait():
    run, model = start([scripted_response("r1", "never")])
    run.cancel()
    result = await run.wait()
    assert result == Cancelled(messages=(user(),), steps=0)
    assert model.call_count == 0


async def test_cancel_while_accepting_messages_keeps_every_initial_message():
    initial = [UserMessage(f"u{i}", "x") for i in range(5)]
    run, model = start([scripted_response("r1", "never")], messages=initial)
    events = await consume_then_cancel(run, lambda e: e.sequence == 1)
    assert [e.type for e in events] == ["message.accepted"] * 2 + ["run.finished"]
    assert run.result == Cancelled(messages=tuple(initial), steps=0)
    assert model.call_count == 0


async def test_cancel_while_streaming_keeps_no_partial_message():
    run, model = start([scripted_response("r1", "a long answer", text_chunks=4, hang_at=2)])
    events = await consume_then_cancel(run, lambda e: e.sequence == 2)
    result = run.result
    assert [e.type for e in events] == [
        "message.accepted",
        "model.chunk",
        "model.chunk",
        "run.finished",
    ]
    assert result == Cancelled(messages=(user(),), steps=1)
    assert_cancelled(events, result, [user()], model=model, model_calls=1)


async def test_cancel_while_awaiting_the_response():
    entry = scripted_response("r1", "answer", text_chunks=2, hang_at=2)
    run, model = start([entry])
    with trio.fail_after(WAIT):  # a hang guard
        events = await consume_then_cancel(run, lambda e: e.sequence == 2)
    assert run.result == Cancelled(messages=(user(),), steps=1)
    assert_cancelled(events, run.result, [user()])


async def test_cancel_while_a_tool_runs_invents_no_result():
    log: list[str] = []
    the_call = call("slow", "c1", {"label": "one"})
    run, model = start(
        [scripted_response("r1", [the_call]), scripted_response("r2", "never")],
        tools=ToolRegistry([hanging_tool(log)]),
    )
    async with run:
        events = []
        async for event in run:
            events.append(event)
            if event.type == "tool.started":
                await trio.testing.wait_all_tasks_blocked()  # the tool started, and hangs
                run.cancel()
    result = run.result
    assert log == ["start one", "cancelled one"]
    assert result.messages == (user(), AssistantMessage("message-r1", (the_call,)))
    assert [e.type for e in events][-2:] == ["tool.started", "run.finished"]
    assert_cancelled(events, result, [user()], model=model, model_calls=1)


async def test_a_deadline_on_cancel_scope_cancels_the_run():
    log: list[str] = []
    scope = trio.CancelScope()
    run, _ = start(
        [scripted_response("r1", [call("slow", "c1", {"label": "x"})])],
        tools=ToolRegistry([hanging_tool(log)]),
        cancel_scope=scope,
    )

    async def deadline_once_the_tool_runs() -> None:
        await wait_until(lambda: log == ["start x"])
        scope.deadline = trio.current_time() + 0.05

    async with trio.open_nursery() as nursery:
        nursery.start_soon(deadline_once_the_tool_runs)
        events, result = await settle(run)
    assert isinstance(result, Cancelled)
    assert log == ["start x", "cancelled x"]
    assert scope.cancelled_caught
    assert_cancelled(events, result, [user()])


async def test_run_cancel_cancels_the_given_scope():
    scope = trio.CancelScope()
    run, _ = start([scripted_response("r1", "x", hang_at=0)], cancel_scope=scope)
    run.cancel()
    assert scope.cancel_called
    assert (await run.wait()).status == "cancelled"


async def test_leaving_async_with_early_cancels_the_run():
    log: list[str] = []
    run, model = start(
        [
            scripted_response("r1", [call("slow", "c1", {"label": "x"})]),
            scripted_response("r2", "never"),
        ],
        tools=ToolRegistry([hanging_tool(log)]),
    )
    async with run:
        async for event in run:
            if event.type == "tool.started":
                await trio.testing.wait_all_tasks_blocked()  # the tool started, and hangs
                break
    assert log == ["start x", "cancelled x"]
    assert isinstance(run.result, Cancelled)
    assert run.result.messages[-1] == AssistantMessage(
        "message-r1", (call("slow", "c1", {"label": "x"}),)
    )
    assert model.call_count == 1


async def test_leaving_async_with_without_iterating_cancels_the_run():
    run, model = start([scripted_response("r1", "x", hang_at=0)])
    async with run:
        pass
    assert isinstance(run.result, Cancelled)


async def test_outer_cancellation_of_the_consumer_propagates_and_sets_the_result():
    run, _ = start([scripted_response("r1", "x", text_chunks=1, hang_at=0)])
    async with cancelled_once_blocked() as outer:
        async with run:
            async for _ in run:
                pass
        pytest.fail("the consumer was not cancelled")
    assert outer.cancelled_caught
    assert isinstance(run.result, Cancelled)


async def test_outer_cancellation_of_wait_propagates_and_sets_the_result():
    run, _ = start([scripted_response("r1", "x", hang_at=0)])
    async with cancelled_once_blocked() as outer:
        await run.wait()
        pytest.fail("wait() was not cancelled")
    assert outer.cancelled_caught
    assert run.result == Cancelled(messages=(user(),), steps=1)


async def test_finished_tool_results_survive_a_cancel_in_the_same_batch():
    log: list[str] = []
    calls = [
        call("add", "c1", {"left": 1, "right": 2}),
        call("slow", "c2", {"label": "two"}),
        call("add", "c3", {"left": 3, "right": 4}),
    ]
    run, _ = start(
        [scripted_response("r1", calls), scripted_response("r2", "never")],
        tools=ToolRegistry([add, hanging_tool(log)]),
    )
    events = []
    async with run:
        async for event in run:
            events.append(event)
            if event.type == "tool.started" and event.call.id == "c2":
                await trio.testing.wait_all_tasks_blocked()  # c2 started, and hangs
                run.cancel()
    result = run.result
    assert [m.id for m in result.messages] == ["user-001", "message-r1", "tool-result-c1"]
    assert result.messages[2].content == '{"sum":3}'
    assert [e.type for e in events].count("tool.finished") == 1
    assert_cancelled(events, result, [user()])


async def test_cancel_after_the_run_finished_changes_nothing():
    run, _ = start([scripted_response("r1", "done")])
    events, result = await settle(run)
    run.cancel()
    assert run.result is result and result.status == "completed"


async def test_a_consumer_that_cancels_and_then_stops_reading_does_not_hang():
    """Leaving the block closes the channel, so the run's final (shielded) sends
    cannot keep it waiting for a consumer that stopped reading."""
    run, _ = start(
        [
            scripted_response("r1", [call("add", "c1", {"left": 1, "right": 1})]),
            scripted_response("r2", "x", hang_at=0),
        ]
    )
    with trio.fail_after(WAIT):  # a hang guard
        async with run:
            async for event in run:
                if event.type == "tool.started":
                    run.cancel()
                    await trio.testing.wait_all_tasks_blocked()  # the run finishes meanwhile
                    break
    assert isinstance(run.result, Cancelled)
    assert [m.id for m in run.result.messages][-1] == "tool-result-c1"


async def test_text_only_step_cancelled_mid_stream_then_repair_is_a_no_op():
    run, _ = start(
        [
            scripted_response(
                "r1",
                [TextBlock("thinking"), call("add", "c1", {"left": 1, "right": 1})],
                text_chunks=3,
                hang_at=3,
            )
        ]
    )
    await consume_then_cancel(run, lambda e: e.type == "model.chunk" and e.sequence == 3)
    assert run.result.messages == (user(),)
    assert repair_transcript(run.result.messages) == (user(),)
