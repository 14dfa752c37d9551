"""Agent sessions (issue 3): turns, inbox, hooks, budgets, sticky length and events; a
session's counters and metadata (issue 14); and an agent after ``aclose()`` (review
14: a prompt after it ran and recorded nothing)."""

from __future__ import annotations

from types import MappingProxyType

import msgspec
import pytest
import trio
import trio.testing
from helpers import add, agent_with, call
from sessions import add_text, adding, kinds, model, u, user_texts

from trio_agent import (
    MAX_AGENT_STEPS,
    Agent,
    AssistantMessage,
    JsonlStore,
    MessageAccepted,
    ModelChunk,
    SessionEvent,
    TextBlock,
    ToolRegistry,
    ToolResultMessage,
    TranscriptError,
    TurnBlocked,
    TurnCancelled,
    TurnCompleted,
    TurnFailed,
    TurnFinished,
    TurnLength,
    TurnMaxSteps,
    TurnRepeatedFailure,
    TurnStarted,
    TurnTokenBudget,
    Usage,
    UserMessage,
    block,
    repair_transcript,
    tool,
    validate_transcript,
)
from trio_agent.testing import ScriptedModel, scripted_response


async def run_turn(agent: Agent, message=None):
    events = []
    async with agent.turn(message) as run:
        async for event in run:
            events.append(event)
    return events, run.result


def assert_session_stream(events, start: int = 0) -> None:
    assert [e.sequence for e in events] == list(range(start, start + len(events)))
    assert isinstance(events[0], TurnStarted) and isinstance(events[-1], TurnFinished)
    for event in events:
        assert (
            msgspec.json.decode(msgspec.json.encode(event, enc_hook=tuple), type=SessionEvent)
            == event
        )


async def test_the_transcript_and_request_ids_carry_over_across_turns():
    agent, model = agent_with(
        [
            scripted_response("r1", [call("add", "c1", {"left": 1, "right": 2})]),
            scripted_response("r2", "three"),
            scripted_response("r3", "nine"),
        ]
    )
    events1, first = await run_turn(agent, u("u1", "1+2?"))
    events2, second = await run_turn(agent, u("u2", "and 4+5?"))
    assert (first.turn, first.end, first.steps, first.final_text) == (
        1,
        TurnCompleted(),
        2,
        "three",
    )
    assert (second.turn, second.end, second.steps, second.final_text) == (
        2,
        TurnCompleted(),
        1,
        "nine",
    )
    assert [r.id for r in model.requests] == ["request-001", "request-002", "request-003"]
    assert model.requests[2].messages == (*first.messages, u("u2", "and 4+5?"))
    assert agent.messages == second.messages and len(second.messages) == 6
    assert_session_stream(events1)
    assert_session_stream(events2, start=len(events1))
    assert [e.type for e in events2] == [
        "turn.started",
        "message.accepted",
        "model.chunk",
        "turn.finished",
    ]


async def test_requests_keep_counting_past_64_across_turns():
    agent, model = agent_with([scripted_response(f"r{i}", str(i)) for i in range(70)])
    for i in range(70):
        await agent.prompt(f"turn {i}")
    assert model.requests[-1].id == "request-070"
    assert agent.requests == 70 and agent.turns == 70
    validate_transcript(agent.messages)


async def test_a_str_prompt_becomes_a_user_message():
    agent, model = agent_with([scripted_response("r1", "ok")])
    result = await agent.prompt("hello")
    first = result.messages[0]
    assert type(first) is UserMessage and first.content == "hello" and first.id.startswith("user-")


async def test_a_turn_with_nothing_to_do_has_zero_steps_and_no_model_call():
    agent, model = agent_with([scripted_response("r1", "never")])
    events, result = await run_turn(agent)
    assert result.end == TurnCompleted() and result.steps == 0
    assert model.call_count == 0
    assert [e.type for e in events] == ["turn.started", "turn.finished"]
    assert await agent.prompt() == msgspec.structs.replace(result, turn=2)


async def test_one_turn_at_a_time():
    agent, _ = agent_with([scripted_response("r1", "x", hang_at=0)])
    async with agent.turn("first") as run:
        await run.__anext__()
        assert agent.running
        with pytest.raises(RuntimeError, match="already running"):
            agent.turn("second")
        run.cancel()
    assert not agent.running


