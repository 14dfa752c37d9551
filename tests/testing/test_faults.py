"""``FaultyModel`` and its faults (issue 7): each fault's effect on the core loop and
on a session, seeds, misuse; faults compare and hash by value, and which of them use
up a script entry (issue 17, item 9)."""

from __future__ import annotations

import contextlib

import pytest
import trio
import trio.lowlevel
from helpers import add
from two_steps import core_run, two_steps

from trio_agent import Agent, RetryPolicy, ToolRegistry, UserMessage
from trio_agent.model import ModelError, ModelRequest, ModelRequestError, TransientModelError
from trio_agent.testing import (
    CorruptChunk,
    CutStream,
    DisagreeingResponse,
    FaultyModel,
    HangAt,
    RaiseOnCall,
    ScriptedModel,
    scripted_response,
)


@pytest.mark.parametrize(
    ("fault", "code"),
    [
        (RaiseOnCall(call=1), "MODEL_ERROR"),
        (CutStream(call=2, after=1), "MODEL_ERROR"),
        (CorruptChunk(call=2, chunk=0), "MODEL_PROTOCOL_ERROR"),
        (DisagreeingResponse(call=1), "MODEL_PROTOCOL_ERROR"),
    ],
)
async def test_each_fault_has_its_effect_on_the_core_loop(fault, code):
    model = FaultyModel(ScriptedModel(two_steps()), [fault])
    result = await core_run(model).wait()
    assert result.status == "failed" and result.code == code
    assert model.injected == [fault]


async def test_a_hang_is_a_place_to_cancel(autojump_clock):
    model = FaultyModel(ScriptedModel(two_steps()), [HangAt(call=2, chunk=1)])
    with trio.move_on_after(10):
        await core_run(model).wait()
    assert trio.current_time() == pytest.approx(10)


async def test_transient_faults_are_retried_by_a_session(autojump_clock):
    model = FaultyModel(
        ScriptedModel([two_steps()[0], two_steps()[0], *two_steps()[1:], two_steps()[1]]),
        [RaiseOnCall(call=1), CutStream(call=3, after=1)],
    )
    agent = Agent(model=model, tools=ToolRegistry([add]), retry=RetryPolicy(jitter=0))
    result = await agent.prompt(UserMessage("u1", "go"))
    assert result.end.reason == "completed" and result.final_text == "three, as computed"
    assert [f.name for f in model.injected] == ["raise", "cut"]


async def test_seeded_faults_are_reproducible():
    async def injected(seed):
        model = FaultyModel(ScriptedModel(two_steps() * 20), seed=seed, rate=0.5)
        agent = Agent(model=model, tools=ToolRegistry([add]), retry=RetryPolicy(attempts=1))
        for n in range(6):
            await agent.prompt(UserMessage(f"u{n}", "go"))
        return [repr(f) for f in model.injected]  # exceptions compare by identity

    assert await injected(7) == await injected(7)
    assert await injected(7) != await injected(8)
    names = {f.split("(")[0] for seed in range(10) for f in await injected(seed)}
    assert names == {"RaiseOnCall", "CutStream", "CorruptChunk", "DisagreeingResponse"}


def test_fault_misuse_is_refused():
    with pytest.raises(ValueError, match="need a seed"):
        FaultyModel(ScriptedModel([]), rate=1.0)
    with pytest.raises(ValueError, match="two faults"):
        FaultyModel(ScriptedModel([]), [RaiseOnCall(1), HangAt(1)])


async def test_a_fault_past_the_end_of_a_stream_is_not_reported_as_fired():
    model = FaultyModel(ScriptedModel(two_steps()), [CorruptChunk(call=1, chunk=5)])
    result = await core_run(model).wait()
    assert result.status == "completed" and model.injected == []


async def test_a_permanent_error_is_not_retried(autojump_clock):
    model = FaultyModel(ScriptedModel(two_steps()), [RaiseOnCall(1, ValueError("bad key"))])
    agent = Agent(model=model, tools=ToolRegistry([add]))
    result = await agent.prompt(UserMessage("u1", "go"))
    assert result.end.code == "MODEL_ERROR" and model.calls == 1


