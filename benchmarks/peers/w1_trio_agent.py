"""W1 on trio-agent: 65 model requests, 64 steps each calling add(left, right), then a
final text. Prints the per-step time in microseconds (median of rounds) as JSON."""

from __future__ import annotations

import json
import statistics
import sys
import time

import trio

from trio_agent import Agent, ToolCall, ToolRegistry, tool
from trio_agent.testing import ScriptedModel, scripted_response

STEPS = 64


@tool
async def add(left: int, right: int) -> int:
    """Add two integers."""
    return left + right


def script():
    out = [
        scripted_response(f"r{i}", [ToolCall(f"c{i}", "add", {"left": i, "right": 1})])
        for i in range(STEPS)
    ]
    out.append(scripted_response("final", "done"))
    return out


async def once() -> float:
    agent = Agent(model=ScriptedModel(script()), tools=ToolRegistry([add]), max_steps=STEPS + 1)
    start = time.perf_counter()
    result = await agent.prompt("add them")
    elapsed = time.perf_counter() - start
    assert result.end.reason == "completed" and result.steps == STEPS + 1, result.end
    return elapsed / (STEPS + 1)


async def main(rounds: int) -> None:
    times = [await once() for _ in range(rounds)]
    print(json.dumps({"framework": "trio-agent", "us_per_step": statistics.median(times) * 1e6}))


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 20)
