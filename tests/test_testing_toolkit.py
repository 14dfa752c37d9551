"""trio_agent.testing: fault models, the explorer, the invariant checker, replay,
strategies (issue 7)."""

from __future__ import annotations

import msgspec
import pytest
import trio
import trio.lowlevel
from helpers import add, call, user
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_agent import (
    Agent,
    JsonlStore,
    ModelRequest,
    RetryPolicy,
    RunFinished,
    ToolRegistry,
    UserMessage,
    check_arguments,
    run_agent_loop,
    tool,
)
from trio_agent.testing import (
    CorruptChunk,
    CutStream,
    DisagreeingResponse,
    ExplorationFailure,
    FaultyModel,
    HangAt,
    InvariantError,
    RaiseOnCall,
    ReplayDivergenceError,
    ReplayModel,
    ScriptedModel,
    assert_run_invariants,
    explore_cancellation,
    scripted_response,
)
from trio_agent.testing.strategies import (
    arguments_at_limits,
    arguments_outside_limits,
    scripted_runs,
)


def two_steps():
    return [
        scripted_response("r1", [call("add", "c1", {"left": 1, "right": 2})], text_chunks=2),
        scripted_response("r2", "three, as computed", text_chunks=3),
    ]


def core_run(model, **options):
    return run_agent_loop(
        messages=[user()], model=model, tools=ToolRegistry([add]), max_steps=3, **options
    )


# ------------------------------------------------------------------ faults


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


# ---------------------------------------------------------------- explorer


async def test_explore_cancellation_visits_every_checkpoint():
    checked = []

    def check(events, result):
        assert_run_invariants(events, result)
        checked.append(result.status)

    report = await explore_cancellation(lambda: core_run(ScriptedModel(two_steps())), check)
    assert report.checkpoints > 10
    assert len(report.outcomes) == report.checkpoints + 1
    assert report.outcomes[0] == "cancelled" and report.outcomes[-1] == "completed"
    assert len(checked) == report.checkpoints + 2  # the counting run too


async def test_explore_reports_the_failing_checkpoint_and_replays_it():
    def picky(events, result):
        if result.status == "cancelled" and any(e.type == "tool.finished" for e in events):
            raise AssertionError("cancelled after a tool finished")

    with pytest.raises(ExplorationFailure) as info:
        await explore_cancellation(lambda: core_run(ScriptedModel(two_steps())), picky)
    failure = info.value
    assert failure.checkpoint > 0 and "replay it with only=" in str(failure)
    assert any(e.type == "tool.finished" for e in failure.events)
    with pytest.raises(ExplorationFailure):
        await explore_cancellation(
            lambda: core_run(ScriptedModel(two_steps())), picky, only=failure.checkpoint
        )


async def test_explore_works_on_session_turns():
    def scenario():
        agent = Agent(model=ScriptedModel(two_steps()), tools=ToolRegistry([add]))
        agent.steer(UserMessage("s1", "steer"))
        return agent.turn(UserMessage("u1", "go"))

    report = await explore_cancellation(scenario, assert_run_invariants)
    assert set(report.outcomes) == {"cancelled", "completed"}


# -------------------------------------------------------------- invariants


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


# ------------------------------------------------------------------ replay


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


# --------------------------------------------------------------- strategies


@tool
async def echo(text: str) -> str:
    """Echo."""
    return text


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(scripted_runs(["echo", "add"]), st.none() | st.integers(0, 60))
def test_any_scripted_run_keeps_the_invariants_with_or_without_a_cancel(script, cancel_at):
    async def main():
        def scenario():
            return run_agent_loop(
                messages=[user()],
                model=ScriptedModel(script),
                tools=ToolRegistry([echo, add]),
                max_steps=4,
            )

        # only=k: cancel after checkpoint k (a k past the end cancels nothing)
        report = await explore_cancellation(
            scenario, assert_run_invariants, only=10**9 if cancel_at is None else cancel_at
        )
        if cancel_at is None:
            assert report.outcomes[0] in ("completed", "max_steps")

    trio.run(main)


@settings(max_examples=30, deadline=None)
@given(arguments_outside_limits())
def test_arguments_just_outside_a_limit_are_protocol_errors(arguments):
    from trio_agent import ToolCall

    async def main():
        script = [scripted_response("r1", [ToolCall("c1", "echo", arguments)])]
        result = await run_agent_loop(
            messages=[user()], model=ScriptedModel(script), tools=ToolRegistry([echo]), max_steps=1
        ).wait()
        assert result.code == "MODEL_PROTOCOL_ERROR"

    trio.run(main)


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


@settings(max_examples=20, deadline=None)
@given(arguments_at_limits())
def test_arguments_at_a_limit_are_accepted(arguments):
    assert check_arguments(arguments) == arguments


@settings(max_examples=30, deadline=None)
@given(scripted_runs(["echo", "add"]), st.none() | st.integers(0, 80))
def test_any_scripted_agent_turn_keeps_the_invariants(script, cancel_at):
    async def main():
        def scenario():
            agent = Agent(model=ScriptedModel(script), tools=ToolRegistry([echo, add]), max_steps=4)
            agent.steer(UserMessage("s1", "also this"))
            return agent.turn(UserMessage("u1", "go"))

        await explore_cancellation(
            scenario, assert_run_invariants, only=10**9 if cancel_at is None else cancel_at
        )

    trio.run(main)


async def test_an_exploration_is_deterministic_and_counts_tool_task_checkpoints():
    @tool
    async def spin(n: int) -> str:
        for _ in range(n):
            await trio.lowlevel.checkpoint()
        return "spun"

    def scenario():
        calls = [call("spin", f"s{i}", {"n": 5}) for i in range(3)]
        return run_agent_loop(
            messages=[user()],
            model=ScriptedModel([scripted_response("r1", calls), scripted_response("r2", "ok")]),
            tools=ToolRegistry([spin]),
            max_steps=2,
            tool_execution="parallel",
        )

    async def trace():
        seen = []

        def check(events, result):
            assert_run_invariants(events, result)
            seen.append([(e.type, getattr(e, "call", None)) for e in events])

        report = await explore_cancellation(scenario, check)
        return report, seen

    first, first_events = await trace()
    second, second_events = await trace()
    assert first == second and first_events == second_events
    # the tools' own steps count: cancels land inside the parallel calls too
    assert first.checkpoints > 20


async def test_a_hanging_scenario_fails_with_its_checkpoint_instead_of_hanging(autojump_clock):
    def scenario():
        model = FaultyModel(ScriptedModel(two_steps()), [HangAt(call=1, chunk=0)])
        return core_run(model)

    with pytest.raises(ExplorationFailure, match="the run without a cancel") as info:
        await explore_cancellation(scenario, assert_run_invariants, seconds_per_run=5)
    assert info.value.checkpoint is None


async def test_sharing_one_agent_between_runs_is_refused():
    agent = Agent(model=ScriptedModel(two_steps() * 5), tools=ToolRegistry([add]))
    with pytest.raises(TypeError, match="new Agent"):
        await explore_cancellation(lambda: agent.turn("go"), assert_run_invariants)
