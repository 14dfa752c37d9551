"""``explore_cancellation``: cancel a scenario after each of its checkpoints in turn."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, final

import attrs
import trio

__all__ = ["ExplorationFailure", "ExplorationReport", "explore_cancellation"]

Check = Callable[[Sequence[Any], Any], Awaitable[None] | None]


class ExplorationFailure(AssertionError):
    """``check`` failed when the run was cancelled after ``checkpoint`` checkpoints.

    ``events`` is what the consumer saw; replay that one case with
    ``explore_cancellation(scenario, check, only=checkpoint)``.
    """

    def __init__(self, checkpoint: int, events: Sequence[Any], error: BaseException) -> None:
        trace = "\n".join(f"  {e.sequence}: {e.type}" for e in events)
        super().__init__(
            f"check failed with the run cancelled after checkpoint {checkpoint}: "
            f"{type(error).__name__}: {error}\nevents:\n{trace}\n"
            f"replay it with only={checkpoint}"
        )
        self.checkpoint = checkpoint
        self.events = tuple(events)
        self.error = error


@final
@attrs.frozen
class ExplorationReport:
    """What the exploration did: the checkpoints of the uncancelled run, and the
    result status (or turn end reason) for each cancellation point (0 = before start)."""

    checkpoints: int
    outcomes: tuple[str, ...]


class _CancelAfter(trio.abc.Instrument):
    def __init__(self, run: Any, task_name: str, k: int | None) -> None:
        self.run, self.task_name, self.k = run, task_name, k
        self.steps = 0
        self.fired = False

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name != self.task_name:
            return
        self.steps += 1
        if self.steps == self.k and not self.fired:
            self.fired = True
            self.run.cancel()


async def _once(scenario: Callable[[], Any], k: int | None) -> tuple[list[Any], Any, int, bool]:
    run = scenario()
    instrument = _CancelAfter(run, run._task_name, k)
    if k == 0:
        run.cancel()
        instrument.fired = True
    trio.lowlevel.add_instrument(instrument)
    events: list[Any] = []
    try:
        async with run:
            async for event in run:
                events.append(event)
    finally:
        trio.lowlevel.remove_instrument(instrument)
    return events, run.result, instrument.steps, instrument.fired


def _outcome(result: Any) -> str:
    status = getattr(result, "status", None)
    return status if status is not None else result.end.reason


async def explore_cancellation(
    scenario: Callable[[], Any],
    check: Check,
    *,
    only: int | None = None,
) -> ExplorationReport:
    """Run ``scenario()`` once to count its checkpoints, then once per checkpoint,
    cancelling the run (``run.cancel()``) right after that checkpoint; call
    ``check(events, result)`` (sync or async) after every run, the first too.

    ``scenario`` returns a fresh, not yet entered run: ``run_agent_loop(...)``
    or ``agent.turn(...)`` (on a fresh agent each time). Checkpoints are the
    steps of the run's own task (trio instrumentation), so a deterministic
    scenario gives the same cancellation points every time. Checkpoint 0 is
    a cancel before the run starts. A failing check raises
    ``ExplorationFailure`` with the checkpoint and the events; ``only=k``
    replays that one case.

    Cancellation: cancelling the caller stops the exploration.
    """

    async def checked(k: int | None) -> tuple[Any, int, bool]:
        events, result, steps, fired = await _once(scenario, k)
        try:
            outcome = check(events, result)
            if outcome is not None:
                await outcome
        except Exception as exc:
            raise ExplorationFailure(-1 if k is None else k, events, exc) from exc
        return result, steps, fired

    if only is not None:
        result, _, _ = await checked(only)
        return ExplorationReport(checkpoints=only, outcomes=(_outcome(result),))
    result, checkpoints, _ = await checked(None)
    outcomes = []
    for k in range(checkpoints + 1):
        result, _, _ = await checked(k)
        outcomes.append(_outcome(result))
    return ExplorationReport(checkpoints=checkpoints, outcomes=tuple(outcomes))
