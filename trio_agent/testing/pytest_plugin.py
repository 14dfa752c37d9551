"""The trio-agent pytest plugin (registered as ``pytest11``: active once installed).

Fixtures:

- ``scripted_model``: ``scripted_model(*responses)`` builds a ``ScriptedModel``;
- ``event_recorder``: ``await event_recorder.record(run)`` consumes a run or
  turn, checks ``assert_run_invariants`` and returns ``(events, result)``;
- ``explore``: ``await explore(scenario, check=None, **options)`` is
  ``explore_cancellation`` with ``assert_run_invariants`` as the default check
  (``only``, ``seconds_per_run``, ``tasks``, ``max_runs``, ``seed`` passed on);
  a failing exploration reaches pytest as one plain ``AssertionError``;
- ``network_blocked``: the test runs under ``block_network()``;
- ``trio_seed``: trio's scheduler seeded for the test, put back after it.

Options: ``--trio-agent-block-network`` (or ``trio_agent_block_network = true``
in the ini file) runs every test of the suite, its fixtures' setup and
teardown included, under ``block_network()`` naming the test.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any

import pytest

from ._explorer import (
    ExplorationFailure,
    ExplorationReport,
    TaskFilter,
    explore_cancellation,
    seeded_scheduler,
)
from ._guard import block_network
from ._invariants import assert_run_invariants
from ._scripted import ScriptedModel, ScriptedResponse

__all__ = ["EventRecorder"]  # the fixtures and hooks are for pytest to find


class EventRecorder:
    """Consumes runs and keeps what it saw (``runs``: a list of (events, result))."""

    def __init__(self) -> None:
        self.runs: list[tuple[list[Any], Any]] = []

    async def record(self, run: Any, *, check: bool = True) -> tuple[list[Any], Any]:
        events: list[Any] = []
        async with run:
            async for event in run:
                events.append(event)
        if check:
            assert_run_invariants(events, run.result)
        self.runs.append((events, run.result))
        return events, run.result


@pytest.fixture
def scripted_model() -> Callable[..., ScriptedModel]:
    def make(*responses: ScriptedResponse | BaseException) -> ScriptedModel:
        return ScriptedModel(list(responses))

    return make


@pytest.fixture
def event_recorder() -> EventRecorder:
    return EventRecorder()


@pytest.fixture
def trio_seed() -> Iterator[None]:
    """trio's scheduler in a fixed order for this test (and put back after it):
    ready tasks run in the order they became ready, a nested nursery's too, the
    same on every run."""
    with seeded_scheduler():
        yield


@pytest.fixture
def explore() -> Callable[..., Any]:
    async def run(
        scenario: Callable[[], Any],
        check: Callable[..., Any] | None = None,
        *,
        only: int | None = None,
        seconds_per_run: float = 60.0,
        tasks: TaskFilter | None = None,
        max_runs: int | None = None,
        seed: int = 0,
    ) -> ExplorationReport:
        return await explore_cancellation(
            scenario,
            check or _invariants_only,
            only=only,
            seconds_per_run=seconds_per_run,
            tasks=tasks,
            max_runs=max_runs,
            seed=seed,
        )

    return run


def _invariants_only(events: Sequence[Any], result: Any, *state: Any) -> None:
    """The default check: the contract's invariants (a scenario's state, if it
    returned one, is not looked at)."""
    assert_run_invariants(events, result)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None]:
    """An exploration's failure reaches pytest as one plain ``AssertionError``, not
    inside the exception group pytest-trio wraps a failing test in."""
    try:
        return (yield)
    except ExceptionGroup as group:
        failure = _only_exploration_failure(group)
        if failure is None:
            raise
        # the group goes; the failure keeps its cause (the check's own error, with
        # the frames of the user's check) and its traceback
        raise failure.with_traceback(failure.__traceback__) from failure.__cause__


def _only_exploration_failure(group: BaseExceptionGroup[Any]) -> ExplorationFailure | None:
    """The one ``ExplorationFailure`` a group of nested single groups holds, if so."""
    while len(group.exceptions) == 1:
        inner = group.exceptions[0]
        if isinstance(inner, ExplorationFailure):
            return inner
        if not isinstance(inner, BaseExceptionGroup):
            return None
        group = inner
    return None


_BLOCK_OPTION = "--trio-agent-block-network"
_BLOCK_INI = "trio_agent_block_network"


def pytest_addoption(parser: pytest.Parser) -> None:
    explain = (
        "run every test under trio_agent.testing.block_network(): a real model "
        "provider that tries to connect fails the run, naming the test"
    )
    parser.getgroup("trio-agent").addoption(
        _BLOCK_OPTION, action="store_true", default=None, help=explain
    )
    parser.addini(_BLOCK_INI, explain + " (the command-line option wins)", type="bool")


def _suite_blocked(config: pytest.Config) -> bool:
    given = config.getoption(_BLOCK_OPTION)
    return bool(given) if given is not None else bool(config.getini(_BLOCK_INI))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    """With the suite's network blocked, each test's setup, call and teardown run
    under ``block_network(item.nodeid)``."""
    if not _suite_blocked(item.config):
        yield
        return
    with block_network(item.nodeid):
        yield


@pytest.fixture
def network_blocked(request: pytest.FixtureRequest) -> Iterator[None]:
    """The test (from this fixture's setup to its teardown) runs under
    ``block_network()`` naming it."""
    with block_network(request.node.nodeid):
        yield
