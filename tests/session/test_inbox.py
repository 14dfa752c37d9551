"""Input queued for a session (``Inbox``): steering, follow-ups from any task, reserved
ids and when they are let go; and a turn with no input, which runs the model only
when the transcript owes a reply (issue 14), answering first the calls a cut turn
left open."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from helpers import agent_with, call
from sessions import u, wait

from trio_agent import (
    Agent,
    AssistantMessage,
    FatalToolError,
    ToolCall,
    ToolRegistry,
    ToolResultMessage,
    TranscriptError,
    TurnCancelled,
    TurnCompleted,
    UserMessage,
    tool,
    validate_transcript,
)
from trio_agent.testing import ScriptedModel, scripted_response


async def test_follow_up_from_another_task_continues_the_turn():
    """A follow-up queued from another task while a tool ran did not continue the turn."""
    release = trio.Event()

    @tool
    async def wait_for_release() -> str:
        await release.wait()
        return "released"

    agent, _ = agent_with(
        [
            scripted_response("r1", [call("wait_for_release", "c1")]),
            scripted_response("r2", "first"),
            scripted_response("r3", "second"),
        ],
        tools=ToolRegistry([wait_for_release]),
    )

    async def follow_up_then_release():
        await trio.testing.wait_all_tasks_blocked()  # the tool waits for the release
        agent.follow_up(u("f1", "more"))
        release.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow_up_then_release)
        result = await agent.prompt(u("u1"))
    assert result.steps == 3 and result.final_text == "second"
    assert [m.id for m in result.messages][-2:] == ["f1", "message-r3"]


async def test_input_ids_are_reserved_when_queued():
    """Queued input did not reserve its id, so one id could be queued twice or take a prefix the
    session gives out."""
    agent, _ = agent_with([scripted_response("r1", "x")])
    pending = agent.turn(u("p1"))  # created, not yet run: its id is taken while it is held
    with pytest.raises(TranscriptError, match="queued"):
        agent.steer(u("p1"))
    with pytest.raises(TranscriptError, match="prefix"):
        agent.steer(u("tool-result-c1"))
    with pytest.raises(TranscriptError, match="prefix"):
        agent.follow_up(u("message-r1"))
    agent.steer(u("s1"))
    agent.clear_queued()
    agent.steer(u("s1"))  # cleared ids can be queued again
    del pending


async def test_clearing_the_queue_while_a_hook_awaits_cannot_make_two_answers_in_a_row():
    """Clearing the queue while a hook awaited made the turn go on to a second answer in a row with
    no input between."""
    cleared = trio.Event()

    async def policy(state):
        await cleared.wait()
        return False

    agent, model = agent_with(
        [scripted_response("r1", "answer"), scripted_response("r2", "never")],
        should_stop_turn=policy,
    )
    agent.follow_up(u("f0", "queued"))  # makes the turn 'go on' after r1

    async def clear_soon():
        await trio.testing.wait_all_tasks_blocked()  # the hook waits for the clearing
        agent.clear_queued()
        cleared.set()

    agent.steer(u("s0", "start"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(clear_soon)
        result = await agent.prompt()
    assert result.end == TurnCompleted() and model.call_count == 1
    assert [m.id for m in agent.messages] == ["s0", "message-r1"]
    validate_transcript(agent.messages)


async def test_regression_delivered_input_ids_are_not_kept_reserved_forever():
    """Every prompt, steer and follow-up id stayed reserved after it was delivered (the transcript
    already refuses a reused id)."""
    from trio_agent import TranscriptError, UserMessage
    from trio_agent.testing import scripted_response

    agent = Agent(model=ScriptedModel([scripted_response(f"r{i}", "ok") for i in range(4)]))
    agent.follow_up(UserMessage("f1", "later"))
    for i in range(3):
        await agent.prompt(UserMessage(f"u{i}", "go"))
    assert agent._state.inbox.reserved == {}
    with pytest.raises(TranscriptError, match="u1"):
        agent.steer(UserMessage("u1", "again"))


async def test_a_turn_with_no_input_runs_the_model_only_when_it_owes_a_reply():
    """Issue 14: a turn with no input runs the model only when the transcript owes a reply."""
    model = ScriptedModel([scripted_response("r1", "answer")])
    agent = Agent(model=model)
    assert not agent.awaiting_reply
    idle = await agent.prompt()
    assert idle.steps == 0 and model.call_count == 0  # nothing waiting: zero steps
    waiting = Agent(model=model, messages=[UserMessage("u1", "a question")])
    assert waiting.awaiting_reply
    result = await waiting.prompt()
    assert result.steps == 1 and result.final_text == "answer"
    assert model.requests[0].messages == (UserMessage("u1", "a question"),)
    assert not waiting.awaiting_reply
    again = await waiting.prompt()
    assert again.steps == 0 and model.call_count == 1


async def test_a_turn_cut_mid_stream_is_continued_by_a_turn_with_no_input(autojump_clock):
    """Issue 14: a turn cut mid-stream is continued by a turn with no input."""
    model = ScriptedModel(
        [
            scripted_response("r1", "half", text_chunks=2, hang_at=1),
            scripted_response("r2", "whole"),
        ]
    )
    agent = Agent(model=model)
    with trio.fail_after(100):
        cut = await agent.prompt("go", cancel_scope=trio.CancelScope(relative_deadline=1))
    assert cut.end == TurnCancelled() and agent.awaiting_reply
    run = agent.turn()
    async with run:
        async for _ in run:
            pass
    assert run.result.final_text == "whole" and not agent.awaiting_reply


async def test_calls_a_cut_turn_left_open_are_answered_then_the_model_continues(autojump_clock):
    """Issue 14: calls a cut turn left open are answered (as errors), then the model continues."""
    model = ScriptedModel(
        [scripted_response("r1", [ToolCall("c1", "wait", {})]), scripted_response("r2", "done")]
    )
    agent = Agent(model=model, tools=[wait])
    with trio.fail_after(100):
        await agent.prompt("go", cancel_scope=trio.CancelScope(relative_deadline=1))
    assert type(agent.messages[-1]) is AssistantMessage and agent.awaiting_reply
    result = await agent.prompt()
    assert result.final_text == "done"
    answered = model.requests[1].messages[-1]
    assert type(answered) is ToolResultMessage and answered.is_error


@pytest.mark.parametrize("ending", ["max_steps", "fatal"])
async def test_input_queued_in_a_turn_that_has_no_next_step_waits_for_the_next_turn(ending):
    """DESIGN 8.1: steering goes before the next step of the current turn, and a
    follow-up when the turn would end; a turn that ends on its step budget or a
    fatal tool error has neither, so both stay queued, in order, for the next turn."""

    @tool
    async def work(fail: bool) -> str:
        agent.steer(u("s1", "steer"))
        agent.follow_up(u("f1", "follow"))
        if fail:
            raise FatalToolError("disk on fire")
        return "done"

    model = ScriptedModel(
        [
            scripted_response("r1", [call("work", "c1", {"fail": ending == "fatal"})]),
            scripted_response("r2", "after the steering"),
            scripted_response("r3", "after the follow-up"),
        ]
    )
    agent = Agent(model=model, tools=ToolRegistry([work]), max_steps=1)
    first = await agent.prompt(u("u1"))
    assert first.end.reason == ("failed" if ending == "fatal" else "max_steps")
    assert model.call_count == 1
    assert "s1" not in [m.id for m in first.messages]
    assert agent.queued_steering == (u("s1", "steer"),)
    assert agent.queued_follow_ups == (u("f1", "follow"),)
    # one step a turn: the steering opens the next turn, the follow-up the one after
    second = await agent.prompt()
    assert [m.id for m in second.messages][-2:] == ["s1", "message-r2"]
    assert agent.queued_follow_ups == (u("f1", "follow"),)
    third = await agent.prompt()
    assert [m.id for m in third.messages][-2:] == ["f1", "message-r3"]
    assert agent.queued_steering == agent.queued_follow_ups == ()