def gated_tool(entered: trio.Event, release: trio.Event, log: list[str]):
    @tool
    async def slow(label: str) -> str:
        """Waits to be released."""
        log.append(f"start {label}")
        entered.set()
        await release.wait()
        log.append(f"end {label}")
        return label

    return slow


async def test_steering_from_another_task_arrives_after_the_batch_and_before_the_next_request():
    entered, release, log = trio.Event(), trio.Event(), []
    calls = [call("slow", "c1", {"label": "a"}), call("slow", "c2", {"label": "b"})]
    agent, model = agent_with(
        [scripted_response("r1", calls), scripted_response("r2", "steered")],
        tools=ToolRegistry([gated_tool(entered, release, log)]),
    )

    async def steer_while_the_tool_runs():
        await entered.wait()
        agent.steer(u("s1", "use metric units"))
        release.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(steer_while_the_tool_runs)
        result = await agent.prompt(u("u1", "go"))
    assert log == ["start a", "end a", "start b", "end b"]  # the batch finished first
    second = model.requests[1].messages
    assert [m.id for m in second] == ["u1", "message-r1", "tool-result-c1", "tool-result-c2", "s1"]
    assert result.end == TurnCompleted() and result.steps == 2
    assert agent.queued_steering == ()


async def test_steering_when_the_model_stops_continues_the_turn():
    agent, model = agent_with(
        [scripted_response("r1", "first answer", text_chunks=2), scripted_response("r2", "revised")]
    )
    async with agent.turn(u("u1")) as run:
        async for event in run:
            if isinstance(event, ModelChunk) and event.request_id == "request-001":
                if not agent.queued_steering and event.chunk.text == "first ":
                    agent.steer(u("s1", "actually, be brief"))
    assert run.result.steps == 2 and run.result.final_text == "revised"
    assert [m.id for m in model.requests[1].messages] == ["u1", "message-r1", "s1"]


async def test_steering_is_delivered_before_follow_ups_when_the_model_stops():
    # DESIGN 8.1: steering goes before the next step; a follow-up only when the
    # turn would otherwise end.
    agent, model = agent_with(
        [
            scripted_response("r1", "first answer", text_chunks=2),
            scripted_response("r2", "steered"),
            scripted_response("r3", "followed up"),
        ]
    )
    async with agent.turn(u("u1")) as run:
        async for event in run:
            if isinstance(event, ModelChunk) and event.request_id == "request-001":
                if not agent.queued_steering and event.chunk.text == "first ":
                    agent.follow_up(u("f1", "and then"))
                    agent.steer(u("s1", "be brief"))
    assert run.result.steps == 3
    assert [m.id for m in model.requests[1].messages] == ["u1", "message-r1", "s1"]
    assert [m.id for m in model.requests[2].messages][-2:] == ["message-r2", "f1"]


async def test_follow_up_continues_the_same_turn_when_it_would_end():
    agent, model = agent_with(
        [scripted_response("r1", "part one", text_chunks=2), scripted_response("r2", "part two")]
    )
    events = []
    async with agent.turn(u("u1")) as run:
        async for event in run:
            events.append(event)
            if event.type == "model.chunk" and event.request_id == "request-001":
                if not agent.queued_follow_ups:
                    agent.follow_up(u("f1", "and then?"))
    result = run.result
    assert result.end == TurnCompleted() and result.steps == 2 and result.turn == 1
    assert [m.id for m in model.requests[1].messages] == ["u1", "message-r1", "f1"]
    assert result.final_text == "part two"
    assert [e.type for e in events].count("turn.started") == 1


async def test_follow_ups_wait_while_tools_keep_the_turn_going():
    agent, model = agent_with(
        [
            scripted_response("r1", [call("add", "c1", {"left": 1, "right": 1})]),
            scripted_response("r2", "done"),
            scripted_response("r3", "followed up"),
        ]
    )
    agent.follow_up(u("f1", "one more thing"))
    result = await agent.prompt(u("u1"))
    # the follow-up queued before the turn is its input only if nothing else is:
    # here the prompt is, so it waits until the model stops, then continues the turn
    assert [m.id for m in model.requests[2].messages][-2:] == ["message-r2", "f1"]
    assert result.steps == 3 and result.final_text == "followed up"


