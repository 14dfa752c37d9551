"""``explore_cancellation``: cancel a scenario after each of its checkpoints in turn."""

from __future__ import annotations

import inspect
import math
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, final

import attrs
import trio

__all__ = ["ExplorationFailure", "ExplorationReport", "explore_cancellation", "seeded_scheduler"]

Check = Callable[..., Any]
TaskFilter = Callable[[trio.lowlevel.Task], bool]

try:  # pytest.fail() and friends are BaseExceptions: report them like any failure
    from _pytest.outcomes import OutcomeException as _Outcome
except ImportError:  # pragma: no cover - pytest is not installed
    _Outcome = Exception  # type: ignore[assignment,misc]

_SEED = 0x7A6E7
_LISTED = 10
"""Failing checkpoints a report lists by number."""
_TRIO_DIR = os.path.dirname(trio.__file__)


class _FixedOrder(random.Random):
    """trio's generator while the scheduler is fixed. Each batch of ready tasks
    draws once: to reverse it or not (``random``), or, in trio's deterministic
    mode (on once hypothesis is imported), to shuffle it after sorting it by
    the tasks' age (``shuffle``); trio then runs it from its end. Both draws
    turn it around: a batch runs in the order its tasks became ready (oldest
    first in that mode), whatever other tasks drew before. The other methods
    stay seeded."""

    def random(self) -> float:
        return 0.25  # below one half: trio reverses the batch

    def shuffle(self, x: Any) -> None:
        x.reverse()


@final
class _Fixing:
    """How many ``seeded_scheduler`` blocks are open, and trio's own generator
    while any is: the first one in swaps it, the last one out puts it back,
    however the blocks overlap (two explorations in one nursery)."""

    open = 0
    saved: Any = None


@contextmanager
def seeded_scheduler() -> Iterator[None]:
    """trio picks the order of ready tasks at random; fixing it (each batch runs in
    the order its tasks became ready) makes a deterministic scenario schedule the
    same way every time, and whatever else runs in the process (a private detail
    of trio: without it things still work, only less repeatably). Put back when
    the last such block ends."""
    from trio._core import _run

    scheduler = vars(_run)  # trio's generator is a name in that module
    if scheduler.get("_r") is None:
        yield
        return
    if _Fixing.open == 0:
        _Fixing.saved = scheduler["_r"]
        scheduler["_r"] = _FixedOrder(_SEED)
    _Fixing.open += 1
    try:
        yield
    finally:
        _Fixing.open -= 1
        if _Fixing.open == 0:
            scheduler["_r"], _Fixing.saved = _Fixing.saved, None


def _reseed() -> None:
    from trio._core import _run

    generator = getattr(_run, "_r", None)
    if generator is not None:
        generator.seed(_SEED)


