"""trio_agent.testing: fault models, the explorer, the invariant checker, replay,
strategies (issue 7)."""

from __future__ import annotations

import msgspec
import pytest
import trio
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
from trio_agent.testing.strategies import arguments_outside_limits, scripted_runs


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
    def injected(seed):
        model = FaultyModel(ScriptedModel(two_steps() * 10), seed=seed, rate=0.5)
        for n in range(12):
            model._fault_for(n + 1)
        return [repr(f) for f in model.injected]  # exceptions compare by identity

    assert injected(7) == injected(7)
    assert injected(7) != injected(8)
    assert {f.split("(")[0] for seed in range(20) for f in injected(seed)} == {
        "RaiseOnCall",
        "HangAt",
        "CutStream",
        "CorruptChunk",
        "DisagreeingResponse",
    }


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
    assert "request-001 diverges from the recording: message 0 differs" in result.end.detail
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