async def test_queued_input_starts_a_turn_without_a_prompt():
    agent, model = agent_with([scripted_response("r1", "answer")])
    agent.steer(u("s1", "queued before any turn"))
    result = await agent.prompt()
    assert [m.id for m in model.requests[0].messages] == ["s1"]
    assert result.steps == 1


async def test_messages_queued_when_a_turn_is_cancelled_stay_queued():
    entered, release, log = trio.Event(), trio.Event(), []
    agent, model = agent_with(
        [scripted_response("r1", [call("slow", "c1", {"label": "a"})])],
        tools=ToolRegistry([gated_tool(entered, release, log)]),
    )
    async with agent.turn(u("u1")) as run:
        async for event in run:
            if event.type == "tool.started":
                await entered.wait()
                agent.steer(u("s1", "steer"))
                agent.follow_up(u("f1", "follow"))
                run.cancel()
    assert run.result.end == TurnCancelled()
    assert agent.queued_steering == (u("s1", "steer"),)
    assert agent.queued_follow_ups == (u("f1", "follow"),)
    assert agent.clear_queued() == ((u("s1", "steer"),), (u("f1", "follow"),))
    assert agent.queued_steering == agent.queued_follow_ups == ()


async def test_a_cancelled_turns_dangling_call_is_answered_explicitly_next_turn():
    entered, release, log = trio.Event(), trio.Event(), []
    agent, model = agent_with(
        [
            scripted_response("r1", [call("slow", "c1", {"label": "a"})]),
            scripted_response("r2", "ok"),
        ],
        tools=ToolRegistry([gated_tool(entered, release, log)]),
    )
    async with agent.turn(u("u1")) as run:
        async for event in run:
            if event.type == "tool.started":
                await entered.wait()
                run.cancel()
    assert run.result.messages[-1].id == "message-r1"  # no invented result
    events, result = await run_turn(agent, u("u2", "continue"))
    repaired = result.messages[2]
    assert repaired == ToolResultMessage(
        "tool-result-c1", "c1", "slow", "interrupted: no result was recorded", True
    )
    accepted = [e.message for e in events if isinstance(e, MessageAccepted)]
    assert accepted == [repaired, u("u2", "continue")]  # never done silently
    validate_transcript(result.messages)


@pytest.mark.parametrize(
    "bad", [42, None, AssistantMessage("a", ()), UserMessage("x", "\ud800"), UserMessage(1, "t")]
)
async def test_bad_inbox_messages_are_refused_at_once(bad):
    agent, _ = agent_with([])
    with pytest.raises((TypeError, TranscriptError)):
        agent.steer(bad)
    with pytest.raises((TypeError, TranscriptError)):
        agent.follow_up(bad)


async def test_duplicate_ids_are_refused_at_once():
    agent, _ = agent_with([scripted_response("r1", "ok")])
    await agent.prompt(u("u1"))
    with pytest.raises(TranscriptError, match="'u1'"):
        agent.steer(u("u1"))
    agent.steer(u("s1"))
    with pytest.raises(TranscriptError, match="queued"):
        agent.follow_up(u("s1"))


async def test_transform_context_changes_the_request_not_the_transcript():
    seen = []

    async def keep_last_two(messages):
        seen.append(len(messages))
        return messages[-2:] if len(messages) > 2 else messages

    agent, model = agent_with(
        [scripted_response("r1", "a"), scripted_response("r2", "b")],
        transform_context=keep_last_two,
    )
    await agent.prompt(u("u1"))
    await agent.prompt(u("u2"))
    assert [m.id for m in model.requests[1].messages] == ["message-r1", "u2"]
    assert [m.id for m in agent.messages] == ["u1", "message-r1", "u2", "message-r2"]
    assert seen == [1, 3]


