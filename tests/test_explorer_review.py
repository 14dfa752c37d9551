"""Regressions from the review of the explorer (issue 17): ``tasks=`` narrows, a
report never names a finished task's "paused at ?", a raising predicate or an odd
scenario gets a clear error, a hanging check is a hang, and failures pickle."""

from __future__ import annotations

import copy
import pickle
import warnings
from typing import Any

import pytest
import trio
from test_explorer_descendants import stock_scenario

from trio_agent import ToolRegistry, UserMessage, run_agent_loop
from trio_agent.testing import (
    ExplorationFailure,
    ScriptedModel,
    explore_cancellation,
    scripted_response,
)


def hello() -> Any:
    return run_agent_loop(
        model=ScriptedModel([scripted_response("r1", "hi")]),
        messages=[UserMessage("u1", "go")],
        tools=ToolRegistry(),
        max_steps=2,
    )


def nothing(*_: Any) -> None:
    return None


async def test_tasks_narrows_the_default_points_never_widens_them(autojump_clock):
    default = await explore_cancellation(stock_scenario, nothing, seconds_per_run=5)
    everything = await explore_cancellation(
        stock_scenario, nothing, seconds_per_run=5, tasks=lambda task: True
    )
    assert everything.checkpoints == default.checkpoints
    narrow = await explore_cancellation(
        stock_scenario,
        nothing,
        seconds_per_run=5,
        tasks=lambda task: task.name.startswith("trio_agent."),
    )
    assert 0 < narrow.checkpoints < default.checkpoints


async def test_tasks_keeps_an_unrelated_busy_task_out(autojump_clock):
    default = await explore_cancellation(stock_scenario, nothing, seconds_per_run=5)

    async def busy() -> None:
        for _ in range(10_000):  # steps all along (virtual time still jumps to its wakes)
            await trio.sleep(100)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(busy, name="x-busy")
        crowded = await explore_cancellation(
            stock_scenario, nothing, seconds_per_run=5, tasks=lambda task: task.name != "x"
        )
        nursery.cancel_scope.cancel()
    assert crowded.checkpoints == default.checkpoints


async def test_a_report_after_a_tasks_last_step_says_it_ended_not_paused_at_a_question_mark(
    autojump_clock,
):
    count = (await explore_cancellation(stock_scenario, nothing, seconds_per_run=5)).checkpoints
    ended = []
    for k in range(1, count + 1):
        with pytest.raises(ExplorationFailure) as caught:
            await explore_cancellation(
                stock_scenario, lambda *_: pytest.fail("always"), only=k, seconds_per_run=5
            )
        text = str(caught.value)
        assert "paused at ?" not in text
        assert caught.value.where is not None
        if caught.value.where[1] is None:
            ended.append(k)
            assert f"(the last step of task {caught.value.where[0]}, which then ended)" in text
        else:
            assert f"paused at {caught.value.where[1]}" in text
    assert ended  # the scenario's tasks do end at some checkpoints


async def test_a_tasks_predicate_that_raises_is_reported_as_itself(autojump_clock):
    with pytest.raises(TypeError, match="tasks= predicate raised AttributeError") as caught:
        await explore_cancellation(
            stock_scenario, nothing, seconds_per_run=5, tasks=lambda t: t.nme
        )
    assert isinstance(caught.value.__cause__, AttributeError)
    # nothing was left behind: the next exploration is as it would be
    report = await explore_cancellation(stock_scenario, nothing, seconds_per_run=5)
    assert report.checkpoints > 0


@pytest.mark.parametrize("only", [-1, "3", 1.0, True])
async def test_only_must_be_a_checkpoint_number(only):
    with pytest.raises(ValueError, match="only must be an int >= 0"):
        await explore_cancellation(hello, nothing, only=only)


@pytest.mark.parametrize(
    ("made", "says"),
    [
        (lambda: ({}, hello()), "a tuple whose first item is dict (the run goes first)"),
        (lambda: [hello(), {}], "got list"),
        (lambda: None, "got NoneType"),
        (lambda: (), "got tuple"),
    ],
)
async def test_a_scenario_that_returns_no_run_is_told_what_to_return(made, says):
    with pytest.raises(TypeError, match="the scenario must be a plain function") as caught:
        await explore_cancellation(made, nothing)
    assert says in str(caught.value)


async def test_an_async_scenario_is_told_so_and_leaves_no_coroutine_unawaited():
    async def scenario() -> Any:
        return hello()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError, match="is the scenario an async def"):
            await explore_cancellation(scenario, nothing)


async def test_a_check_that_never_ends_is_reported_as_a_hang():
    async def check(events: Any, result: Any) -> None:
        await trio.sleep_forever()

    with pytest.raises(ExplorationFailure) as caught:
        await explore_cancellation(hello, check, seconds_per_run=0.2)
    assert caught.value.kind == "check hang"
    assert str(caught.value).startswith(
        "the check of the run without a cancel did not finish within 0.2 s wall"
    )


async def test_a_single_failure_still_says_how_many_runs_failed(autojump_clock):
    calls = 0

    def check(events: Any, result: Any, db: dict[str, int]) -> None:
        nonlocal calls
        calls += 1  # the uncancelled run, then checkpoints 0, 1, ...
        assert calls != 3, "planted: fails for checkpoint 1 only"

    with pytest.raises(ExplorationFailure) as caught:
        await explore_cancellation(stock_scenario, check, seconds_per_run=5)
    assert caught.value.failures == (1,)
    assert f"1 of {caught.value.runs} runs failed, at checkpoints 1" in str(caught.value)


def planted(*_: Any) -> None:
    raise AssertionError("always")


async def test_an_exploration_failure_copies_and_pickles(autojump_clock):
    with pytest.raises(ExplorationFailure) as caught:
        await explore_cancellation(stock_scenario, planted, only=3, seconds_per_run=5)
    failure = caught.value
    for other in (copy.copy(failure), pickle.loads(pickle.dumps(failure))):
        assert type(other) is ExplorationFailure
        assert str(other) == str(failure)
        assert (other.checkpoint, other.kind, other.where) == (3, "check", failure.where)
        assert other.failures == failure.failures and other.runs == failure.runs
        assert len(other.events) == len(failure.events)
