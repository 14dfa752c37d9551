"""``ReplayModel``: a recorded session replayed offline (issue 7), the request and
message that diverge named; string prompts matched by their content, as their ids
are random (issue 17 item 7)."""

from __future__ import annotations

import pytest
from helpers import add, call
from two_steps import two_steps

from trio_agent import Agent, JsonlStore, ModelRequest, RetryPolicy, ToolRegistry, UserMessage, tool
from trio_agent.testing import (
    CutStream,
    FaultyModel,
    ReplayDivergenceError,
    ReplayModel,
    ScriptedModel,
    scripted_response,
)


async def test_a_recorded_session_replays_offline(tmp_path, autojump_clock):
    store = JsonlStore(tmp_path)
    live_model = FaultyModel(
        ScriptedModel([*two_steps()[:1], *two_steps()]), [CutStream(call=2, after=1)]
    )
    agent = Agent(
        model=live_model,
        tools=ToolRegistry([add]),
        store=store,
        session_id="rec",
        retry=RetryPolicy(jitter=0),
    )
    recorded = await agent.prompt(UserMessage("u1", "go"))
    await agent.aclose()

    replay = await ReplayModel.from_store(store, "rec")
    again = Agent(model=replay, tools=ToolRegistry([add]), retry=RetryPolicy(jitter=0))
    replayed = await again.prompt(UserMessage("u1", "go"))
    assert replayed.messages == recorded.messages
    assert replayed.end == recorded.end and replay.remaining == 0


async def test_replay_names_the_request_and_message_that_diverge(tmp_path):
    store = JsonlStore(tmp_path)
    agent = Agent(
        model=ScriptedModel(two_steps()), tools=ToolRegistry([add]), store=store, session_id="rec"
    )
    await agent.prompt(UserMessage("u1", "go"))
    await agent.aclose()
    replay = await ReplayModel.from_store(store, "rec")
    other = Agent(model=replay, tools=ToolRegistry([add]))
    result = await other.prompt(UserMessage("u1", "a different question"))
    assert result.end.code == "MODEL_ERROR"
    assert "request-001 diverges from the recording: message 0 (u1) differs at character" in (
        result.end.detail
    )
    assert "content='a different question'" in result.end.detail
    # asking past the recording is a divergence too
    full = await ReplayModel.from_store(store, "rec")
    same = Agent(model=full, tools=ToolRegistry([add]))
    await same.prompt(UserMessage("u1", "go"))
    assert full.remaining == 0
    with pytest.raises(ReplayDivergenceError, match="only 2 requests"):
        full.stream(ModelRequest(id="request-003", messages=same.messages, tools=()))


async def test_replay_with_transform_context_usage_and_a_changed_system(tmp_path):
    from trio_agent import Usage

    async def last_two(messages):
        return messages[-2:]

    usage = Usage(input_tokens=700, output_tokens=10)
    script = [
        scripted_response(f"r{i}", [call("add", f"c{i}", {"left": i, "right": 1})], usage=usage)
        for i in range(4)
    ]
    store = JsonlStore(tmp_path)
    options = dict(
        tools=ToolRegistry([add]),
        transform_context=last_two,
        max_turn_tokens=1500,
        system="be exact",
    )
    live = Agent(model=ScriptedModel(script), store=store, session_id="rec", **options)
    recorded = await live.prompt(UserMessage("u1", "go"))
    await live.aclose()
    assert recorded.end.reason == "token_budget"

    replay = await ReplayModel.from_store(store, "rec", transform_context=last_two)
    replayed = await Agent(model=replay, **options).prompt(UserMessage("u1", "go"))
    assert replayed.end == recorded.end and replayed.messages == recorded.messages
    assert replayed.usage == recorded.usage

    changed = await ReplayModel.from_store(store, "rec", transform_context=last_two)
    other = await Agent(model=changed, **{**options, "system": "be brief"}).prompt(
        UserMessage("u1", "go")
    )
    assert "system prompt differs" in other.end.detail


async def test_a_step_that_failed_in_its_tools_replays(tmp_path):
    from trio_agent import FatalToolError

    @tool
    async def fatal() -> str:
        raise FatalToolError("gone")

    store = JsonlStore(tmp_path)
    live = Agent(
        model=ScriptedModel([scripted_response("r1", [call("fatal", "c1")])]),
        tools=ToolRegistry([fatal]),
        store=store,
        session_id="rec",
    )
    recorded = await live.prompt(UserMessage("u1", "go"))
    await live.aclose()
    replay = await ReplayModel.from_store(store, "rec")
    replayed = await Agent(model=replay, tools=ToolRegistry([fatal])).prompt(
        UserMessage("u1", "go")
    )
    assert replayed.end == recorded.end and replayed.end.code == "TOOL_FATAL"


async def record(tmp_path) -> list:  # type: ignore[type-arg]
    store = JsonlStore(tmp_path)
    model = ScriptedModel([scripted_response("r1", "hi there"), scripted_response("r2", "bye")])
    async with Agent(model=model, store=store, session_id="s1") as agent:
        await agent.prompt("hello")
        await agent.prompt("goodbye")
    return list((await store.load("s1")).records)


async def test_a_session_recorded_with_string_prompts_replays(tmp_path):
    # Before: it diverged at message 0 (the prompt's random id differed).
    """Issue 17 item 7: a session recorded with string prompts diverged at message 0 on replay (the
    prompt's id is random); it replays, matched by content."""
    records = await record(tmp_path)
    async with Agent(model=ReplayModel(records)) as agent:
        first = await agent.prompt("hello")
        second = await agent.prompt("goodbye")
    assert first.final_text == "hi there" and second.final_text == "bye"


async def test_a_different_prompt_still_diverges(tmp_path):
    """Issue 17 item 7: matching string prompts by content still tells a different prompt apart."""
    records = await record(tmp_path)
    async with Agent(model=ReplayModel(records)) as agent:
        result = await agent.prompt("hello?")
    assert result.end.reason == "failed"
    assert "diverges from the recording: message 0" in str(result.end)


def test_a_recorded_id_that_a_person_chose_still_counts():
    """Issue 17 item 7: only generated ids are ignored when matching; an id a person chose must
    match."""
    from trio_agent.messages import UserMessage
    from trio_agent.testing._replay import _same

    made_a, made_b = UserMessage("user-0123456789ab", "hi"), UserMessage("user-ba9876543210", "hi")
    assert _same(made_a, made_b)
    assert not _same(UserMessage("u1", "hi"), UserMessage("u2", "hi"))  # chosen ids must match
    assert not _same(made_a, UserMessage("user-ba9876543210", "ho"))
    assert ReplayDivergenceError is not None
