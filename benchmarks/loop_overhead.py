"""Per-step overhead and event throughput of the agent loop, against a bare channel floor.

Scenario: a 64-step run on ``ScriptedModel``; each step streams 10 text
chunks and one tool call (``add``), the last step 10 chunks of final text.
The floor is a bare trio memory channel carrying the same number of events
from one task to another, unbuffered as the loop's hand-over is, measured
in the same process. Run: ``python benchmarks/loop_overhead.py``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import trio
from _figures import add_json_option, json_output, record
from _scenario import CHUNKS, STEPS, add, timed_wait
from _scenario import script as _script

from trio_agent import (
    ModelRequest,
    RunFinished,
    ToolCall,
    ToolRegistry,
    UserMessage,
    execute_tool_call,
    run_agent_loop,
)
from trio_agent.testing import ScriptedModel

_EVENT_BUFFER = 0
"""The floor's buffer: none, as the run hands its events over (``Handoff``)."""


def _run(script: list):
    model = ScriptedModel(script)
    return run_agent_loop(
        messages=[UserMessage("u", "go")],
        model=model,
        tools=ToolRegistry([add]),
        max_steps=STEPS,
    )


async def loop_observed(script: list) -> tuple[float, int]:
    run = _run(script)
    count = 0
    start = time.perf_counter()
    async with run:
        async for event in run:
            count += 1
            last = event
    elapsed = time.perf_counter() - start
    assert isinstance(last, RunFinished) and last.result.status == "completed", last
    return elapsed, count


async def loop_unobserved(script: list) -> float:
    return await timed_wait(_run(script))


async def model_and_tools_alone(script: list) -> float:
    """The same streams and tool calls with no loop: what the loop itself adds is the rest."""
    model = ScriptedModel(script)
    registry = ToolRegistry([add])
    start = time.perf_counter()
    for step, _ in enumerate(script):
        request = ModelRequest(id=f"request-{step + 1:03d}", messages=(), tools=())
        async with model.stream(request) as stream:
            async for chunk in stream:
                if isinstance(chunk, ToolCall):
                    await execute_tool_call(registry, chunk)
            await stream.response()
    return time.perf_counter() - start


async def channel_floor(count: int) -> float:
    send, receive = trio.open_memory_channel[object](_EVENT_BUFFER)
    item = object()

    async def produce() -> None:
        async with send:
            for _ in range(count):
                await send.send(item)

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        async with receive:
            async for _ in receive:
                pass
    return time.perf_counter() - start


async def main(rounds: int) -> None:
    script = _script()
    observed, unobserved, floors, alone = [], [], [], []
    events = 0
    for _ in range(rounds):
        elapsed, events = await loop_observed(script)
        observed.append(elapsed)
        unobserved.append(await loop_unobserved(script))
        floors.append(await channel_floor(events))
        alone.append(await model_and_tools_alone(script))
    obs, unobs, floor, base = (statistics.median(x) for x in (observed, unobserved, floors, alone))
    print(f"scenario: {STEPS} steps, {CHUNKS} text chunks + 1 tool call per step; {events} events")
    print(f"event channel buffer: {_EVENT_BUFFER}; rounds: {rounds} (medians)")
    print(
        f"loop, events consumed:   {obs * 1e3:8.2f} ms  {events / obs:10,.0f} events/s  "
        f"{obs / STEPS * 1e6:8.1f} us/step"
    )
    print(
        f"loop, wait() no events:  {unobs * 1e3:8.2f} ms  {'':10}           "
        f"{unobs / STEPS * 1e6:8.1f} us/step"
    )
    print(
        f"model + tools, no loop:  {base * 1e3:8.2f} ms  {'':10}           "
        f"{base / STEPS * 1e6:8.1f} us/step"
    )
    print(f"floor, bare channel:     {floor * 1e3:8.2f} ms  {events / floor:10,.0f} events/s")
    print(
        f"loop overhead per step:  {(unobs - base) / STEPS * 1e6:8.1f} us without events, "
        f"{(obs - base) / STEPS * 1e6:.1f} us with every event consumed"
    )
    print(f"ratio loop/floor (time): {obs / floor:.2f}x   (target: <= 4x)")
    record(
        events=events,
        rounds=rounds,
        loop_events_per_s=events / obs,
        floor_events_per_s=events / floor,
        loop_over_floor=obs / floor,
        us_per_step_consumed=obs / STEPS * 1e6,
        overhead_us_per_step_unobserved=(unobs - base) / STEPS * 1e6,
        overhead_us_per_step_consumed=(obs - base) / STEPS * 1e6,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    add_json_option(parser)
    args = parser.parse_args()
    with json_output(args.json):
        trio.run(main, args.rounds)