SAME = [
    (RaiseOnCall(3), RaiseOnCall(3)),
    (RaiseOnCall(1, ModelRequestError("bad")), RaiseOnCall(1, ModelRequestError("bad"))),
    (HangAt(2, chunk=1), HangAt(2, 1)),
    (CutStream(2, after=3), CutStream(2, after=3)),
    (
        CutStream(1, error=TransientModelError("x", retry_after=2.0)),
        CutStream(1, error=TransientModelError("x", retry_after=2.0)),
    ),
    (CorruptChunk(3), CorruptChunk(3, chunk=0)),
    (DisagreeingResponse(4), DisagreeingResponse(4)),
]
DIFFERENT = [
    (RaiseOnCall(3), RaiseOnCall(4)),
    (RaiseOnCall(1, ModelRequestError("bad")), RaiseOnCall(1, TransientModelError("bad"))),
    (RaiseOnCall(1, ModelRequestError("bad")), RaiseOnCall(1, ModelRequestError("worse"))),
    (
        CutStream(1, error=TransientModelError("x", retry_after=2.0)),
        CutStream(1, error=TransientModelError("x", retry_after=3.0)),
    ),
    (CutStream(1, after=1), CutStream(1, after=2)),
    (HangAt(2, chunk=1), CorruptChunk(2, chunk=1)),  # same fields, other kind
]


@pytest.mark.parametrize(("a", "b"), SAME)
def test_faults_with_the_same_values_are_equal_and_hash_alike(a, b):
    assert a == b and not a != b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1


@pytest.mark.parametrize(("a", "b"), DIFFERENT)
def test_faults_that_differ_in_any_value_are_not_equal(a, b):
    assert a != b


def agent_on(model):
    return Agent(model=model, retry=RetryPolicy(jitter=0, initial_delay=0.01))


async def test_injected_faults_can_be_asserted_by_value_after_firing(autojump_clock):
    script = [scripted_response(f"r{i}", "hi") for i in range(3)]
    model = FaultyModel(ScriptedModel(script), [RaiseOnCall(1), CutStream(2, after=0)])
    result = await agent_on(model).prompt("hi")
    assert result.end.reason == "completed"
    # their errors were raised (and keep a traceback now): still equal to fresh faults
    assert model.injected == [RaiseOnCall(1), CutStream(2, after=0)]
    assert model.injected != [RaiseOnCall(1), CutStream(2, after=1)]


async def test_a_retry_after_raise_on_call_gets_the_same_script_entry(autojump_clock):
    inner = ScriptedModel([scripted_response(f"r{i}", "hi") for i in range(3)])
    model = FaultyModel(inner, [RaiseOnCall(1)])
    result = await agent_on(model).prompt("hi")
    assert (model.calls, inner.call_count) == (2, 1)
    assert result.messages[-1].id == "message-r0"


async def test_a_retry_after_cut_stream_gets_the_next_script_entry(autojump_clock):
    inner = ScriptedModel([scripted_response(f"r{i}", "hi") for i in range(3)])
    model = FaultyModel(inner, [CutStream(1, after=1)])
    result = await agent_on(model).prompt("hi")
    assert (model.calls, inner.call_count) == (2, 2)
    assert result.messages[-1].id == "message-r1"


@pytest.mark.parametrize(
    ("fault", "used"),
    [
        (RaiseOnCall(1), 0),
        (HangAt(1, chunk=0), 1),
        (HangAt(1, chunk=5), 1),
        (CutStream(1, after=0), 1),
        (CutStream(1, after=1), 1),
        (CorruptChunk(1), 1),
        (DisagreeingResponse(1), 1),
    ],
)
async def test_which_faults_use_up_a_script_entry(fault, used, autojump_clock):
    inner = ScriptedModel([scripted_response("r0", "hello", text_chunks=2)])
    model = FaultyModel(inner, [fault])
    request = ModelRequest(id="request-001", messages=(UserMessage("u1", "hi"),), tools=())
    with trio.move_on_after(5) as hung:
        with contextlib.suppress(ModelError):
            async with model.stream(request) as stream:
                async for _ in stream:
                    pass
                await stream.response()
    assert model.injected == [fault]
    assert hung.cancelled_caught == isinstance(fault, HangAt)
    assert inner.call_count == used
