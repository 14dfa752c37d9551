"""The workloads on pydantic-ai (see run.py): FunctionModel, no request limit."""

from __future__ import annotations

import asyncio
import json
import time

from _common import emit, event_rate, serve
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.usage import UsageLimits


def _steps_done(messages) -> int:
    """Tool steps done so far, read off the last message (call ids count up), so the
    scripted model costs the same at every step and W5 measures the framework."""
    parts = getattr(messages[-1], "parts", ())
    done = next((p for p in parts if isinstance(p, ToolReturnPart)), None)
    return 0 if done is None else int(done.tool_call_id[1:]) + 1


def agent_for(steps: int) -> Agent:
    """``steps`` tool steps calling add, then a final text."""

    def respond(messages, info: AgentInfo) -> ModelResponse:
        returns = _steps_done(messages)
        if returns < steps:
            call = ToolCallPart("add", {"left": returns, "right": 1}, tool_call_id=f"c{returns}")
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(respond))

    @agent.tool_plain
    async def add(left: int, right: int) -> int:
        """Add two integers."""
        return left + right

    return agent


_AGENTS: dict[int, Agent] = {}
_TEXT = "0123456789" * 4


def streaming_agent(steps: int) -> Agent:
    """W2: as ``agent_for``, each response also streaming a text in 10 deltas."""

    async def stream(messages, info: AgentInfo):
        returns = _steps_done(messages)
        for i in range(10):
            yield _TEXT[i * 4 : (i + 1) * 4]
        if returns < steps:
            arguments = json.dumps({"left": returns, "right": 1})
            yield {1: DeltaToolCall("add", arguments, tool_call_id=f"c{returns}")}

    agent = Agent(FunctionModel(stream_function=stream))

    @agent.tool_plain
    async def add(left: int, right: int) -> int:
        """Add two integers."""
        return left + right

    return agent


async def w2(rounds: int) -> None:
    """Every event of ``run_stream_events`` consumed; events per second."""
    agent = streaming_agent(64)

    async def once() -> int:
        count = 0
        limits = UsageLimits(request_limit=None)
        async with agent.run_stream_events("add them", usage_limits=limits) as events:
            async for _ in events:
                count += 1
        return count

    await event_rate("pydantic-ai", "w2", rounds, once)


async def run(steps: int) -> None:
    agent = _AGENTS.setdefault(steps, agent_for(steps))
    result = await agent.run("add them", usage_limits=UsageLimits(request_limit=None))
    assert result.output == "done", result.output


async def concurrently(runs: int) -> None:
    await asyncio.gather(*(run(4) for _ in range(runs)))


def _w4_agent() -> Agent:
    def respond(messages, info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("slow", {}, tool_call_id="c1")])

    agent = Agent(FunctionModel(respond))

    @agent.tool_plain
    async def slow() -> str:
        """Sleep ten seconds."""
        await asyncio.sleep(10)
        return "late"

    return agent


async def _w4_once(agent: Agent) -> tuple[float, list[str]]:
    runs = []

    async def go() -> None:
        async with agent.iter("wait") as run:
            runs.append(run)
            async for _ in run:
                pass

    start = time.perf_counter()
    try:
        await asyncio.wait_for(go(), 0.05)
    except TimeoutError:
        pass
    returned = time.perf_counter() - start
    history = [
        f"{type(m).__name__}[{','.join(type(p).__name__ for p in m.parts)}]"
        for m in runs[0].all_messages()
    ]
    return returned, history


async def w4() -> None:
    """The run's own history (``agent.iter``) after a cancel with the tool in flight."""
    agent = _w4_agent()
    await _w4_once(agent)  # warm-up
    returned, history = await _w4_once(agent)
    emit("pydantic-ai", "w4", seconds_to_return=returned, history=history)


async def main() -> None:
    await serve("pydantic-ai", run, concurrently, {"w2": w2, "w4": w4})


if __name__ == "__main__":
    asyncio.run(main())
