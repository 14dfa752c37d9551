"""What resuming a session costs by its length: ``Agent.resume`` (load, derive,
take over) and ``aclose`` of a JSONL session of N turns, each turn a user
message, a tool call, its result and an answer (10 records a turn).

Run: ``python benchmarks/resume.py [TURNS ...]`` (default 1000 10000); each
length is built once in a temporary directory, then resumed ``--repeat`` times
(the median is printed). Compare two trees by running it under each
(``PYTHONPATH=TREE``) on the same machine, alternately.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import trio

from trio_agent import Agent, JsonlStore, ToolCall, tool
from trio_agent.testing import CallableModel, scripted_response


@tool
async def add(left: int, right: int) -> int:
    """Add two integers."""
    return left + right


def _answer(request):  # a call for each user message, then a text
    last = request.messages[-1]
    if last.role == "user":
        call = ToolCall(f"c-{last.id}", "add", {"left": 1, "right": 2})
        return scripted_response(f"r-{request.id}", [call])
    return scripted_response(f"r-{request.id}", "3")


async def build(store: JsonlStore, turns: int) -> None:
    model = CallableModel(_answer, record_requests=False)
    agent = Agent(model=model, tools=[add], store=store, session_id="long", fsync="never")
    for turn in range(turns):
        await agent.prompt(f"turn {turn}")
    await agent.aclose()


async def resume_seconds(store: JsonlStore, repeat: int) -> list[float]:
    model = CallableModel(_answer, record_requests=False)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        agent = await Agent.resume(store, "long", model=model, tools=[add], fsync="never")
        await agent.aclose()
        times.append(time.perf_counter() - start)
    return times


async def main(lengths: list[int], repeat: int) -> None:
    with tempfile.TemporaryDirectory() as where:
        for turns in lengths:
            store = JsonlStore(Path(where) / str(turns))
            await build(store, turns)
            times = await resume_seconds(store, repeat)
            size = store.path("long").stat().st_size
            print(
                json.dumps(
                    {
                        "turns": turns,
                        "ms_median": round(statistics.median(times) * 1000, 2),
                        "ms_min": round(min(times) * 1000, 2),
                        "ledger_mb": round(size / 1e6, 2),
                    }
                )
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("turns", nargs="*", type=int, default=[1000, 10000])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    trio.run(main, args.turns, args.repeat)