class ExplorationFailure(AssertionError):
    """A run of the exploration went wrong: ``check`` failed (``kind`` "check"), or
    the run did not finish within ``seconds_per_run`` of wall-clock time (``kind``
    "hang"; "check hang" when the check itself did not), with the run cancelled
    after ``checkpoint`` checkpoints (None: the run that was not cancelled).
    ``where`` is the task whose step was that checkpoint and the ``file:line`` it
    paused at (None when that step was the task's last); ``events`` what the
    consumer saw; ``failures`` every failing checkpoint of the exploration (this
    one first), of ``runs``. Replay one case with
    ``explore_cancellation(scenario, check, only=checkpoint)``."""

    def __init__(
        self,
        checkpoint: int | None,
        events: Sequence[Any],
        error: BaseException | None,
        *,
        kind: str = "check",
        where: tuple[str, str | None] | None = None,
        seconds: float = 0.0,
    ) -> None:
        self.checkpoint = checkpoint
        self.events = tuple(events)
        self.error = error
        self.kind = kind
        self.where = where
        self.seconds = seconds
        self.failures: tuple[int | None, ...] = (checkpoint,)
        self.runs = 0
        super().__init__(self._text())

    def _text(self) -> str:
        run = (
            "the run without a cancel"
            if self.checkpoint is None
            else f"the run cancelled after checkpoint {self.checkpoint}"
        )
        if self.where is not None and self.where[1] is None:  # lands in the others
            run += f" (the last step of task {self.where[0]}, which then ended)"
        elif self.where is not None:  # the cancel lands at that await or the task's next one
            run += f" (in task {self.where[0]}, paused at {self.where[1]})"
        if self.kind == "hang":
            head = f"{run} did not finish within {self.seconds} s wall"
        elif self.kind == "check hang":
            head = f"the check of {run} did not finish within {self.seconds} s wall"
        else:
            head = f"check failed for {run}: {type(self.error).__name__}: {self.error}"
        trace = "\n".join(f"  {_line(event)}" for event in self.events)
        text = f"{head}\nevents:\n{trace}"
        if self.checkpoint is not None:
            text += f"\nreplay it with only={self.checkpoint}"
        if self.runs:
            listed = ", ".join(str(k) for k in self.failures[:_LISTED])
            more = ", ..." if len(self.failures) > _LISTED else ""
            text += (
                f"\n{len(self.failures)} of {self.runs} runs failed, at checkpoints {listed}{more}"
            )
        return text

    def of_many(self, failures: Sequence[int | None], runs: int) -> ExplorationFailure:
        """This failure, standing for ``failures`` (their checkpoints) of ``runs`` runs."""
        self.failures, self.runs = tuple(failures), runs
        self.args = (self._text(),)
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        """Copies and pickles (the arguments of ``__init__`` are not its ``args``)."""
        return (_restored, (type(self), self.args, dict(self.__dict__)))


def _restored(
    cls: type[ExplorationFailure], args: tuple[Any, ...], state: dict[str, Any]
) -> ExplorationFailure:
    failure = cls.__new__(cls)
    failure.args = args
    failure.__dict__.update(state)
    return failure


def _line(event: Any) -> str:
    """One event in a report: sequence, type, and the tool name and call id it is
    about, if any."""
    line = f"{getattr(event, 'sequence', '?')}: {getattr(event, 'type', type(event).__name__)}"
    call = getattr(event, "call", None)
    if call is not None:
        line += f" {call.name} {call.id}"
    return line


@final
@attrs.frozen
class ExplorationReport:
    """What the exploration did: the checkpoints of the run without a cancel, and the
    result status (or turn end reason) for each cancellation point tried (0 =
    before start; all of them unless ``max_runs`` sampled them: ``tried``)."""

    checkpoints: int
    outcomes: tuple[str, ...]
    tried: tuple[int, ...] = ()


def _under(task: trio.lowlevel.Task, nurseries: Sequence[trio.Nursery]) -> bool:
    """Whether ``task`` was started in one of ``nurseries`` or below them."""
    current: trio.lowlevel.Task | None = task
    while current is not None:
        nursery = current.parent_nursery
        if nursery is None:
            return False
        if any(nursery is mine for mine in nurseries):
            return True
        current = nursery.parent_task
    return False


def _location(task: trio.lowlevel.Task) -> str | None:
    """``file:line`` where ``task`` waits: its innermost frame outside trio, or for
    a task that is trio's own from its first frame (``start_soon(trio.sleep, 5)``)
    its innermost frame, said to be inside trio (None when it has no frame left:
    that step was its last)."""
    if getattr(task.coro, "cr_frame", True) is None:
        return None
    found = inside = None
    for frame, line in task.iter_await_frames():
        code = frame.f_code
        name = code.co_filename
        if not name.startswith(_TRIO_DIR):
            found = f"{os.path.relpath(name) if name.startswith(os.sep) else name}:{line}"
        else:
            place = os.path.relpath(name, os.path.dirname(_TRIO_DIR))
            inside = f"{place}:{line} (in trio's {code.co_name}, no frame of the task's own)"
    return found or inside or f"the start of task {task.name}"


