"""What ``explore_cancellation`` costs per run, on a scenario of about 170
checkpoints (issue 17: at most 2 ms a run).

The scenario: an agent whose scripted model calls three tools (one sleeps half
an hour of virtual time, one moves stock in a nursery child, one reads it) for
several steps, under ``MockClock(autojump_threshold=0)``, explored in full
with a state check; the time per run is the exploration's wall time over its
runs (the uncancelled one, then one per checkpoint and the one before start).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import trio
import trio.testing
from _figures import add_json_option, json_output, record

from trio_agent import Agent, ToolCall, ToolRegistry, tool
from trio_agent.testing import ScriptedModel, explore_cancellation, scripted_response

STEPS = 8
SLOW_SECONDS = 1800.0
"""The slow tool's virtual time."""


def scenario() -> tuple[Any, dict[str, int]]:
    db = {"a": 100, "b": 0}

    @tool
    async def slow() -> str:
        """Half an hour of virtual time."""
        await trio.sleep(SLOW_SECONDS)
        return "slept"

    @tool
    async def move() -> str:
        """Moves 3 from a to b, both writes in one step of a nursery child."""

        async def child() -> None:
            await trio.lowlevel.checkpoint()
            db["a"] -= 3
            db["b"] += 3

        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)
        return "moved"

    @tool
    async def peek() -> str:
        """Reads the rows."""
        return f"{db['a']} {db['b']}"

    responses = [
        scripted_response(
            f"r{step}",
            [
                ToolCall(f"m{step}", "move", {}),
                ToolCall(f"s{step}", "slow", {}),
                ToolCall(f"p{step}", "peek", {}),
            ],
        )
        for step in range(STEPS)
    ] + [scripted_response("last", "done")]
    agent = Agent(model=ScriptedModel(responses), tools=ToolRegistry([slow, move, peek]))
    return agent.turn("move the stock"), db


def kept(events: Any, result: Any, db: dict[str, int]) -> None:
    assert db["a"] + db["b"] == 100


async def once() -> tuple[int, float]:
    start = time.perf_counter()
    report = await explore_cancellation(scenario, kept)
    runs = len(report.tried) + 1
    return report.checkpoints, (time.perf_counter() - start) / runs


def main(rounds: int) -> None:
    figures = []
    checkpoints = 0
    for _ in range(rounds):
        checkpoints, per_run = trio.run(once, clock=trio.testing.MockClock(autojump_threshold=0))
        figures.append(per_run)
    median = statistics.median(figures)
    verdict = "met" if median <= 0.002 else "not met"
    record(checkpoints=checkpoints, ms_per_run=median * 1e3, best_ms_per_run=min(figures) * 1e3)
    print(
        f"{checkpoints} checkpoints; per run: median {median * 1e3:.2f} ms, best "
        f"{min(figures) * 1e3:.2f} ms over {rounds} explorations (target <= 2 ms: {verdict})"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    add_json_option(parser)
    args = parser.parse_args()
    with json_output(args.json):
        main(args.rounds)
