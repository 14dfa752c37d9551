"""W1 on pydantic-ai: FunctionModel, UsageLimits(request_limit=None); same workload."""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

STEPS = 64


def respond(messages, info: AgentInfo) -> ModelResponse:
    returns = sum(
        1 for m in messages for p in getattr(m, "parts", ()) if isinstance(p, ToolReturnPart)
    )
    if returns < STEPS:
        return ModelResponse(
            parts=[ToolCallPart("add", {"left": returns, "right": 1}, tool_call_id=f"c{returns}")]
        )
    return ModelResponse(parts=[TextPart("done")])


agent = Agent(FunctionModel(respond))


@agent.tool_plain
async def add(left: int, right: int) -> int:
    """Add two integers."""
    return left + right


async def once() -> float:
    start = time.perf_counter()
    result = await agent.run("add them", usage_limits=UsageLimits(request_limit=None))
    elapsed = time.perf_counter() - start
    assert result.output == "done"
    return elapsed / (STEPS + 1)


async def main(rounds: int) -> None:
    times = [await once() for _ in range(rounds)]
    print(json.dumps({"framework": "pydantic-ai", "us_per_step": statistics.median(times) * 1e6}))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20))
