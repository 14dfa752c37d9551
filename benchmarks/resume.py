"""What resuming a session costs by its length: ``Agent.resume`` (load, derive,
take over) and ``aclose`` of a JSONL session of N turns, each turn a user
message, a tool call, its result and an answer (10 records a turn).

Two shapes: ``plain`` (the transcript keeps every message: a resume must decode
all of them, whatever it starts from) and ``compacted`` (``compact`` keeps the
last few messages whenever a request would not fit a small context window, as
a long-running session does: its state stays small, and a resume from the last
snapshot reads that state and the records after it, whatever the length).
``--snapshots off`` builds the ledger without snapshots (every resume replays
it whole: the cost before snapshots); ``default`` with the store's default
policy. Each line also gives what a turn cost while the session was built
(``build_us_per_turn``) and how many snapshots the ledger holds.

Run: ``python benchmarks/resume.py [TURNS ...] [--shape plain|compacted]
[--snapshots default|off]`` (default 1000 10000, plain, default); each length
is built once in a temporary directory, then resumed ``--repeat`` times (the
median is printed). Compare two trees by running it under each
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


async def _compact(messages):
    """The last user message and what followed it (a turn's worth)."""
    start = max(i for i, m in enumerate(messages) if m.role == "user")
    return messages[start:]


def _shape(shape: str) -> dict:
    if shape == "compacted":
        return {"context_window": 600, "reserve_output_tokens": 100, "compact": _compact}
    return {}


async def build(store: JsonlStore, turns: int, shape: str) -> float:
    """Write the session; the seconds a turn took on average."""
    model = CallableModel(_answer, record_requests=False)
    agent = Agent(
        model=model, tools=[add], store=store, session_id="long", fsync="never", **_shape(shape)
    )
    start = time.perf_counter()
    for turn in range(turns):
        await agent.prompt(f"turn {turn}")
    took = time.perf_counter() - start
    await agent.aclose()
    return took / turns


async def resume_seconds(store: JsonlStore, repeat: int, shape: str) -> list[float]:
    model = CallableModel(_answer, record_requests=False)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        agent = await Agent.resume(
            store, "long", model=model, tools=[add], fsync="never", **_shape(shape)
        )
        await agent.aclose()
        times.append(time.perf_counter() - start)
    return times


async def main(lengths: list[int], repeat: int, shape: str, snapshots: str) -> None:
    with tempfile.TemporaryDirectory() as where:
        for turns in lengths:
            options = {} if snapshots == "default" else {"snapshots": None}
            store = JsonlStore(Path(where) / str(turns), **options)
            per_turn = await build(store, turns, shape)
            times = await resume_seconds(store, repeat, shape)
            path = store.path("long")
            print(
                json.dumps(
                    {
                        "turns": turns,
                        "shape": shape,
                        "snapshots": snapshots,
                        "ms_median": round(statistics.median(times) * 1000, 2),
                        "ms_min": round(min(times) * 1000, 2),
                        "build_us_per_turn": round(per_turn * 1e6, 1),
                        "ledger_mb": round(path.stat().st_size / 1e6, 2),
                        "snapshot_records": path.read_bytes().count(b'\n{"kind":"snapshot"'),
                    }
                )
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("turns", nargs="*", type=int, default=[1000, 10000])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--shape", choices=["plain", "compacted"], default="plain")
    parser.add_argument("--snapshots", choices=["default", "off"], default="default")
    args = parser.parse_args()
    trio.run(main, args.turns, args.repeat, args.shape, args.snapshots)