async def test_before_tool_call_can_block_a_call():
    ran = []

    @tool
    async def delete(path: str) -> str:
        ran.append(path)
        return "deleted"

    async def guard(call):
        return block("deleting is not allowed") if call.name == "delete" else None

    agent, model = agent_with(
        [
            scripted_response(
                "r1",
                [call("delete", "c1", {"path": "/"}), call("add", "c2", {"left": 1, "right": 1})],
            ),
            scripted_response("r2", "ok"),
        ],
        tools=ToolRegistry([delete, add]),
        before_tool_call=guard,
    )
    events, result = await run_turn(agent, u("u1"))
    assert ran == []
    blocked, added = result.messages[2], result.messages[3]
    assert blocked.is_error
    assert blocked.content == 'Tool call "delete" was blocked: deleting is not allowed'
    assert added.content == '{"sum":2}'
    assert [e.type for e in events].count("tool.finished") == 2


async def test_after_tool_call_replaces_the_result():
    async def redact(call, result):
        return msgspec.structs.replace(result, content="[redacted]")

    agent, _ = agent_with(
        [
            scripted_response("r1", [call("add", "c1", {"left": 1, "right": 1})]),
            scripted_response("r2", "ok"),
        ],
        after_tool_call=redact,
    )
    result = await agent.prompt(u("u1"))
    assert result.messages[2].content == "[redacted]"


async def test_should_stop_turn_ends_the_turn_as_blocked_after_a_step():
    states = []

    async def stop_after_first(state):
        states.append(state.steps)
        return True

    agent, model = agent_with(
        [
            scripted_response("r1", [call("add", "c1", {"left": 1, "right": 1})]),
            scripted_response("r2", "never"),
        ],
        should_stop_turn=stop_after_first,
    )
    result = await agent.prompt(u("u1"))
    assert result.end == TurnBlocked(detail="should_stop_turn returned True")
    assert states == [1] and model.call_count == 1
    validate_transcript(result.messages)  # the batch completed


def raising(name):
    async def hook(*args):
        raise ValueError(f"{name} is broken")

    return hook


@pytest.mark.parametrize(
    "hook", ["transform_context", "before_tool_call", "after_tool_call", "should_stop_turn"]
)
async def test_a_hook_that_raises_fails_the_turn_and_never_corrupts_the_transcript(hook):
    agent, model = agent_with(
        [
            scripted_response("r1", [call("add", "c1", {"left": 1, "right": 1})]),
            scripted_response("r2", "no"),
            scripted_response("r3", "next turn"),
        ],
        **{hook: raising(hook)},
    )
    events, result = await run_turn(agent, u("u1"))
    assert result.end == TurnFailed(
        code="HOOK_ERROR", detail=f"hook {hook} raised ValueError: {hook} is broken"
    )
    assert_session_stream(events)
    validate_transcript(repair_transcript(result.messages))
    if hook == "after_tool_call":  # the tool ran: its own result is kept
        assert result.messages[2].content == '{"sum":2}'


@pytest.mark.parametrize(
    ("hook", "returned"),
    [
        ("before_tool_call", "not a block"),
        ("after_tool_call", "not a result"),
        ("transform_context", [42]),
    ],
)
async def test_a_hook_returning_the_wrong_thing_fails_the_turn(hook, returned):
    async def bad(*args):
        return returned

    agent, _ = agent_with(
        [
            scripted_response("r1", [call("add", "c1", {"left": 1, "right": 1})]),
            scripted_response("r2", "no"),
        ],
        **{hook: bad},
    )
    result = await agent.prompt(u("u1"))
    assert result.end.reason == "failed" and result.end.code == "HOOK_ERROR"
    assert hook in result.end.detail


def _stopping_with(returned: object):
    """An agent whose ``should_stop_turn`` returns ``returned``, after a tool step."""

    async def stop(state):
        return returned

    return agent_with(
        [
            scripted_response("r1", [call("add", "c1", {"left": 1, "right": 1})]),
            scripted_response("r2", "two"),
        ],
        should_stop_turn=stop,
    )


@pytest.mark.parametrize("returned", ["no", 1, [False]])
async def test_should_stop_turn_returning_what_is_not_a_bool_fails_the_turn(returned):
    """``should_stop_turn`` returning a truthy value that is not a bool ("no", a
    coroutine it forgot to await) ended the turn as blocked, saying the hook
    "returned True"."""
    agent, model = _stopping_with(returned)
    result = await agent.prompt(u("u1"))
    assert result.end.reason == "failed" and result.end.code == "HOOK_ERROR"
    assert "should_stop_turn must return a bool" in result.end.detail
    assert model.call_count == 1
    validate_transcript(result.messages)  # the batch completed


