"""The workloads on trio-agent (see run.py)."""

from __future__ import annotations

import time

import trio
from _common import args, emit, peak_rss_kb, per_step

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


def script(steps: int, chunks: int = 1):
    """``steps`` tool steps, then a final text; with ``chunks`` > 1 each step also
    streams a text in that many deltas."""
    text = "0123456789" * 4
    out = []
    for i in range(steps):
        call = ToolCall(f"c{i}", "add", {"left": i, "right": 1})
        blocks = [call] if chunks == 1 else [TextBlock(text), call]
        out.append(scripted_response(f"r{i}", blocks, text_chunks=chunks))
    out.append(scripted_response("final", text, text_chunks=chunks))
    return out


async def run(steps: int) -> None:
    agent = Agent(
        model=ScriptedModel(script(steps)), tools=ToolRegistry([add]), max_steps=steps + 1
    )
    result = await agent.prompt("add them")
    assert result.end.reason == "completed" and result.steps == steps + 1, result.end


async def w2(rounds: int) -> None:
    rates = []
    for _ in range(rounds):
        agent = Agent(
            model=ScriptedModel(script(64, chunks=10)), tools=ToolRegistry([add]), max_steps=65
        )
        count = 0
        start = time.perf_counter()
        async with agent.turn("add them") as turn:
            async for _ in turn:
                count += 1
        rates.append(count / (time.perf_counter() - start))
    rates.sort()
    emit("trio-agent", "w2", events_per_s=rates[len(rates) // 2], events=count)


async def w3(runs: int) -> None:
    await run(4)  # import and build costs out of the figure, as for the peers
    base = peak_rss_kb()
    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(runs):
            nursery.start_soon(run, 4)
    elapsed = time.perf_counter() - start
    emit("trio-agent", "w3", runs=runs, seconds=elapsed, kb_per_run=(peak_rss_kb() - base) / runs)


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


async def floor(events: int, rounds: int) -> None:
    """The bare-channel floor: ``events`` objects over a trio memory channel to a
    consumer task, nothing else."""
    rates = []
    for _ in range(rounds):
        send, receive = trio.open_memory_channel(0)

        async def produce(send: trio.MemorySendChannel[int]) -> None:
            async with send:
                for i in range(events):
                    await send.send(i)

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce, send)
            async with receive:
                async for _ in receive:
                    pass
        rates.append(events / (time.perf_counter() - start))
    rates.sort()
    emit("trio-agent", "floor", events_per_s=rates[len(rates) // 2], events=events)


async def main() -> None:
    workload, numbers = args()
    if workload in ("w1", "w5"):
        steps, rounds = numbers
        await run(steps)  # warm-up, as for the peers
        figure = await per_step(run, steps, rounds) * 1e6
        emit("trio-agent", workload, steps=steps, us_per_step=figure)
    elif workload == "w2":
        await w2(numbers[0])
    elif workload == "w3":
        await w3(numbers[0])
    elif workload == "floor":
        await floor(*numbers)
    elif workload == "w4":
        await w4()


if __name__ == "__main__":
    trio.run(main)