class _CancelAfter(trio.abc.Instrument):
    """Counts the steps of the run's tasks and their descendants (those of them
    ``counted`` picks, if given); cancels the run after the ``k``-th, noting where.
    A ``counted`` that raises cancels the run; its error is kept in ``error``."""

    def __init__(self, run: Any, k: int | None, counted: TaskFilter | None) -> None:
        self.run, self.k = run, k
        self.steps = 0
        self.fired = False
        self.where: tuple[str, str | None] | None = None
        self.nurseries: Sequence[trio.Nursery] = ()
        self.error: Exception | None = None
        self._counted = counted
        self._known: dict[trio.lowlevel.Task, bool] = {}

    def picks(self, task: trio.lowlevel.Task) -> bool:
        """A task started in the run's own nursery, or below it (so another agent
        running meanwhile adds no points), that ``tasks=`` (if given) keeps."""
        if not _under(task, self.nurseries):
            return False
        if self._counted is None:
            return True
        try:
            return bool(self._counted(task))
        except Exception as exc:  # trio would drop the instrument: stop the run instead
            if self.error is None:
                self.error = exc
                self.run.cancel()
            return False

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        counted = self._known.get(task)
        if counted is None:
            counted = self._known[task] = self.picks(task)
        if not counted:
            return
        self.steps += 1
        if self.steps == self.k and not self.fired:
            self.fired = True
            self.where = (task.name, _location(task))
            self.run.cancel()


@final
class _Watchdog:
    """One thread for a whole exploration: armed for each run with its cancel scope
    and a wall-clock deadline, it cancels the scope (through the trio token) if the
    run is still going then. Disarmed at the run's end; stopped at the end."""

    def __init__(self, token: trio.lowlevel.TrioToken) -> None:
        self._token = token
        self._lock = threading.Condition()
        self._armed: tuple[trio.CancelScope, float] | None = None
        self._stopped = False
        self._thread = threading.Thread(target=self._watch, name="trio-agent explorer", daemon=True)
        self._thread.start()

    def arm(self, scope: trio.CancelScope, seconds: float) -> None:
        with self._lock:
            self._armed = (scope, time.monotonic() + seconds)
            self._lock.notify()

    def disarm(self) -> None:
        with self._lock:
            self._armed = None

    @contextmanager
    def limit(self, seconds: float) -> Iterator[trio.CancelScope]:
        """A cancel scope the thread cancels after ``seconds`` of wall-clock time."""
        with trio.CancelScope() as scope:
            self.arm(scope, seconds)
            try:
                yield scope
            finally:
                self.disarm()

    def stop(self) -> None:
        """Let the thread end (not waited for: it ends at once, on its own)."""
        with self._lock:
            self._stopped = True
            self._lock.notify()

    def _watch(self) -> None:
        with self._lock:
            while not self._stopped:
                if self._armed is None:
                    self._lock.wait()
                    continue
                scope, deadline = self._armed
                left = deadline - time.monotonic()
                if left > 0:
                    self._lock.wait(left)
                    continue
                self._armed = None
                try:
                    self._token.run_sync_soon(scope.cancel)
                except trio.RunFinishedError:  # the run ended meanwhile
                    pass


