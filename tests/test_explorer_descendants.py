"""The explorer finds the bugs users plant (issue 17 items 1 to 4): cancel points in
every task the run starts (a tool's nursery children too), a wall-clock time
limit reported as a hang, reports that say where, and checks that see the
application's state. The user's scenario from the issue is the first test."""

from __future__ import annotations

import random
from typing import Any

import pytest
import trio
import trio.testing

from trio_agent import Agent, ToolCall, ToolRegistry, UserMessage, run_agent_loop, tool
from trio_agent.testing import (
    ExplorationFailure,
    ScriptedModel,
    assert_run_invariants,
    explore_cancellation,
    scripted_response,
)

pytest_plugins = ["pytester"]


def scripted_calls() -> ScriptedModel:
    return ScriptedModel(
        [
            scripted_response("r1", [ToolCall("c1", "move", {}), ToolCall("c2", "slow", {})]),
            scripted_response("r2", "done"),
        ]
    )


def stock_tools(db: dict[str, int]) -> ToolRegistry:
    @tool
    async def slow() -> str:
        """Takes half an hour (virtual time under MockClock)."""
        await trio.sleep(1800)
        return "slept"

    @tool
    async def move() -> str:
        """Moves 3 from a to b in two writes, in a task of its own (the planted bug)."""

        async def child() -> None:
            await trio.lowlevel.checkpoint()
            db["a"] -= 3
            await trio.lowlevel.checkpoint()  # a cancel here leaves the move half done
            db["b"] += 3

        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)
        return "moved"

    @tool
    async def peek() -> str:
        """Reads the rows."""
        return f"{db['a']} {db['b']}"

    return ToolRegistry([slow, move, peek])


def stock_scenario() -> tuple[Any, dict[str, int]]:
    db = {"a": 10, "b": 0}
    agent = Agent(model=scripted_calls(), tools=stock_tools(db))
    return agent.turn(UserMessage("u1", "move the stock")), db


def stock_kept(events: Any, result: Any, db: dict[str, int]) -> None:
    assert db["a"] + db["b"] == 10, f"stock lost: {db}"


async def test_a_bug_in_a_tools_nursery_child_is_found_and_reported_where(autojump_clock):
    with pytest.raises(ExplorationFailure) as caught:
        await explore_cancellation(stock_scenario, stock_kept, seconds_per_run=5)
    failure = caught.value
    text = str(failure)
    assert failure.kind == "check" and failure.checkpoint is not None
    assert f"check failed for the run cancelled after checkpoint {failure.checkpoint}" in text
    assert "stock lost: {'a': 7, 'b': 0}" in text
    assert failure.where is not None
    task, where = failure.where
    assert "child" in task  # the nursery child, not a trio_agent.* task
    assert where.startswith("tests/test_explorer_descendants.py:")
    assert f"(in task {task}, paused at {where})" in text
    assert "tool.started move c1" in text  # tool names and call ids in the trace
    assert f"replay it with only={failure.checkpoint}" in text
    assert failure.failures[0] == failure.checkpoint
    # the replay finds it again, alone
    with pytest.raises(ExplorationFailure) as again:
        await explore_cancellation(
            stock_scenario, stock_kept, only=failure.checkpoint, seconds_per_run=5
        )
    assert again.value.checkpoint == failure.checkpoint and again.value.where == failure.where


async def test_only_the_run_tasks_would_have_missed_it(autojump_clock):
    report = await explore_cancellation(
        stock_scenario,
        stock_kept,
        seconds_per_run=5,
        tasks=lambda task: task.name.startswith("trio_agent."),
    )
    # no exception: with only the trio_agent.* tasks as cancel points, the bug hides
    assert "failed check" not in report.outcomes and report.outcomes[-1] == "completed"


class EveryDescendant(trio.abc.Instrument):
    """An independent count: steps of every task below a ``trio_agent.*`` task."""

    def __init__(self) -> None:
        self.steps = 0

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        names = []
        current: Any = task
        while current is not None:
            names.append(current.name)
            nursery = current.parent_nursery
            current = nursery.parent_task if nursery is not None else None
        if any(name.startswith("trio_agent.") for name in names):
            self.steps += 1


