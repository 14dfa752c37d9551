"""What every peer script shares: the workload CLI and the measurements."""

from __future__ import annotations

import json
import resource
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any


def peak_rss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


async def per_step(run: Callable[[int], Awaitable[Any]], steps: int, rounds: int) -> float:
    """Median seconds per model request of a run with ``steps`` tool steps."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        await run(steps)
        times.append((time.perf_counter() - start) / (steps + 1))
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
    """Run the workload named on the command line. W1/W5 time ``run(steps)``;
    W3 times ``concurrently(runs)`` (``runs`` 4-step runs at once) and the peak
    RSS it adds; ``others`` hold the framework-specific workloads."""
    workload, numbers = args()
    await run(4)  # warm-up: import and build costs stay out of every figure
    if workload in ("w1", "w5"):
        steps, rounds = numbers
        figure = await per_step(run, steps, rounds) * 1e6
        emit(framework, workload, steps=steps, us_per_step=figure)
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