async def _once(
    run: Any, k: int | None, seconds: float, counted: TaskFilter | None, watchdog: _Watchdog
) -> tuple[list[Any], Any, _CancelAfter]:
    """One run of the scenario, cancelled after checkpoint ``k``; stopped if it
    takes more than ``seconds`` of wall-clock time (``watchdog``'s thread,
    whatever clock the test runs on), which raises a hang."""
    instrument = _CancelAfter(run, k, counted)
    if k == 0:
        run.cancel()
    events: list[Any] = []
    _reseed()
    explorer = trio.lowlevel.current_task()
    before = explorer.child_nurseries
    with watchdog.limit(seconds) as limit:
        trio.lowlevel.add_instrument(instrument)
        try:
            async with run:
                # the nursery the run opened here (its tasks have not stepped yet)
                instrument.nurseries = [
                    nursery
                    for nursery in explorer.child_nurseries
                    if not any(nursery is old for old in before)
                ]
                async for event in run:
                    events.append(event)
        finally:
            trio.lowlevel.remove_instrument(instrument)
    if instrument.error is not None:
        raise TypeError(
            f"the tasks= predicate raised {type(instrument.error).__name__}: {instrument.error}"
        ) from instrument.error
    if limit.cancelled_caught:
        raise ExplorationFailure(
            k, events, None, kind="hang", where=instrument.where, seconds=seconds
        )
    return events, run.result, instrument


def _described(made: Any) -> str:
    if inspect.iscoroutine(made) or (type(made) is tuple and made and inspect.iscoroutine(made[0])):
        return "a coroutine (is the scenario an async def?)"
    if type(made) is tuple and made:
        return f"a tuple whose first item is {type(made[0]).__name__} (the run goes first)"
    return f"{type(made).__name__}"


def outcome_of(result: Any) -> str:
    """A run result's ``status``, or a turn result's end ``reason``."""
    status = getattr(result, "status", None)
    return str(status if status is not None else result.end.reason)


@final
class _Exploration:
    """The runs of one exploration: fresh scenarios, each run checked, failures
    collected."""

    def __init__(
        self, scenario: Callable[[], Any], check: Check, seconds: float, counted: TaskFilter | None
    ) -> None:
        self.scenario, self.check, self.seconds, self.counted = scenario, check, seconds, counted
        self.watchdog = _Watchdog(trio.lowlevel.current_trio_token())
        self.seen: list[Any] = []
        self.failures: list[ExplorationFailure] = []

    def fresh(self) -> tuple[Any, tuple[Any, ...]]:
        """A new run, and the state the scenario returned with it (if any)."""
        made = self.scenario()
        run, state = (made[0], tuple(made[1:])) if type(made) is tuple and made else (made, ())
        if not (hasattr(run, "__aenter__") and callable(getattr(run, "cancel", None))):
            if inspect.iscoroutine(run):
                run.close()
            raise TypeError(
                "the scenario must be a plain function returning a fresh run "
                "(run_agent_loop(...) or agent.turn(...)) or a tuple (run, state, ...), "
                f"got {_described(made)}"
            )
        agent = getattr(run, "owner", None)  # a turn's agent (its state); None for a loop run
        if agent is not None:
            if any(agent is other for other in self.seen):
                raise TypeError("the scenario must build a new Agent for every run")
            self.seen.append(agent)
        return run, state

    async def count(self) -> int:
        """The checkpoints of a run without a cancel (not checked)."""
        run, _ = self.fresh()
        return (await _once(run, None, self.seconds, self.counted, self.watchdog))[2].steps

    async def checked(self, k: int | None) -> tuple[Any, int]:
        """One run, cancelled after ``k``, checked; a failure is kept (and the
        result None) so the exploration goes on."""
        run, state = self.fresh()
        try:
            events, result, instrument = await _once(
                run, k, self.seconds, self.counted, self.watchdog
            )
        except ExplorationFailure as hang:
            self.failures.append(hang)
            return None, 0
        where = instrument.where
        try:
            with self.watchdog.limit(self.seconds) as limit:
                outcome = self.check(events, result, *state)
                if inspect.isawaitable(outcome):
                    await outcome
        except (Exception, _Outcome) as exc:
            self.failures.append(ExplorationFailure(k, events, exc, where=where))
            return None, instrument.steps
        if limit.cancelled_caught:
            self.failures.append(
                ExplorationFailure(
                    k, events, None, kind="check hang", where=where, seconds=self.seconds
                )
            )
            return None, instrument.steps
        return result, instrument.steps

    async def explore(self, only: int | None, max_runs: int | None, seed: int) -> ExplorationReport:
        """The runs: the uncancelled one, then one per point (or ``only``)."""
        if only is not None:
            checkpoints = await self.count()
            result, _ = await self.checked(only)
            self.raise_failures(1)
            return ExplorationReport(checkpoints, (outcome_of(result),), (only,))
        result, checkpoints = await self.checked(None)
        self.raise_failures(1)
        points = list(range(checkpoints + 1))
        if max_runs is not None and max_runs < len(points):
            points = sorted(random.Random(seed).sample(points, max_runs))
        outcomes = []
        for k in points:
            result, _ = await self.checked(k)
            outcomes.append("failed check" if result is None else outcome_of(result))
        self.raise_failures(len(points) + 1)
        return ExplorationReport(checkpoints, tuple(outcomes), tuple(points))

    def raise_failures(self, runs: int) -> None:
        if self.failures:
            first = self.failures[0]
            raise first.of_many([f.checkpoint for f in self.failures], runs) from first.error


