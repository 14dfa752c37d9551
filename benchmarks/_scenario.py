"""The scripted scenario the benchmarks share: a 64-step run, each step 10
text chunks and one ``add`` tool call, the last step 10 chunks of final text."""

from __future__ import annotations

import time
from typing import Any

from trio_agent import MAX_AGENT_STEPS, TextBlock, ToolCall, tool
from trio_agent.testing import ScriptedResponse, scripted_response

STEPS = MAX_AGENT_STEPS
CHUNKS = 10


@tool
async def add(left: int, right: int) -> dict[str, int]:
    """Add two integers."""
    return {"sum": left + right}


def script(steps: int = STEPS) -> list[ScriptedResponse]:
    out = []
    text = "0123456789" * 4
    for step in range(steps - 1):
        call = ToolCall(f"call-{step}", "add", {"left": step, "right": 1})
        out.append(scripted_response(f"r{step}", [TextBlock(text), call], text_chunks=CHUNKS))
    out.append(scripted_response("final", text, text_chunks=CHUNKS))
    return out


async def timed_wait(run: Any) -> float:
    """Seconds ``await run.wait()`` takes; the run must complete."""
    start = time.perf_counter()
    result = await run.wait()
    elapsed = time.perf_counter() - start
    assert result.status == "completed", result
    return elapsed
