"""``explore_cancellation``: cancel a scenario after each of its checkpoints in turn
(issue 7), in every task the run starts, a tool's nursery children too; a wall-clock
limit reported as a hang; reports that say where; checks that see the application's
state (issue 17 items 1 to 4); ``tasks=`` and ``only=``; and ``seeded_scheduler`` /
``trio_seed``, which make a nested nursery's order reproducible (issue 17 item 7).
The user's scenario from issue 17 is the first test."""

from __future__ import annotations

import copy
import pickle
import random
import warnings
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing
from helpers import add, call, children_in_order, user
from two_steps import core_run, two_steps

from trio_agent import Agent, ToolCall, ToolRegistry, UserMessage, run_agent_loop, tool
from trio_agent.testing import (
    ExplorationFailure,
    FaultyModel,
    HangAt,
    ScriptedModel,
    assert_run_invariants,
    explore_cancellation,
    scripted_response,
)
from trio_agent.testing._explorer import seeded_scheduler

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
    assert where.startswith("tests/testing/test_explorer.py:")
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
    from trio_agent.testing._explorer import seeded_scheduler

    trio.lowlevel.add_instrument(counter)
    try:
        with seeded_scheduler():  # the exploration's order of ready tasks
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
    """Issue 17 (review of the explorer): ``tasks=`` could widen the cancel points past the default
    ones; it only ever narrows them."""
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
    """Issue 17 (review of the explorer): a busy task outside the scenario added cancel points of
    its own; ``tasks=`` keeps it out."""
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
    """Issue 17 (review of the explorer): a report for a checkpoint that was a task's last step said
    "paused at ?"; it says the task then ended."""
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


def trio_child_scenario() -> tuple[Any, None]:
    @tool
    async def nap() -> str:
        """Sleeps in a child task that is trio's own function."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep, 1)
        return "napped"

    model = ScriptedModel(
        [scripted_response("r1", [ToolCall("c1", "nap", {})]), scripted_response("r2", "done")]
    )
    agent = Agent(model=model, tools=[nap])
    return agent.turn(UserMessage("u1", "nap")), None


async def test_regression_a_task_of_trios_own_is_placed_inside_trio_not_at_a_question_mark(
    autojump_clock,
):
    """A report cancelled in a task whose frames are all trio's (``start_soon(trio.sleep,
    1)``) said "paused at ?"; it names trio's frame it waits in."""
    explored = await explore_cancellation(trio_child_scenario, nothing, seconds_per_run=5)
    inside = []
    for k in range(1, explored.checkpoints + 1):
        with pytest.raises(ExplorationFailure) as caught:
            await explore_cancellation(
                trio_child_scenario, lambda *_: pytest.fail("always"), only=k, seconds_per_run=5
            )
        text = str(caught.value)
        assert "?" not in text.partition("paused at ")[2].split(")")[0]
        where = caught.value.where
        if where is not None and where[1] is not None and "in trio's" in where[1]:
            assert where[1].startswith("trio/") and "no frame of the task's own" in where[1]
            assert f"paused at {where[1]}" in text
            inside.append(k)
    assert inside  # the trio.sleep child was cancelled at one of its checkpoints at least


async def test_a_tasks_predicate_that_raises_is_reported_as_itself(autojump_clock):
    """Issue 17 (review of the explorer): a ``tasks=`` predicate that raised was lost in the
    exploration's own failure; it is a TypeError caused by the predicate's error, and nothing is
    left behind."""
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
    """Issue 17 (review of the explorer): ``only=`` took -1, a string, a float or True without a
    word; it must be an int >= 0."""
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
    """Issue 17 (review of the explorer): a scenario that returned no run (or the run second) failed
    obscurely; the error says what to return."""
    with pytest.raises(TypeError, match="the scenario must be a plain function") as caught:
        await explore_cancellation(made, nothing)
    assert says in str(caught.value)


async def test_an_async_scenario_is_told_so_and_leaves_no_coroutine_unawaited():
    """Issue 17 (review of the explorer): an ``async def`` scenario left a coroutine never awaited;
    the error asks whether the scenario is one."""

    async def scenario() -> Any:
        return hello()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError, match="is the scenario an async def"):
            await explore_cancellation(scenario, nothing)


async def test_a_check_that_never_ends_is_reported_as_a_hang():
    """Issue 17 (review of the explorer): a check that never finished hung the exploration; it is a
    ``check hang`` failure after ``seconds_per_run``."""

    async def check(events: Any, result: Any) -> None:
        await trio.sleep_forever()

    with pytest.raises(ExplorationFailure) as caught:
        await explore_cancellation(hello, check, seconds_per_run=0.2)
    assert caught.value.kind == "check hang"
    assert str(caught.value).startswith(
        "the check of the run without a cancel did not finish within 0.2 s wall"
    )


async def test_a_single_failure_still_says_how_many_runs_failed(autojump_clock):
    """Issue 17 (review of the explorer): a report with a single failing checkpoint did not say how
    many runs failed."""
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
    """Issue 17 (review of the explorer): an ``ExplorationFailure`` could not be copied or pickled
    (as pytest-xdist does with a failure)."""
    with pytest.raises(ExplorationFailure) as caught:
        await explore_cancellation(stock_scenario, planted, only=3, seconds_per_run=5)
    failure = caught.value
    for other in (copy.copy(failure), pickle.loads(pickle.dumps(failure))):
        assert type(other) is ExplorationFailure
        assert str(other) == str(failure)
        assert (other.checkpoint, other.kind, other.where) == (3, "check", failure.where)
        assert other.failures == failure.failures and other.runs == failure.runs
        assert len(other.events) == len(failure.events)


def nested_order() -> list[int]:
    order: list[int] = []

    trio.run(children_in_order, order, 20)
    return order


def test_a_seeded_scheduler_repeats_a_nested_nurserys_order_and_is_put_back():
    """Issue 17 item 7: ``seeded_scheduler`` makes a nested nursery's order repeat, and puts trio's
    generator back afterwards."""
    from trio._core import _run

    before = _run._r.getstate()
    with seeded_scheduler():
        first = nested_order()
    with seeded_scheduler():
        second = nested_order()
    assert first == second and sorted(first) == list(range(20))
    assert _run._r.getstate() == before


@pytest.mark.parametrize("run", [1, 2])
def test_the_trio_seed_fixture_gives_the_same_order_every_time(trio_seed, run):
    """Issue 17 item 7: the ``trio_seed`` fixture gives a nested nursery the same order in every
    test."""
    assert nested_order() == SEEDED


with seeded_scheduler():
    SEEDED = nested_order()
