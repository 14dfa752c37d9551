"""Regression tests for the session layer, each named after the bug it pins."""

from __future__ import annotations

import pytest
import trio
from helpers import add, call

from trio_agent import (
    Agent,
    AssistantMessage,
    AttemptFailed,
    ContextOverflowError,
    RetryPolicy,
    TextBlock,
    ToolRegistry,
    TranscriptError,
    TransientModelError,
    TurnCancelled,
    TurnCompleted,
    TurnFailed,
    UserMessage,
    tool,
    validate_transcript,
)
from trio_agent.testing import ScriptedModel, scripted_response


def u(id: str, text: str = "hi") -> UserMessage:
    return UserMessage(id, text)


def agent_with(script, **options):
    model = ScriptedModel(script)
    options.setdefault("tools", ToolRegistry([add]))
    return Agent(model=model, **options), model


async def test_final_text_survives_compaction_of_the_transcript():
    async def summarize(messages):
        return (u("summary", "earlier"), messages[-1])

    history = []
    for i in range(3):
        history += [u(f"u{i}"), AssistantMessage(f"a{i}", (TextBlock("old"),))]
    agent, _ = agent_with(
        [scripted_response("r1", "fresh answer")],
        messages=history,
        context_window=1000,
        reserve_output_tokens=400,
        count_tokens=lambda request: 100 * len(request.messages),
        compact=summarize,
    )
    result = await agent.prompt(u("u9"))
    assert result.end == TurnCompleted() and result.final_text == "fresh answer"


async def test_the_result_cap_applies_when_after_tool_call_raises():
    @tool
    async def dump() -> str:
        return "x" * 50_000

    async def broken(call, result):
        raise ValueError("hook bug")

    agent, _ = agent_with(
        [scripted_response("r1", [call("dump", "c1")])],
        tools=ToolRegistry([dump]),
        after_tool_call=broken,
        max_tool_result_chars=1000,
    )
    result = await agent.prompt(u("u1"))
    assert result.end.code == "HOOK_ERROR"
    assert len(result.messages[-1].content) <= 1000


async def test_follow_up_from_another_task_continues_the_turn():
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
        await trio.sleep(0.01)
        agent.follow_up(u("f1", "more"))
        release.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow_up_then_release)
        result = await agent.prompt(u("u1"))
    assert result.steps == 3 and result.final_text == "second"
    assert [m.id for m in result.messages][-2:] == ["f1", "message-r3"]


async def test_grouped_transient_errors_are_retried(autojump_clock):
    group = ExceptionGroup("from a nursery", [TransientModelError("429", retry_after=2.0)])
    agent, model = agent_with([group, scripted_response("ok", "x")], retry=RetryPolicy(jitter=0))
    events = []
    async with agent.turn(u("u1")) as run:
        async for event in run:
            events.append(event)
    assert run.result.end == TurnCompleted()
    assert [e.retry_in for e in events if isinstance(e, AttemptFailed)] == [2.0]


async def test_grouped_context_overflow_is_reported_as_such():
    group = ExceptionGroup("from a nursery", [ContextOverflowError("too long")])
    agent, model = agent_with([group, scripted_response("ok", "x")])
    result = await agent.prompt(u("u1"))
    assert result.end.code == "CONTEXT_OVERFLOW" and model.call_count == 1


@pytest.mark.parametrize("how", ["run.cancel() before start", "outer cancel at once"])
async def test_a_turn_cancelled_before_it_starts_keeps_its_prompt_and_steering(how):
    agent, model = agent_with([scripted_response("r1", "x")])
    agent.steer(u("s1", "steer"))
    run = agent.turn(u("p1", "prompt"))
    events = []
    if how == "run.cancel() before start":
        run.cancel()
        async with run:
            async for event in run:
                events.append(event)
    else:
        with trio.move_on_after(0):
            async with run:
                async for event in run:
                    events.append(event)
    assert run.result.end == TurnCancelled()
    kept = [m.id for m in agent.messages] + [m.id for m in agent.queued_steering]
    assert sorted(kept) == ["p1", "s1"]
    assert model.call_count == 0


