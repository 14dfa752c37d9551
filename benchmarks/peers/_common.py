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
