"""Parallel tool batches: wall time of 8 calls that each sleep 50 ms, and the
overhead of the batch's nursery with zero-cost tools, against sequential mode in
the same run. Run: ``python benchmarks/parallel_tools.py``."""

from __future__ import annotations

import argparse
import statistics

import trio
from _figures import add_json_option, json_output, record
from _scenario import timed_wait

from trio_agent import ToolCall, ToolRegistry, UserMessage, run_agent_loop, tool
from trio_agent.testing import ScriptedModel, scripted_response

CALLS = 8
STEPS = 64


@tool
async def nap(ms: int) -> str:
    """Sleep ms milliseconds."""
    await trio.sleep(ms / 1000)
    return "ok"


@tool
async def noop(ms: int) -> str:
    """Return at once."""
    return "ok"


def script(name: str, ms: int, steps: int) -> list:
    out = []
    for step in range(steps - 1):
        calls = [ToolCall(f"c{step}-{i}", name, {"ms": ms}) for i in range(CALLS)]
        out.append(scripted_response(f"r{step}", calls))
    out.append(scripted_response("final", "done"))
    return out


async def timed(mode: str, name: str, ms: int, steps: int) -> float:
    run = run_agent_loop(
        messages=[UserMessage("u", "go")],
        model=ScriptedModel(script(name, ms, steps)),
        tools=ToolRegistry([nap, noop]),
        max_steps=steps,
        tool_execution=mode,
    )
    return await timed_wait(run)


async def main(rounds: int) -> None:
    print(f"one batch of {CALLS} calls sleeping 50 ms (medians of {rounds}):")
    sleepy = {}
    for mode in ("sequential", "parallel"):
        sleepy[mode] = statistics.median([await timed(mode, "nap", 50, 2) for _ in range(rounds)])
        print(f"  {mode:10}: {sleepy[mode] * 1e3:7.1f} ms")
    print(f"  speed-up: {sleepy['sequential'] / sleepy['parallel']:.1f}x")
    record(sleepy_ms={mode: seconds * 1e3 for mode, seconds in sleepy.items()})
    print(f"\n{STEPS - 1} batches of {CALLS} zero-cost calls (medians of {rounds}):")
    free = {}
    for mode in ("sequential", "parallel"):
        free[mode] = statistics.median([await timed(mode, "noop", 0, STEPS) for _ in range(rounds)])
        print(f"  {mode:10}: {free[mode] / (STEPS - 1) * 1e6:7.1f} us per batch")
    extra = (free["parallel"] - free["sequential"]) / (STEPS - 1)
    record(
        free_us_per_batch={mode: seconds / (STEPS - 1) * 1e6 for mode, seconds in free.items()},
        added_us_per_call=extra / CALLS * 1e6,
    )
    print(
        f"  parallel machinery adds {extra * 1e6:.1f} us per batch "
        f"({extra / CALLS * 1e6:.1f} us per call)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    add_json_option(parser)
    args = parser.parse_args()
    with json_output(args.json):
        trio.run(main, args.rounds)