async def test_input_ids_are_reserved_when_queued():
    agent, _ = agent_with([scripted_response("r1", "x")])
    agent.turn(u("p1"))  # created, not yet run: its id is taken
    with pytest.raises(TranscriptError, match="queued"):
        agent.steer(u("p1"))
    with pytest.raises(TranscriptError, match="prefix"):
        agent.steer(u("tool-result-c1"))
    with pytest.raises(TranscriptError, match="prefix"):
        agent.follow_up(u("message-r1"))
    agent.steer(u("s1"))
    agent.clear_queued()
    agent.steer(u("s1"))  # cleared ids can be queued again


async def test_clearing_the_queue_while_a_hook_awaits_cannot_make_two_answers_in_a_row():
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
        await trio.sleep(0.01)
        agent.clear_queued()
        cleared.set()

    agent.steer(u("s0", "start"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(clear_soon)
        result = await agent.prompt()
    assert result.end == TurnCompleted() and model.call_count == 1
    assert [m.id for m in agent.messages] == ["s0", "message-r1"]
    validate_transcript(agent.messages)


async def test_an_agent_can_continue_request_and_event_numbering():
    agent, model = agent_with(
        [scripted_response("r1", "x")], request_sequence_start=40, sequence_start=500
    )
    events = []
    async with agent.turn(u("u1")) as run:
        async for event in run:
            events.append(event)
    assert model.requests[0].id == "request-040"
    assert events[0].sequence == 500


async def test_an_internal_error_still_ends_the_turn_visibly(monkeypatch):
    import trio_agent.session._turn_run as _turn_run

    async def broken_run_turn(*args, **kwargs):
        raise RuntimeError("engine bug")

    monkeypatch.setattr(_turn_run, "run_turn", broken_run_turn)  # where TurnRun finds it
    agent, _ = agent_with([scripted_response("r1", "x")])
    events = []
    with pytest.raises(RuntimeError, match="engine bug"):
        async with agent.turn(u("u1")) as run:
            async for event in run:
                events.append(event)
    assert run.result.end == TurnFailed(code="INTERNAL_ERROR", detail="RuntimeError: engine bug")
    assert events[-1].type == "turn.finished"


async def test_count_tokens_that_raises_is_a_hook_error():
    def broken(request):
        raise ValueError("no tokenizer")

    agent, _ = agent_with([], context_window=1000, count_tokens=broken)
    result = await agent.prompt(u("u1"))
    assert result.end.code == "HOOK_ERROR" and "count_tokens" in result.end.detail


async def test_regression_delivered_input_ids_are_not_kept_reserved_forever():
    # Review finding: every prompt, steer and follow-up id stayed in the reserved
    # set after it was delivered; the transcript already refuses a reused id.
    from trio_agent import TranscriptError, UserMessage
    from trio_agent.testing import ScriptedModel, scripted_response

    agent = Agent(model=ScriptedModel([scripted_response(f"r{i}", "ok") for i in range(4)]))
    agent.follow_up(UserMessage("f1", "later"))
    for i in range(3):
        await agent.prompt(UserMessage(f"u{i}", "go"))
    assert agent._state.inbox.reserved == {}
    with pytest.raises(TranscriptError, match="u1"):
        agent.steer(UserMessage("u1", "again"))


async def test_regression_resume_refuses_a_bad_fsync_before_opening_anything(tmp_path):
    # Review finding: resume opened (and could truncate) the ledger file before
    # the policy was checked, leaking the descriptor.
    import os

    from trio_agent import JsonlStore
    from trio_agent.testing import ScriptedModel, scripted_response

    store = JsonlStore(tmp_path)
    agent = Agent(model=ScriptedModel([scripted_response("r1", "ok")]), store=store, session_id="s")
    await agent.prompt("go")
    await agent.aclose()
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(ValueError, match="fsync"):
        await Agent.resume(store, "s", model=ScriptedModel([]), fsync="sometimes")
    assert len(os.listdir("/proc/self/fd")) == before
