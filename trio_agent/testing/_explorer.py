"""``explore_cancellation``: cancel a scenario after each of its checkpoints in turn."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any, final

import attrs
import trio

__all__ = ["ExplorationFailure", "ExplorationReport", "explore_cancellation"]

Check = Callable[[Sequence[Any], Any], Any]

try:  # pytest.fail() and friends are BaseExceptions: report them like any failure
    from _pytest.outcomes import OutcomeException as _Outcome
except ImportError:  # pragma: no cover - pytest is not installed
    _Outcome = Exception  # type: ignore[assignment,misc]

_SEED = 0x7A6E7


def _seed_scheduler() -> None:
    """trio picks the order of ready tasks at random; seeding its generator makes a
    deterministic scenario schedule the same way every time (a private detail of
    trio: without it the exploration still works, only less repeatably)."""
    from trio._core import _run

    generator = getattr(_run, "_r", None)
    if generator is not None:
        generator.seed(_SEED)


class ExplorationFailure(AssertionError):
    """``check`` failed with the run cancelled after ``checkpoint`` checkpoints (None:
    the run that was not cancelled). ``events`` is what the consumer saw; replay that
    one case with ``explore_cancellation(scenario, check, only=checkpoint)``."""

    def __init__(self, checkpoint: int | None, events: Sequence[Any], error: BaseException) -> None:
        trace = "\n".join(f"  {e.sequence}: {e.type}" for e in events)
        where = (
            "the run without a cancel"
            if checkpoint is None
            else f"the run cancelled after checkpoint {checkpoint}"
        )
        replay = "" if checkpoint is None else f"\nreplay it with only={checkpoint}"
        super().__init__(
            f"check failed for {where}: {type(error).__name__}: {error}\nevents:\n{trace}{replay}"
        )
        self.checkpoint = checkpoint
        self.events = tuple(events)
        self.error = error


@final
@attrs.frozen
class ExplorationReport:
    """What the exploration did: the checkpoints of the run without a cancel, and the
    result status (or turn end reason) for each cancellation point (0 = before start)."""

    checkpoints: int
    outcomes: tuple[str, ...]


class _CancelAfter(trio.abc.Instrument):
    """Counts the steps of the run's tasks (its own, and tool calls run as tasks)."""

    def __init__(self, run: Any, k: int | None) -> None:
        self.run, self.k = run, k
        self.steps = 0
        self.fired = False

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if not task.name.startswith("trio_agent."):
            return
        self.steps += 1
        if self.steps == self.k and not self.fired:
            self.fired = True
            self.run.cancel()


async def _once(run: Any, k: int | None, seconds: float) -> tuple[list[Any], Any, int]:
    instrument = _CancelAfter(run, k)
    if k == 0:
        run.cancel()
    events: list[Any] = []
    _seed_scheduler()
    trio.lowlevel.add_instrument(instrument)
    try:
        with trio.fail_after(seconds):
            async with run:
                async for event in run:
                    events.append(event)
    except trio.TooSlowError as exc:
        raise ExplorationFailure(k, events, exc) from None
    finally:
        trio.lowlevel.remove_instrument(instrument)
    return events, run.result, instrument.steps


def outcome_of(result: Any) -> str:
    """A run result's ``status``, or a turn result's end ``reason``."""
    status = getattr(result, "status", None)
    return str(status if status is not None else result.end.reason)


async def explore_cancellation(
    scenario: Callable[[], Any],
    check: Check,
    *,
    only: int | None = None,
    seconds_per_run: float = 60.0,
) -> ExplorationReport:
    """Run ``scenario()`` once to count its checkpoints, then once per checkpoint,
    cancelling the run (``run.cancel()``) right after that checkpoint; call
    ``check(events, result)`` (sync or async) after every run, the first too.

    ``scenario`` returns a fresh, not yet entered run: ``run_agent_loop(...)``
    or ``agent.turn(...)`` on an agent it builds (sharing one agent between
    runs is refused: the runs would not be alike). Checkpoints are the steps
    of the run's tasks (its own and its tool calls'), counted with trio's
    instrumentation; trio's scheduler is seeded for each run, so a
    deterministic scenario gives the same cancellation points every time.
    Checkpoint 0 is a cancel before the run starts; ``only=k`` runs that one
    case. A failing check, or a run longer than ``seconds_per_run`` (it hangs), raises
    ``ExplorationFailure`` with the checkpoint and the events.

    Cancellation: cancelling the caller stops the exploration.
    """
    seen: list[Any] = []

    def fresh() -> Any:
        run = scenario()
        agent = getattr(run, "_agent", None)
        if agent is not None:
            if any(agent is other for other in seen):
                raise TypeError("the scenario must build a new Agent for every run")
            seen.append(agent)
        return run

    async def checked(k: int | None) -> tuple[Any, int]:
        events, result, steps = await _once(fresh(), k, seconds_per_run)
        try:
            outcome = check(events, result)
            if inspect.isawaitable(outcome):
                await outcome
        except (Exception, _Outcome) as exc:
            raise ExplorationFailure(k, events, exc) from exc
        return result, steps

    if not (seconds_per_run > 0 and math.isfinite(seconds_per_run)):
        raise ValueError(f"seconds_per_run must be a finite number > 0, got {seconds_per_run!r}")
    if only is not None:
        result, _ = await checked(only)
        return ExplorationReport(checkpoints=only, outcomes=(outcome_of(result),))
    result, checkpoints = await checked(None)
    outcomes = []
    for k in range(checkpoints + 1):
        result, _ = await checked(k)
        outcomes.append(outcome_of(result))
    return ExplorationReport(checkpoints=checkpoints, outcomes=tuple(outcomes))