async def test_the_checkpoints_are_every_descendant_tasks_steps(autojump_clock):
    def fixed() -> tuple[Any, dict[str, int]]:
        db = {"a": 10, "b": 0}
        return Agent(model=scripted_calls(), tools=stock_tools(db)).turn("go"), db

    report = await explore_cancellation(fixed, lambda *_: None, seconds_per_run=5)
    counter = EveryDescendant()
    run, _ = fixed()
    from trio_agent.testing._explorer import _reseed

    _reseed()
    trio.lowlevel.add_instrument(counter)
    try:
        async with run:
            async for _ in run:
                pass
    finally:
        trio.lowlevel.remove_instrument(counter)
    assert report.checkpoints == counter.steps
    narrow = await explore_cancellation(
        fixed,
        lambda *_: None,
        seconds_per_run=5,
        tasks=lambda task: task.name.startswith("trio_agent."),
    )
    assert narrow.checkpoints < report.checkpoints  # the children's steps were missed


async def test_another_agent_running_meanwhile_adds_no_cancel_points(autojump_clock):
    def fixed() -> tuple[Any, dict[str, int]]:
        db = {"a": 10, "b": 0}
        return Agent(model=scripted_calls(), tools=stock_tools(db)).turn("go"), db

    alone = await explore_cancellation(fixed, lambda *_: None, seconds_per_run=5)
    other_steps = 0

    @tool
    async def tick() -> str:
        """Steps while the exploration runs."""
        nonlocal other_steps
        for _ in range(50):
            other_steps += 1
            await trio.lowlevel.checkpoint()
        return "ticked"

    async def other_agent() -> None:
        script = [scripted_response(f"o{i}", [ToolCall(f"t{i}", "tick", {})]) for i in range(40)]
        agent = Agent(model=ScriptedModel(script), tools=ToolRegistry([tick]), max_steps=40)
        async with agent.turn("keep busy") as run:
            async for _ in run:
                pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other_agent, name="trio_agent.unrelated")
        await trio.lowlevel.checkpoint()
        crowded = await explore_cancellation(fixed, lambda *_: None, seconds_per_run=5)
        assert other_steps > 0  # the other agent really ran meanwhile
        nursery.cancel_scope.cancel()
    assert crowded.checkpoints == alone.checkpoints
    assert crowded.outcomes == alone.outcomes


async def test_a_run_past_the_wall_clock_limit_is_a_hang_not_a_failed_check(autojump_clock):
    @tool
    async def stuck() -> str:
        """Waits forever: no virtual time passes for it to end."""
        await trio.sleep_forever()
        return "never"

    def scenario() -> Any:
        model = ScriptedModel([scripted_response("r1", [ToolCall("c1", "stuck", {})])])
        tools = ToolRegistry([stuck])
        return run_agent_loop(
            model=model, messages=[UserMessage("u1", "go")], tools=tools, max_steps=4
        )

    start = trio.current_time()
    with pytest.raises(ExplorationFailure) as caught:
        await explore_cancellation(scenario, assert_run_invariants, seconds_per_run=0.3)
    text = str(caught.value)
    assert caught.value.kind == "hang"
    assert text.startswith("the run without a cancel did not finish within 0.3 s wall")
    assert "check failed" not in text
    del start


async def test_a_check_sees_the_state_the_scenario_returned():
    seen: list[dict[str, int]] = []

    def scenario() -> tuple[Any, dict[str, int]]:
        db = {"n": 0}
        return run_agent_loop(
            model=ScriptedModel([scripted_response("r1", "hi")]),
            messages=[UserMessage("u1", "go")],
            tools=ToolRegistry(),
            max_steps=2,
        ), db

    def check(events: Any, result: Any, db: dict[str, int]) -> None:
        seen.append(db)

    report = await explore_cancellation(scenario, check)
    assert len(seen) == report.checkpoints + 2  # the uncancelled run, then each point
    assert all(db == {"n": 0} for db in seen) and len({id(db) for db in seen}) == len(seen)