async def explore_cancellation(
    scenario: Callable[[], Any],
    check: Check,
    *,
    only: int | None = None,
    seconds_per_run: float = 60.0,
    tasks: TaskFilter | None = None,
    max_runs: int | None = None,
    seed: int = 0,
) -> ExplorationReport:
    """Run ``scenario()`` once to count its checkpoints, then once per checkpoint,
    cancelling the run (``run.cancel()``) right after that checkpoint; call
    ``check(events, result)`` (sync or async) after every run, the first too.

    ``scenario`` returns a fresh, not yet entered run: ``run_agent_loop(...)``
    or ``agent.turn(...)`` on an agent it builds (sharing one agent between
    runs is refused: the runs would not be alike); or a tuple ``(run, state,
    ...)``, and then ``check(events, result, state, ...)`` sees the
    application's state too. Checkpoints are the steps of the run's own tasks
    and of every task they start, transitively (a tool's nursery and its
    children), counted with trio's instrumentation; other agents running
    meanwhile do not count. ``tasks=`` (a predicate on a ``trio.lowlevel.Task``)
    narrows them to the tasks it keeps. trio's scheduler runs ready tasks in a
    fixed order meanwhile, so a deterministic scenario gives the same
    cancellation points every time, whatever else runs (and is put back as it
    was afterwards). Checkpoint 0 is a cancel
    before the run starts; ``only=k`` runs that one case (a ``k`` past the last
    checkpoint cancels nothing: compare ``report.checkpoints``); ``max_runs=n``
    samples n of the cancellation points (with ``seed``) for a very large
    scenario.

    Every run is tried; if any failed, one ``ExplorationFailure`` (an
    ``AssertionError``) reports the first, by checkpoint number, the task and
    ``file:line`` the cancel landed in, and the events with tool names and call
    ids, and counts the others. A run that takes longer than
    ``seconds_per_run`` of wall-clock time (whatever clock the test uses) is
    stopped and reported as a hang, not as a failed check; so is a check that
    takes longer than that.

    Cancellation: cancelling the caller stops the exploration.
    """
    if not (seconds_per_run > 0 and math.isfinite(seconds_per_run)):
        raise ValueError(f"seconds_per_run must be a finite number > 0, got {seconds_per_run!r}")
    if only is not None and (type(only) is not int or only < 0):
        raise ValueError(f"only must be an int >= 0 (a checkpoint), got {only!r}")
    if max_runs is not None and (type(max_runs) is not int or max_runs < 1):
        raise ValueError(f"max_runs must be an int >= 1, got {max_runs!r}")
    exploration = _Exploration(scenario, check, seconds_per_run, tasks)
    try:
        with seeded_scheduler():
            return await exploration.explore(only, max_runs, seed)
    finally:
        exploration.watchdog.stop()
