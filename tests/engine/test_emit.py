"""The one event counter and its sink (``engine/_emit.py``): events owed when
cancellation interrupts them are delivered just before run.finished, in a contiguous
sequence. Regressions a review of the core loop found."""

from __future__ import annotations

import trio
from helpers import TaskSteps, assert_stream_shape, call, start

from trio_agent import Cancelled, RunFinished, ToolFinished
from trio_agent.testing import scripted_response


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
    with trio.fail_after(60):  # a hang guard: a deadlock is for ever
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


async def test_owed_event_keeps_sequences_contiguous_for_every_cancel_point_in_a_batch():
    """An owed ``tool.finished`` broke the numbering of the events when the cancel landed in a
    batch; the sequence stays contiguous for every cancel point."""
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


async def test_a_turn_nobody_watches_counts_the_events_it_does_not_make():
    """Issue 38: a turn awaited whole (``prompt``: no consumer, no ledger) makes no
    chunk, tool.started or announced event, only counts them; the next watched
    turn's events go on from the same sequence as after a watched first turn."""
    from trio_agent import Agent, ToolCall, tool
    from trio_agent.testing import ScriptedModel

    @tool
    async def add(left: int, right: int) -> int:
        """Add."""
        return left + right

    def script():
        return ScriptedModel(
            [
                scripted_response("r1", [ToolCall("c1", "add", {"left": 1, "right": 2})]),
                scripted_response("r2", "3", text_chunks=3),
                scripted_response("r3", "again", text_chunks=2),
            ]
        )

    async def watched(agent):
        async with agent.turn("go") as run:
            return [event async for event in run]

    seen, unseen = Agent(model=script(), tools=[add]), Agent(model=script(), tools=[add])
    first = await watched(seen)
    await unseen.prompt("go")
    second_seen, second_unseen = await watched(seen), await watched(unseen)
    assert [e.sequence for e in second_unseen] == [e.sequence for e in second_seen]
    assert second_seen[0].sequence == first[-1].sequence + 1
    assert [e.type for e in second_unseen] == [e.type for e in second_seen]


async def _chunks_read(chunks: int, checkpoints: bool) -> tuple[list, int]:
    """The events of a one-step run streaming ``chunks`` text deltas, and the
    scheduler steps the consumer's task took to read them."""
    from trio_agent import ToolRegistry, UserMessage, run_agent_loop
    from trio_agent.testing import ScriptedModel

    model = ScriptedModel(
        [scripted_response("r1", "x" * chunks, text_chunks=chunks)],
        chunk_checkpoints=checkpoints,
    )
    run = run_agent_loop(
        messages=[UserMessage("u1", "go")], model=model, tools=ToolRegistry(), max_steps=1
    )
    steps = TaskSteps(trio.lowlevel.current_task())
    events = []
    async with run:
        trio.lowlevel.add_instrument(steps)
        try:
            events = [event async for event in run]
        finally:
            trio.lowlevel.remove_instrument(steps)
    return events, steps.steps


async def test_issue_38_a_consumer_meets_the_run_once_for_every_two_chunks():
    """Issue 38: each streamed chunk cost the consumer and the run a meeting in
    trio's scheduler (the run yielded after handing it over, the consumer after
    taking it). Streamed chunks are now handed over and taken without those
    yields: 200 chunks cost the consumer about 100 steps (140 when the model
    yields between chunks too), not 200."""
    for checkpoints, most in ((False, 120), (True, 160)):
        events, steps = await _chunks_read(200, checkpoints)
        assert [e.type for e in events].count("model.chunk") == 200
        assert isinstance(events[-1], RunFinished) and events[-1].result.status == "completed"
        assert steps <= most, (checkpoints, steps)


async def test_issue_38_a_cancel_after_chunk_k_stops_chunk_k_plus_one():
    """The run may read chunk k+1 from the model before the consumer handles chunk
    k, but never hands it over once the consumer cancelled: the next event is the
    last, for every k, whether or not the model yields between chunks (after the
    last chunk the answer may be whole already: then the turn completed)."""
    from trio_agent import ToolRegistry, UserMessage, run_agent_loop
    from trio_agent.testing import ScriptedModel

    for checkpoints in (False, True):
        for k in range(6):
            model = ScriptedModel(
                [scripted_response("r1", "abcdef", text_chunks=6)], chunk_checkpoints=checkpoints
            )
            run = run_agent_loop(
                messages=[UserMessage("u1", "go")], model=model, tools=ToolRegistry(), max_steps=1
            )
            events = []
            async with run:
                async for event in run:
                    events.append(event)
                    if event.type == "model.chunk" and event.chunk.text == "abcdef"[k]:
                        run.cancel()
            kinds = [e.type for e in events]
            assert kinds == ["message.accepted", *["model.chunk"] * (k + 1), "run.finished"]
            assert k == 5 or isinstance(run.result, Cancelled), (checkpoints, k)
            assert_stream_shape(events, run.result)


async def test_an_emitter_is_silent_exactly_while_no_one_receives_and_nothing_records():
    """Issue 38: ``silent`` is kept as the emitter's sink changes, not asked each
    time: a consumer that leaves makes an emitter with no journal silent, a
    journal attached makes it speak, and one let go makes it silent again."""
    from typing import Any

    from trio_agent.engine._emit import Emitter
    from trio_agent.engine._handoff import Handoff

    assert Emitter(None).silent
    handoff: Handoff[Any] = Handoff()
    emit = Emitter(handoff)
    assert not emit.silent
    handoff.close_receiving()  # the consumer left
    await emit("lost")
    assert emit.silent and emit.next == 1
    journal: Any = object()  # never asked: nothing is emitted while it is attached
    emit.attach(journal)
    assert not emit.silent
    emit.attach(None)
    assert emit.silent
    recorded = Emitter(None, journal=journal)
    assert not recorded.silent
