"""The one event counter and its sink (``engine/_emit.py``): events owed when
cancellation interrupts them are delivered just before run.finished, in a contiguous
sequence. Regressions a review of the core loop found."""

from __future__ import annotations

import trio
from helpers import assert_stream_shape, call, start

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
