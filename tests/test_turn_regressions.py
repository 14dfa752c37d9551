"""Regression tests of the turn (the loop, the step, the emitter), each named after
the bug it pins (found in review of the core loop)."""

from __future__ import annotations

import pytest
import trio
from helpers import add, assert_stream_shape, call, start, user

from trio_agent import (
    Cancelled,
    ModelChunk,
    RunFinished,
    ToolFinished,
    ToolRegistry,
    UserMessage,
    run_agent_loop,
    tool,
)
from trio_agent.testing import ScriptedModel, scripted_response


def nursery_tool(log: list[str]):
    @tool
    async def fan_out() -> str:
        """Runs two children in its own nursery until cancelled."""
        log.append("start")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            nursery.start_soon(trio.sleep_forever)
        return "never"

    return fan_out


@pytest.mark.parametrize("observed", [True, False], ids=["async-with", "wait"])
async def test_outer_cancel_grouped_by_a_tool_nursery_still_ends_with_run_finished(observed):
    log: list[str] = []
    run, _ = start(
        [scripted_response("r1", [call("fan_out", "c1")])], tools=ToolRegistry([nursery_tool(log)])
    )
    events = []
    with trio.move_on_after(0.05) as outer:
        if observed:
            async with run:
                async for event in run:
                    events.append(event)
        else:
            await run.wait()
    assert outer.cancelled_caught and log == ["start"]
    assert isinstance(run.result, Cancelled)
    assert run.result.messages[0] == user() and len(run.result.messages) == 2


async def test_outer_cancel_grouped_by_a_model_nursery_still_sets_the_result():
    class NurseryModel:
        def stream(self, request):
            inner = ScriptedModel([scripted_response("r1", "x", hang_at=0)]).stream(request)

            class CM:
                async def __aenter__(self):
                    self.cm = trio.open_nursery()
                    nursery = await self.cm.__aenter__()
                    nursery.start_soon(trio.sleep_forever)
                    return await inner.__aenter__()

                async def __aexit__(self, *exc):
                    await inner.__aexit__(*exc)
                    return await self.cm.__aexit__(*exc)

            return CM()

    run = run_agent_loop(messages=[user()], model=NurseryModel(), tools=ToolRegistry(), max_steps=1)
    with trio.move_on_after(0.05) as outer:
        await run.wait()
    assert outer.cancelled_caught
    assert run.result == Cancelled(messages=(user(),), steps=1)


async def test_consumer_that_cancels_then_stops_reading_gets_the_result_and_the_owed_event():
    """A shielded send of tool.finished once blocked the run until the consumer read
    again; now the event is owed, delivered just before run.finished."""
    run, _ = start(
        [
            scripted_response("r1", [call("add", "c1", {"left": 1, "right": 1})]),
            scripted_response("r2", "x", hang_at=0),
        ]
    )
    events = []
    with trio.fail_after(5):
        async with run:
            async for event in run:
                events.append(event)
                if event.type == "tool.started":
                    run.cancel()
                    while run.result is None:  # noqa: ASYNC110 (polling, not reading, is the point)
                        await trio.sleep(0.001)
                    break
            events.extend([event async for event in run])
    assert isinstance(run.result, Cancelled)
    assert [e.type for e in events][-3:] == ["tool.started", "tool.finished", "run.finished"]
    assert_stream_shape(events, run.result)
    assert run.result.messages[-1] == events[-2].result


async def test_model_chunk_carries_the_checked_copy_not_the_models_object():
    streamed = {"left": 1, "right": 2}  # the chunk's dict, which the model changes later
    entry = scripted_response(
        "r1",
        [call("add", "c1", {"left": 1, "right": 2})],
        chunks=[call("add", "c1", streamed)],
    )
    run, _ = start([entry], max_steps=1)
    events = []
    async with run:
        async for event in run:
            if isinstance(event, ModelChunk):
                streamed["left"] = float("nan")
            events.append(event)
    chunk = next(e.chunk for e in events if isinstance(e, ModelChunk))
    assert chunk.arguments == {"left": 1, "right": 2}
    assert chunk == run.result.messages[1].content[0]
    assert_stream_shape(events, run.result)


def test_system_with_a_lone_surrogate_is_refused():
    with pytest.raises(ValueError, match="system is not valid Unicode"):
        run_agent_loop(
            messages=[], model=ScriptedModel([]), tools=ToolRegistry(), max_steps=1, system="\ud800"
        )