async def test_max_runs_samples_the_points_with_a_seed(autojump_clock):
    full = await explore_cancellation(stock_scenario, lambda *_: None, seconds_per_run=5)
    sampled = await explore_cancellation(
        stock_scenario, lambda *_: None, seconds_per_run=5, max_runs=5, seed=7
    )
    again = await explore_cancellation(
        stock_scenario, lambda *_: None, seconds_per_run=5, max_runs=5, seed=7
    )
    assert len(sampled.tried) == 5 and sampled.tried == again.tried
    assert set(sampled.tried) <= set(full.tried) and sampled.checkpoints == full.checkpoints


async def test_every_failing_checkpoint_is_counted_and_the_first_reported(autojump_clock):
    with pytest.raises(ExplorationFailure) as caught:
        await explore_cancellation(stock_scenario, stock_kept, seconds_per_run=5)
    failure = caught.value
    assert failure.failures[0] == failure.checkpoint
    assert list(failure.failures) == sorted(failure.failures)  # type: ignore[type-var]
    if len(failure.failures) > 1:
        assert f"{len(failure.failures)} of {failure.runs} runs failed" in str(failure)


async def test_only_reports_the_real_number_of_checkpoints(autojump_clock):
    full = await explore_cancellation(stock_scenario, lambda *_: None, seconds_per_run=5)
    one = await explore_cancellation(stock_scenario, lambda *_: None, seconds_per_run=5, only=3)
    assert one.checkpoints == full.checkpoints and one.tried == (3,)


async def test_the_scheduler_generator_is_put_back():
    from trio._core import _run

    generator = _run._r
    random.seed(1)
    before = generator.getstate()
    await explore_cancellation(
        lambda: run_agent_loop(
            model=ScriptedModel([scripted_response("r1", "hi")]),
            messages=[UserMessage("u1", "go")],
            tools=ToolRegistry(),
            max_steps=2,
        ),
        assert_run_invariants,
    )
    assert generator.getstate() == before


INNER = """
from trio_agent import ToolRegistry, UserMessage, run_agent_loop
from trio_agent.testing import ScriptedModel, scripted_response


async def test_explored(explore):
    def scenario():
        model = ScriptedModel([scripted_response("r1", "hi")])
        return run_agent_loop(
            model=model, messages=[UserMessage("u1", "go")], tools=ToolRegistry(), max_steps=2
        )

    def check(events, result):
        assert result.status == "completed", "planted"

    await explore(scenario, check, seconds_per_run=5, max_runs=3)
"""


def test_the_fixture_fails_with_one_plain_assertion_error(pytester):
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "ExplorationFailure: check failed for the run cancelled after checkpoint" in text
    assert "ExceptionGroup" not in text and "replay it with only=" in text


async def test_only_past_the_last_checkpoint_cancels_nothing_and_says_how_many():
    def scenario() -> Any:
        return run_agent_loop(
            model=ScriptedModel([scripted_response("r1", "hi")]),
            messages=[UserMessage("u1", "go")],
            tools=ToolRegistry(),
            max_steps=2,
        )

    report = await explore_cancellation(scenario, assert_run_invariants, only=10_000)
    assert report.outcomes == ("completed",) and report.checkpoints < 10_000


INNER_STATE = """
from trio_agent import ToolRegistry, UserMessage, run_agent_loop
from trio_agent.testing import ScriptedModel, scripted_response


def scenario():
    model = ScriptedModel([scripted_response("r1", "hi")])
    run = run_agent_loop(
        model=model, messages=[UserMessage("u1", "go")], tools=ToolRegistry(), max_steps=2
    )
    return run, {"db": 1}


async def test_default_check_with_state(explore):
    await explore(scenario)  # the default check takes no state: it must still run


def helper_that_checks(state):
    assert state["db"] == 2, "planted in a helper"


async def test_failing_helper(explore):
    await explore(scenario, lambda events, result, state: helper_that_checks(state))
"""


def test_the_fixture_takes_state_scenarios_and_keeps_the_checks_traceback(pytester):
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    pytester.makepyfile(test_inner=INNER_STATE)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    text = result.stdout.str()
    assert 'assert state["db"] == 2, "planted in a helper"' in text  # the user's frame
    assert "The above exception was the direct cause" in text
    assert "ExceptionGroup" not in text
