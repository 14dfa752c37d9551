"""The workloads on trio-agent (see run.py)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import trio
from _common import TURN_REQUESTS, W3_REQUESTS, emit, event_rate, serve, turn_plan, turn_prompt

from trio_agent import Agent, TextBlock, ToolCall, ToolRegistry, tool
from trio_agent.testing import ScriptedModel, scripted_response


@tool
async def add(left: int, right: int) -> int:
    """Add two integers."""
    return left + right


@tool
async def slow() -> str:
    """Sleep ten seconds."""
    await trio.sleep(10)
    return "late"


def script(steps: int, chunks: int = 1, start: int = 0, final: str = "final"):
    """``steps`` tool steps (calls ``c{start}`` on), then a final text; with
    ``chunks`` > 1 each step also streams a text in that many deltas."""
    text = "0123456789" * 4
    out = []
    for i in range(start, start + steps):
        call = ToolCall(f"c{i}", "add", {"left": i, "right": 1})
        blocks = [call] if chunks == 1 else [TextBlock(text), call]
        out.append(scripted_response(f"r{i}", blocks, text_chunks=chunks))
    out.append(scripted_response(final, text, text_chunks=chunks))
    return out


_RUNS: dict[int, tuple] = {}  # requests -> (turn plan, script, max_steps)
_TOOLS = ToolRegistry([add])


def _prepared(requests: int) -> tuple:
    plan = turn_plan(requests)
    responses = tuple(
        response
        for turn, (start, steps) in enumerate(plan)
        for response in script(steps, start=start, final=f"final-{turn}")
    )
    return plan, responses, max(steps for _, steps in plan) + 1


async def run(requests: int) -> None:
    # As the peers share one agent definition, runs share the (frozen) script and
    # the registry; each run has its own session and its own scripted model, which
    # keeps no request log (the peers' models keep none either). A run longer than
    # a turn (64 requests) is turns of one session, as for the peers (turn_plan).
    if requests not in _RUNS:
        _RUNS[requests] = _prepared(requests)
    plan, responses, max_steps = _RUNS[requests]
    model = ScriptedModel(responses, record_requests=False, chunk_checkpoints=False)
    agent = Agent(model=model, tools=_TOOLS, max_steps=max_steps)
    for start, steps in plan:
        result = await agent.prompt(turn_prompt(start))
        assert result.end.reason == "completed" and result.steps == steps + 1, result.end


def w2_once(chunks: int = 10) -> Callable[[], Awaitable[int]]:
    """One W2 run (its texts in ``chunks`` deltas), every event consumed: returns
    the events it counted."""
    ((_, steps),) = turn_plan(TURN_REQUESTS)
    responses = tuple(script(steps, chunks=chunks))

    async def once() -> int:
        model = ScriptedModel(responses, record_requests=False, chunk_checkpoints=False)
        agent = Agent(model=model, tools=_TOOLS, max_steps=TURN_REQUESTS)
        count = 0
        async with agent.turn("add them") as turn:
            async for _ in turn:
                count += 1
        return count

    return once


async def w2(rounds: int) -> None:
    await event_rate("trio-agent", "w2", rounds, w2_once())


async def concurrently(runs: int) -> None:
    async with trio.open_nursery() as nursery:
        for _ in range(runs):
            nursery.start_soon(run, W3_REQUESTS)


def floor_once(events: int) -> Callable[[], Awaitable[int]]:
    """The bare-channel floor: ``events`` objects over a trio memory channel to a
    consumer task, nothing else."""

    async def produce(send: trio.MemorySendChannel[int]) -> None:
        async with send:
            for i in range(events):
                await send.send(i)

    async def once() -> int:
        send, receive = trio.open_memory_channel[int](0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce, send)
            async with receive:
                async for _ in receive:
                    pass
        return events

    return once


async def floor(events: int, rounds: int) -> None:
    await event_rate("trio-agent", "floor", rounds, floor_once(events))


async def w4() -> None:
    agent = Agent(
        model=ScriptedModel([scripted_response("r1", [ToolCall("c1", "slow", {})])]),
        tools=ToolRegistry([slow]),
    )
    start = time.perf_counter()
    with trio.move_on_after(0.05):
        await agent.prompt("wait")
    returned = time.perf_counter() - start
    kinds = [type(m).__name__ for m in agent.messages]
    emit(
        "trio-agent",
        "w4",
        seconds_to_return=returned,
        history=kinds,
        dangling_call=kinds[-1] == "AssistantMessage",
        invented_result=False,
    )


async def main() -> None:
    await serve("trio-agent", run, concurrently, {"w2": w2, "w4": w4, "floor": floor})


if __name__ == "__main__":
    trio.run(main)
