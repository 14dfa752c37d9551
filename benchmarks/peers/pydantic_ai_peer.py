"""The workloads on pydantic-ai (see run.py): FunctionModel, no request limit."""

from __future__ import annotations

import asyncio
import json
import time

from _common import (
    TURN_REQUESTS,
    W3_REQUESTS,
    Plan,
    emit,
    event_rate,
    prompt_start,
    serve,
    turn_plan,
    turn_prompt,
)
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.usage import UsageLimits


def _next_call(messages, plan: Plan) -> int | None:
    """The index of the call to make next, or None for the turn's final text, read
    off the last message alone (call ids count up; a turn's user message says
    where it starts), so the scripted model costs the same at every step and W5
    measures the framework."""
    for part in getattr(messages[-1], "parts", ()):
        if isinstance(part, ToolReturnPart):
            return plan.after_result(int(part.tool_call_id[1:]))
        if isinstance(part, UserPromptPart):
            return plan.at_turn_start(prompt_start(part.content))
    raise AssertionError(f"unexpected last message {messages[-1]!r}")


def agent_for(requests: int) -> Agent:
    """The turns of ``turn_plan(requests)``: tool steps calling add, then a final text."""
    plan = Plan(requests)

    def respond(messages, info: AgentInfo) -> ModelResponse:
        index = _next_call(messages, plan)
        if index is not None:
            call = ToolCallPart("add", {"left": index, "right": 1}, tool_call_id=f"c{index}")
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


def streaming_agent(requests: int) -> Agent:
    """W2: as ``agent_for``, each response also streaming a text in 10 deltas."""
    plan = Plan(requests)

    async def stream(messages, info: AgentInfo):
        index = _next_call(messages, plan)
        for i in range(10):
            yield _TEXT[i * 4 : (i + 1) * 4]
        if index is not None:
            arguments = json.dumps({"left": index, "right": 1})
            yield {1: DeltaToolCall("add", arguments, tool_call_id=f"c{index}")}

    agent = Agent(FunctionModel(stream_function=stream))

    @agent.tool_plain
    async def add(left: int, right: int) -> int:
        """Add two integers."""
        return left + right

    return agent


async def w2(rounds: int) -> None:
    """Every event of ``run_stream_events`` consumed; events per second."""
    agent = streaming_agent(TURN_REQUESTS)

    async def once() -> int:
        count = 0
        limits = UsageLimits(request_limit=None)
        async with agent.run_stream_events("add them", usage_limits=limits) as events:
            async for _ in events:
                count += 1
        return count

    await event_rate("pydantic-ai", "w2", rounds, once)


async def run(requests: int) -> None:
    agent = _AGENTS.setdefault(requests, agent_for(requests))
    history = None  # a later turn goes on with the whole conversation so far
    for start, _ in turn_plan(requests):
        result = await agent.run(
            turn_prompt(start),
            message_history=history,
            usage_limits=UsageLimits(request_limit=None),
        )
        assert result.output == "done", result.output
        history = result.all_messages()


async def concurrently(runs: int) -> None:
    await asyncio.gather(*(run(W3_REQUESTS) for _ in range(runs)))


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