async def test_should_stop_turn_returning_none_goes_on():
    agent, _ = _stopping_with(None)
    result = await agent.prompt(u("u1"))
    assert result.end == TurnCompleted() and result.final_text == "two"


async def test_per_turn_step_budget():
    script = [
        scripted_response(f"r{i}", [call("add", f"c{i}", {"left": i, "right": 0})])
        for i in range(5)
    ]
    agent, model = agent_with([*script, scripted_response("last", "done")], max_steps=3)
    agent.steer(u("s1", "queued"))  # taken as the first turn's input
    result = await agent.prompt(u("u1"))
    assert result.end == TurnMaxSteps(max_steps=3) and result.steps == 3
    assert model.call_count == 3
    second = await agent.prompt(u("u2"))  # the budget is per turn
    assert second.steps == 3


async def test_token_budget_ends_the_turn_with_its_own_reason():
    usage = Usage(input_tokens=600, output_tokens=100)
    script = [
        scripted_response(f"r{i}", [call("add", f"c{i}", {"left": 1, "right": 1})], usage=usage)
        for i in range(4)
    ]
    agent, model = agent_with(script, max_turn_tokens=1500)
    result = await agent.prompt(u("u1"))
    assert result.end == TurnTokenBudget(used=1400 + 700, limit=1500)
    assert result.steps == 3 and result.usage == Usage(input_tokens=1800, output_tokens=300)


async def test_breaker_stops_after_k_identical_failing_calls():
    @tool
    async def flaky(path: str) -> str:
        raise ValueError("no such file")

    script = [
        scripted_response(f"r{i}", [call("flaky", f"c{i}", {"path": "/missing"})])
        for i in range(10)
    ]
    agent, model = agent_with(script, tools=ToolRegistry([flaky]), max_repeated_failures=3)
    result = await agent.prompt(u("u1"))
    assert result.end == TurnRepeatedFailure(tool_name="flaky", count=3)
    assert model.call_count == 3


async def test_breaker_resets_on_different_arguments_or_success():
    @tool
    async def flaky(path: str) -> str:
        if path == "/ok":
            return "fine"
        raise ValueError("no such file")

    paths = ["/a", "/a", "/b", "/b", "/ok", "/b", "/b"]
    script = [
        scripted_response(f"r{i}", [call("flaky", f"c{i}", {"path": p})])
        for i, p in enumerate(paths)
    ] + [scripted_response("end", "gave up")]
    agent, model = agent_with(script, tools=ToolRegistry([flaky]), max_repeated_failures=3)
    result = await agent.prompt(u("u1"))
    assert result.end == TurnCompleted() and model.call_count == len(paths) + 1


async def test_sticky_length_a_later_normal_step_cannot_report_completed():
    agent, model = agent_with(
        [scripted_response("r1", "cut off", "length"), scripted_response("r2", "fine now")]
    )
    agent.follow_up(u("f1", "go on"))
    agent.steer(u("s0", "start"))
    result = await agent.prompt()
    # s0 starts the turn; r1 hits length; f1 continues it; r2 stops normally
    assert result.steps == 2 and result.final_text == "fine now"
    assert result.end == TurnLength()


async def test_length_alone_ends_the_turn_as_length():
    agent, _ = agent_with([scripted_response("r1", "cut", "length")])
    assert (await agent.prompt(u("u1"))).end == TurnLength()


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"model": object()}, TypeError),
        ({"tools": [add, "x"]}, TypeError),
        ({"tools": add}, TypeError),
        ({"system": 3}, TypeError),
        ({"messages": "x"}, TypeError),
        ({"max_steps": 0}, ValueError),
        ({"max_steps": True}, TypeError),  # as run_agent_loop: bool is not an int here
        ({"max_steps": 65}, ValueError),
        ({"seed": [1, 2]}, TypeError),  # refused at once, not at the first retry
        ({"max_turn_tokens": 0}, ValueError),
        ({"context_window": -5}, ValueError),
        ({"max_tool_result_chars": 1.5}, ValueError),
        ({"retry": 3}, TypeError),
        ({"before_tool_call": "nope"}, TypeError),
        ({"count_tokens": None}, TypeError),
        ({"messages": [UserMessage("a", "x"), UserMessage("a", "y")]}, TranscriptError),
    ],
)
def test_bad_agent_options_raise(options, error):
    base = {"model": ScriptedModel([])}
    base.update(options)
    with pytest.raises(error):
        Agent(**base)


