"""The trio-agent pytest plugin (registered as ``pytest11``: active once installed).

Fixtures:

- ``scripted_model``: ``scripted_model(*responses)`` builds a ``ScriptedModel``;
- ``event_recorder``: ``await event_recorder.record(run)`` consumes a run or
  turn, checks ``assert_run_invariants`` and returns ``(events, result)``;
- ``explore``: ``await explore(scenario, check=None)`` is
  ``explore_cancellation`` with ``assert_run_invariants`` as the default check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from ._explorer import ExplorationReport, explore_cancellation
from ._invariants import assert_run_invariants
from ._scripted import ScriptedModel, ScriptedResponse


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
def explore() -> Callable[..., Any]:
    async def run(
        scenario: Callable[[], Any],
        check: Callable[[Sequence[Any], Any], Any] | None = None,
        *,
        only: int | None = None,
    ) -> ExplorationReport:
        return await explore_cancellation(scenario, check or assert_run_invariants, only=only)

    return run