class Boom(BaseException):
    pass


async def test_body_exception_is_kept_when_the_run_also_dies():
    @tool
    async def explodes_on_cancel() -> str:
        try:
            await trio.sleep_forever()
        finally:
            raise Boom
        return "never"

    run, _ = start(
        [scripted_response("r1", [call("explodes_on_cancel", "c1")])],
        tools=ToolRegistry([explodes_on_cancel]),
    )
    with pytest.raises(BaseExceptionGroup) as info:
        async with run:
            async for event in run:
                if event.type == "tool.started":
                    raise ValueError("consumer bug")
    kinds = {type(e) for e in info.value.exceptions}
    assert kinds == {ValueError, Boom}


async def test_owed_event_keeps_sequences_contiguous_for_every_cancel_point_in_a_batch():
    calls = [call("add", f"c{i}", {"left": i, "right": i}) for i in range(4)]
    for k in range(1, 12):
        run, _ = start([scripted_response("r1", calls), scripted_response("r2", "ok")])
        events = []
        async with run:
            async for event in run:
                events.append(event)
                if event.sequence == k:
                    run.cancel()
        assert_stream_shape(events, run.result)
        finished = [e.result for e in events if isinstance(e, ToolFinished)]
        assert finished == list(run.result.messages[2:])
        assert isinstance(events[-1], RunFinished)


async def test_regression_a_block_reason_with_a_lone_surrogate_cannot_break_the_transcript():
    # Review finding: a blocked call's result was built by hand, without the
    # lone-surrogate cleanup every other tool result gets.
    from trio_agent import Agent, validate_transcript
    from trio_agent.session import block

    async def refuse(call_):
        return block("bad \ud800")

    agent = Agent(
        model=ScriptedModel(
            [
                scripted_response("r1", [call("add", "c1", {"left": 1, "right": 2})]),
                scripted_response("r2", "ok"),
            ]
        ),
        tools=ToolRegistry([add]),
        before_tool_call=refuse,
    )
    result = await agent.prompt("go")
    validate_transcript(result.messages)
    assert result.messages[2].content == 'Tool call "add" was blocked: bad \ufffd'


async def test_regression_a_journal_failure_while_streaming_is_not_a_model_failure():
    # Review finding: the model-error handler also caught errors of emitting a
    # chunk event, so a ledger that could not write was retried as a flaky model.
    from trio_agent.engine import Conversation, Emitter, StepHooks, TurnSpec, TurnState, run_turn

    class FullDisk:
        def __getattr__(self, name):
            return lambda *args, **kwargs: None

        async def barrier(self, point):
            return None

        async def before_event(self, sequence):
            raise OSError(28, "No space left on device")

    asked = []

    class Hooks(StepHooks):
        def retry_delay(self, error, attempt):
            asked.append(error)
            return 0

    model = ScriptedModel([scripted_response("r1", "done")] * 3)
    conversation = Conversation.from_messages([UserMessage("u1", "hi")])
    spec = TurnSpec(model=model, tools=ToolRegistry(), specs=(), system="", max_steps=4)
    with pytest.raises(OSError, match="No space left"):
        await run_turn(conversation, spec, TurnState(), Emitter(None, journal=FullDisk()), Hooks())
    assert asked == [] and model.call_count == 1


async def test_regression_a_group_of_our_own_errors_still_ends_the_run_visibly(monkeypatch):
    # Review finding: an ExceptionGroup (a bug inside a parallel batch's nursery,
    # with wait() and no async with) skipped the INTERNAL_ERROR path: no
    # run.finished and no result.
    import trio_agent.engine._batch as engine  # where a batch records and starts a call

    async def bug(*args, **kwargs):
        raise RuntimeError("bug")

    monkeypatch.setattr(engine, "_start", bug)
    run = run_agent_loop(
        messages=[UserMessage("u1", "hi")],
        model=ScriptedModel(
            [scripted_response("r1", [call("add", "c1", {"left": 1, "right": 2})])]
        ),
        tools=ToolRegistry([add]),
        max_steps=2,
        tool_execution="parallel",
    )
    with pytest.raises(BaseExceptionGroup):
        await run.wait()
    assert run.result is not None and run.result.status == "failed"
    assert run.result.code == "INTERNAL_ERROR" and "bug" in run.result.detail