async def test_an_agent_resumes_from_given_messages():
    history = [u("u0", "earlier"), AssistantMessage("a0", (TextBlock("earlier answer"),))]
    agent, model = agent_with([scripted_response("r1", "ok")], messages=history)
    await agent.prompt(u("u1"))
    assert model.requests[0].messages == (*history, u("u1"))


def test_a_turn_budget_has_the_ceiling_of_a_run():
    # issue 14: the Agent and run_agent_loop agree on what a step budget may be (a
    # turn's budget is per turn; the session's request numbers run on across turns).
    Agent(model=ScriptedModel([]), max_steps=64)
    with pytest.raises(ValueError, match=r"max_steps must be in 1..64, got 129"):
        Agent(model=ScriptedModel([]), max_steps=129)
    with pytest.raises(ValueError, match=r"max_steps must be in 1..64, got 0"):
        Agent(model=ScriptedModel([]), max_steps=0)


def test_agents_with_the_same_options_share_one_policy():
    first = Agent(model=ScriptedModel([]), max_steps=7)
    second = Agent(model=ScriptedModel([]), max_steps=7)
    other = Agent(model=ScriptedModel([]), max_steps=8)
    assert (
        first._state.policy is second._state.policy
        and first._state.policy is not other._state.policy
    )


async def test_an_agent_can_continue_request_and_event_numbering():
    """An agent could not continue a request and event numbering it was given."""
    agent, model = agent_with(
        [scripted_response("r1", "x")], request_sequence_start=40, sequence_start=500
    )
    events = []
    async with agent.turn(u("u1")) as run:
        async for event in run:
            events.append(event)
    assert model.requests[0].id == "request-040"
    assert events[0].sequence == 500


@pytest.mark.parametrize("start", [1, 9, 10, 99, 100, 999, 1000, 12345])
async def test_a_request_id_is_its_number_in_three_digits_at_least(start):
    """``request-{n:03d}``, however the id is made (issue 38 made it without the
    format spec): zeros up to three digits, every digit past them."""
    agent, model = agent_with([scripted_response("r1", "x")], request_sequence_start=start)
    await agent.prompt("go")
    assert model.requests[0].id == f"request-{start:03d}"


async def test_a_turns_budget_is_per_turn_and_request_numbers_run_on():
    """Issue 14: a step budget is per turn, and request numbers run on past it across turns."""
    agent = Agent(
        model=ScriptedModel([*adding("a"), *adding("b")]),
        tools=[add_text],
        max_steps=MAX_AGENT_STEPS,
        request_sequence_start=MAX_AGENT_STEPS - 1,
    )
    await agent.prompt("one")
    await agent.prompt("two")  # past request-064: a session has many turns
    assert agent.requests == MAX_AGENT_STEPS + 2


def test_metadata_is_a_read_only_copy():
    """Issue 14: an agent's metadata is a read-only copy of what it was given."""
    given = {"provider": "openai", "settings": {"max_tokens": 100}}
    agent = Agent(model=ScriptedModel([]), metadata=given)
    given["settings"]["max_tokens"] = 1
    seen = agent.metadata
    assert isinstance(seen, MappingProxyType) and seen == {
        "provider": "openai",
        "settings": {"max_tokens": 100},
    }
    with pytest.raises(TypeError):
        seen["provider"] = "x"  # type: ignore[index]
    seen["settings"]["max_tokens"] = 2  # a copy: the agent's own is unchanged
    assert agent.metadata["settings"] == {"max_tokens": 100}
    assert Agent(model=ScriptedModel([])).metadata == {}


