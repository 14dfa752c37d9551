"""``assert_run_invariants`` (issue 7): what the contract promises for any run or turn;
the checker catches each kind of broken stream and run, and accepts a turn whose
history was compacted."""

from __future__ import annotations

import msgspec
import pytest
from helpers import call
from two_steps import core_run, two_steps

from trio_agent import Agent, RunFinished, UserMessage
from trio_agent.testing import (
    InvariantError,
    ScriptedModel,
    assert_run_invariants,
    scripted_response,
)


async def test_the_invariant_checker_catches_broken_streams():
    run = core_run(ScriptedModel(two_steps()))
    events = []
    async with run:
        async for event in run:
            events.append(event)
    result = run.result
    assert_run_invariants(events, result)
    with pytest.raises(InvariantError, match="sequence"):
        assert_run_invariants([events[0], *events[2:]], result)
    with pytest.raises(InvariantError, match="final"):
        assert_run_invariants(events[:-1], result)
    other = msgspec.structs.replace(result, steps=99)
    with pytest.raises(InvariantError, match="differs"):
        assert_run_invariants(
            [*events[:-1], RunFinished(sequence=events[-1].sequence, result=other)], result
        )
    invented = msgspec.structs.replace(
        result,
        messages=(
            *result.messages[:2],
            msgspec.structs.replace(result.messages[2], content="invented"),
            *result.messages[3:],
        ),
    )
    with pytest.raises(InvariantError, match=r"differs from its tool\.finished"):
        assert_run_invariants(
            [*events[:-1], RunFinished(sequence=events[-1].sequence, result=invented)], invented
        )


async def recorded_run():
    run = core_run(ScriptedModel(two_steps()))
    events = []
    async with run:
        async for event in run:
            events.append(event)
    return events, run.result


def with_result(events, result):
    """``events`` with the final event carrying ``result``."""
    return [*events[:-1], RunFinished(sequence=events[-1].sequence, result=result)], result


def renumbered(events):
    return [msgspec.structs.replace(e, sequence=i) for i, e in enumerate(events)]


async def test_the_checker_catches_each_kind_of_broken_run():
    from trio_agent import AssistantMessage, TextBlock, ToolResultMessage, ToolStarted

    events, result = await recorded_run()
    messages = result.messages  # user, assistant(call), result, assistant(text)
    cases = {
        "start at sequence 0": (
            [msgspec.structs.replace(e, sequence=e.sequence + 7) for e in events],
            result,
        ),
        "neither announced nor accepted": with_result(
            events,
            msgspec.structs.replace(
                result,
                messages=(*messages, ToolResultMessage("tool-result-x", "x", "add", "made up")),
            ),
        ),
        "not what any step streamed": with_result(
            events,
            msgspec.structs.replace(
                result,
                messages=(*messages[:3], AssistantMessage(messages[3].id, (TextBlock("three"),))),
            ),
        ),
        "started twice": (renumbered([*events[:3], events[2], *events[3:]]), result),
        "never accepted": with_result(
            events,
            msgspec.structs.replace(result, messages=(*messages, UserMessage("sneaked-in", "hi"))),
        ),
    }
    for expected, (bad_events, bad_result) in cases.items():
        with pytest.raises(InvariantError, match=expected):
            assert_run_invariants(bad_events, bad_result)
    # an assistant message whose chunks were never streamed
    no_chunks = renumbered(
        [e for e in events if not (e.type == "model.chunk" and e.request_id == "request-002")]
    )
    with pytest.raises(InvariantError, match="not what any step streamed"):
        assert_run_invariants(no_chunks, result)
    # a tool.finished that carries another call's result
    other = ToolStarted(sequence=0, call=call("add", "zz", {}))
    mismatched = [
        msgspec.structs.replace(e, call=other.call) if e.type == "tool.finished" else e
        for e in events
    ]
    with pytest.raises(InvariantError, match="another call's result"):
        assert_run_invariants(mismatched, result)


async def test_the_checker_accepts_a_turn_whose_history_was_compacted():
    from trio_agent import AssistantMessage, TextBlock

    async def shorten(messages):
        return (UserMessage("summary", "earlier"), messages[-1])

    history = [UserMessage("u0", "x" * 400), AssistantMessage("a0", (TextBlock("y" * 400),))]
    agent = Agent(
        model=ScriptedModel([scripted_response("r1", "ok")]),
        messages=history,
        context_window=200,
        reserve_output_tokens=10,
        compact=shorten,
    )
    events = []
    async with agent.turn(UserMessage("u1", "go")) as run:
        async for event in run:
            events.append(event)
    assert any(e.type == "context.compacted" for e in events)
    assert_run_invariants(events, run.result)
