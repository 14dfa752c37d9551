"""What every peer script shares: the workload CLI and the measurements."""

from __future__ import annotations

import json
import resource
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

TURN_REQUESTS = 64
"""Model requests in one turn, at most: trio-agent's step budget is per turn and
at most ``MAX_AGENT_STEPS`` (64), so every framework runs a longer run as turns
of 64 requests on one growing conversation."""

W3_REQUESTS = 5
"""W3's runs (and every script's warm-up run): 4 tool steps, then a final text."""


def turn_plan(requests: int) -> tuple[tuple[int, int], ...]:
    """The turns of a run of ``requests`` model requests, as ``(first call index,
    tool steps)``: each turn is its tool steps (one ``add`` call a request) and a
    final text, at most ``TURN_REQUESTS`` requests a turn; a later turn goes on
    with the whole history of the earlier ones (a user message starts it). Call
    ids count up across turns (``c0``, ``c1``, ...)."""
    if requests < 1:
        raise ValueError(f"a run needs at least one request, got {requests}")
    plan, start = [], 0
    while requests > 0:
        size = min(requests, TURN_REQUESTS)
        plan.append((start, size - 1))
        start += size - 1
        requests -= size
    return tuple(plan)


def turn_prompt(start: int) -> str:
    """The user message starting the turn whose first call is number ``start``
    (the peers' scripted models read where they are off it)."""
    return "add them" if start == 0 else f"add them:{start}"


def prompt_start(text: str) -> int:
    """``turn_prompt``'s inverse."""
    return int(text.rpartition(":")[2]) if ":" in text else 0


class Plan:
    """What a scripted model answers at each point of a ``turn_plan``, read off the
    last message alone so that it costs the same at every step: a call, or the
    turn's final text."""

    __slots__ = ("ends", "steps_from")

    def __init__(self, requests: int) -> None:
        plan = turn_plan(requests)
        self.steps_from = dict(plan)  # a turn's first call index -> its tool steps
        self.ends = {start + steps for start, steps in plan}  # calls done when a turn ends

    def after_result(self, call_index: int) -> int | None:
        """After the result of call ``call_index``: the next call's index, or None
        for the turn's final text."""
        done = call_index + 1
        return None if done in self.ends else done

    def at_turn_start(self, start: int) -> int | None:
        """At the user message of the turn starting at ``start``: its first call's
        index, or None if the turn has no tool step."""
        return start if self.steps_from[start] else None


def peak_rss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


MIN_MEASURED_SECONDS = 0.5
"""Runs go on past ``rounds`` until this long was measured: a peer's ten runs take
seconds, while ten of trio-agent's 64-request runs take about 12 ms, a window in
which the first runs' warm-up and one preemption by another process weigh on the
median. The same rule for every framework (a peer's ten runs already pass it)."""


async def per_request(run: Callable[[int], Awaitable[Any]], requests: int, rounds: int) -> float:
    """Median seconds per model request of runs of ``requests`` requests: at least
    ``rounds`` runs, and more until ``MIN_MEASURED_SECONDS`` were measured."""
    times: list[float] = []
    measured = 0.0
    while len(times) < rounds or measured < MIN_MEASURED_SECONDS:
        start = time.perf_counter()
        await run(requests)
        took = time.perf_counter() - start
        measured += took
        times.append(took / requests)
    return statistics.median(times)


def emit(framework: str, workload: str, **figures: Any) -> None:
    print(json.dumps({"framework": framework, "workload": workload, **figures}))


def args() -> tuple[str, list[int]]:
    workload, *rest = sys.argv[1:]
    return workload, [int(x) for x in rest]


async def event_rate(
    framework: str, workload: str, rounds: int, once: Callable[[], Awaitable[int]]
) -> None:
    """Emit the median events per second of ``once`` (which returns its event
    count) over ``rounds`` runs after one warm-up run."""
    await once()
    rates = []
    for _ in range(rounds):
        start = time.perf_counter()
        count = await once()
        rates.append(count / (time.perf_counter() - start))
    emit(framework, workload, events_per_s=statistics.median(rates), events=count)


async def serve(
    framework: str,
    run: Callable[[int], Awaitable[Any]],
    concurrently: Callable[[int], Awaitable[Any]],
    others: dict[str, Callable[..., Awaitable[None]]],
) -> None:
    """Run the workload named on the command line. W1/W5 time ``run(requests)``
    (``turn_plan(requests)``); W3 times ``concurrently(runs)`` (``runs`` runs of
    ``W3_REQUESTS`` at once) and the peak RSS it adds; ``others`` hold the
    framework-specific workloads."""
    workload, numbers = args()
    await run(W3_REQUESTS)  # warm-up: import and build costs stay out of every figure
    if workload in ("w1", "w5"):
        requests, rounds = numbers
        figure = await per_request(run, requests, rounds) * 1e6
        emit(framework, workload, requests=requests, us_per_request=figure)
    elif workload == "w3":
        (runs,) = numbers
        base = peak_rss_kb()
        start = time.perf_counter()
        await concurrently(runs)
        elapsed = time.perf_counter() - start
        emit(framework, "w3", runs=runs, seconds=elapsed, kb_per_run=(peak_rss_kb() - base) / runs)
    elif workload in others:
        await others[workload](*numbers)
    else:
        raise SystemExit(f"{framework}: no workload {workload!r} (w1 w3 w5 {' '.join(others)})")