async def test_regression_prompt_after_aclose_is_refused_saying_to_resume(tmp_path):
    """Review 14 (sessions and stores): a prompt after ``aclose()`` ran and completed, and nothing
    of it reached the ledger; it is refused, saying to resume the session."""
    store = JsonlStore(tmp_path)
    agent = Agent(model=model(), store=store, session_id="s")
    await agent.prompt("one")
    early = agent.turn(UserMessage("u9", "made before the close"))
    await agent.aclose()
    recorded = (tmp_path / "s.jsonl").read_bytes()
    # HEAD: the turn ran, completed, and nothing of it reached the ledger.
    with pytest.raises(RuntimeError, match=r"session 's' is closed; resume it with Agent\.resume"):
        await agent.prompt("two")
    with pytest.raises(RuntimeError, match="is closed"):
        agent.turn("two")
    with pytest.raises(RuntimeError, match="is closed"):
        await early.wait()
    assert (tmp_path / "s.jsonl").read_bytes() == recorded
    assert (agent.turns, user_texts(agent)) == (1, ["one"])
    await agent.aclose()  # closing again is harmless
    resumed = await Agent.resume(store, "s", model=model())
    await resumed.prompt(UserMessage("u9", "two"))
    await resumed.aclose()
    assert kinds(tmp_path / "s.jsonl").count("turn/start") == 2


async def test_input_queued_after_aclose_is_refused_saying_to_resume(tmp_path):
    """``steer()`` and ``follow_up()`` after ``aclose()`` queued the message without a
    word, though no turn of the closed session could take it (nor a resumed one)."""
    store = JsonlStore(tmp_path)
    agent = Agent(model=model(), store=store, session_id="s")
    await agent.prompt("one")
    await agent.aclose()
    with pytest.raises(RuntimeError, match=r"session 's' is closed; resume it"):
        agent.steer("late")
    with pytest.raises(RuntimeError, match=r"session 's' is closed; resume it"):
        agent.follow_up(UserMessage("u9", "later"))
    assert agent.queued_steering == () and agent.queued_follow_ups == ()
    resumed = await Agent.resume(store, "s", model=model())
    resumed.follow_up(UserMessage("u9", "later"))  # its id was not kept
    await resumed.aclose()


async def test_an_agent_left_async_with_takes_no_more_turns(tmp_path):
    """Review 14 (sessions and stores): an agent whose ``async with`` block was left takes no more
    turns."""
    agent = Agent(model=model(), store=JsonlStore(tmp_path), session_id="s")
    async with agent:
        await agent.prompt("one")
    with pytest.raises(RuntimeError, match="is closed"):
        await agent.prompt("two")


async def test_leaving_async_with_while_a_turn_runs_elsewhere_says_the_session_is_open(tmp_path):
    """Leaving ``async with agent`` while a turn started in another task still ran
    skipped the close without a word: the ledger stayed open, its writer lock held
    (``Agent.resume`` in the same process: ``SessionLockedError``)."""
    store = JsonlStore(tmp_path)
    agent = Agent(
        model=ScriptedModel([scripted_response("r1", "never", hang_at=0)]),
        store=store,
        session_id="s",
    )
    async with trio.open_nursery() as nursery:
        with pytest.raises(RuntimeError, match="still runs: the session is not closed"):
            async with agent:
                nursery.start_soon(agent.prompt, "one")
                await trio.testing.wait_all_tasks_blocked()
        assert agent.running
        nursery.cancel_scope.cancel()
    await agent.aclose()  # the turn has ended: now it closes
    resumed = await Agent.resume(store, "s", model=model())
    assert resumed.resume_warnings == () and user_texts(resumed) == ["one"]
    await resumed.aclose()


async def test_an_agent_closed_before_its_session_was_made_creates_nothing_later(tmp_path):
    """Review 14 (sessions and stores): an agent closed before its session was made creates nothing
    later."""
    agent = Agent(model=model(), store=JsonlStore(tmp_path), session_id="s")
    await agent.aclose()
    with pytest.raises(RuntimeError, match="closed before its session 's' was created"):
        await agent.prompt("one")
    with pytest.raises(RuntimeError, match="closed before its session 's' was created"):
        async with agent:
            pass
    assert list(tmp_path.iterdir()) == []


async def test_an_agent_without_a_store_goes_on_after_aclose():
    """Review 14 (sessions and stores): an agent without a store goes on after ``aclose()``: there
    is nothing to resume."""
    agent = Agent(model=model())
    await agent.prompt("one")
    await agent.aclose()
    assert (await agent.prompt("two")).end.reason == "completed"
    async with agent:
        await agent.prompt("three")
    assert user_texts(agent) == ["one", "two", "three"]
