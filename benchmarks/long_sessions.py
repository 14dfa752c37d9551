"""Long sessions and many sessions: whether a turn's cost grows with the session's
history, and what creating a short session costs in each store.

- growth: one session of ``--turns`` turns (a scripted model answering each
  prompt with one text message), each turn timed; the median turn of the last
  tenth against the median turn of the first tenth, in memory and in a JSONL
  store. 1.0 means a turn costs the same at message 40,000 as at message 2.
- sessions: ``--sessions`` short sessions, each created, given one turn and
  closed (``Agent(store=..., session_id=...)``, ``async with agent``, one
  ``prompt``), in a JSONL and in a SQLite store shared by all of them; and the
  same at the ledger's level (create, first record, close). SQLite's cost is
  read as a ratio to JSONL's, measured in the same run.

Run: ``python benchmarks/long_sessions.py`` (``--turns 20000 --sessions 200``
are the defaults; writes to a temporary directory).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import trio
from _figures import add_json_option, json_output, record

from trio_agent import Agent, JsonlStore, Ledger, SqliteStore
from trio_agent.testing import CallableModel, scripted_response


def _answer(request: object) -> object:
    return scripted_response(f"r{next(_ids)}", "ok")


_ids = itertools.count()


async def turn_seconds(turns: int, store: object | None) -> tuple[list[float], list[float]]:
    """CPU seconds (the process's) and wall seconds of each turn of one session of
    ``turns`` turns. CPU time is what the growth is read from: the machine is
    shared, and a burst of another program's work in one tenth is not the
    session's cost."""
    options = {} if store is None else {"store": store, "session_id": "long", "fsync": "never"}
    agent = Agent(model=CallableModel(_answer), **options)  # type: ignore[arg-type]
    cpu, wall = [], []
    async with agent:
        cpu_clock, wall_clock = time.process_time, time.perf_counter
        for _ in range(turns):
            cpu_start, wall_start = cpu_clock(), wall_clock()
            result = await agent.prompt("hi")
            cpu.append(cpu_clock() - cpu_start)
            wall.append(wall_clock() - wall_start)
            assert result.end.reason == "completed", result.end
        assert len(result.messages) == 2 * turns
    return cpu, wall


def growth(times: list[float]) -> tuple[float, float, float]:
    """Median turn of the first tenth, of the last tenth, and their ratio."""
    tenth = len(times) // 10
    first = statistics.median(times[:tenth])
    last = statistics.median(times[-tenth:])
    return first, last, last / first


async def session_seconds(store: object, name: str, count: int) -> float:
    """Median seconds to create a session, take one turn and close it."""
    model = CallableModel(_answer)
    times = []
    for index in range(count):
        start = time.perf_counter()
        agent = Agent(model=model, store=store, session_id=f"{name}-{index}")  # type: ignore[arg-type]
        async with agent:
            await agent.prompt("hi")
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def ledger_seconds(store: object, name: str, count: int) -> float:
    """Median seconds to create a session's ledger, write its first record and close it."""
    times = []
    for index in range(count):
        start = time.perf_counter()
        ledger = Ledger(store.create(f"{name}-{index}"), 0, "never")  # type: ignore[attr-defined]
        ledger.session_started("s", 0.0, "")
        await ledger.aclose()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def main(turns: int, sessions: int) -> None:
    directory = Path(tempfile.mkdtemp(prefix="trio-agent-long-"))
    try:
        print(
            f"growth: one session of {turns:,} turns, median turn of the first and last "
            "tenth (the process's CPU time, and wall time)"
        )
        for label, store in (("in memory", None), ("jsonl", JsonlStore(directory / "long"))):
            gc.collect()
            cpu, wall = await turn_seconds(turns, store)
            for clock, times in (("cpu", cpu), ("wall", wall)):
                first, last, ratio = growth(times)
                key = f"growth_{'memory' if store is None else 'jsonl'}_{clock}"
                record(**{key: {"first_us": first * 1e6, "last_us": last * 1e6, "ratio": ratio}})
                print(
                    f"  {label:9} {clock:4}  first tenth {first * 1e6:7.1f} us/turn, "
                    f"last tenth {last * 1e6:7.1f} us/turn: {ratio:.2f}x"
                )
        jsonl = JsonlStore(directory / "many")
        sqlite = SqliteStore(directory / "many.db")
        print(f"\nsessions: {sessions} short sessions per store, medians")
        for what, measure in (
            ("create, one turn, close", session_seconds),
            ("ledger: create, first record, close", ledger_seconds),
        ):
            costs = {}
            for label, store in (("jsonl", jsonl), ("sqlite", sqlite)):
                await measure(store, f"warm-{label}-{what[:6]}", 5)
                costs[label] = await measure(store, f"{label}-{what[:6]}", sessions)
            key = "session" if what.startswith("create") else "ledger"
            record(
                **{
                    key: {
                        "jsonl_us": costs["jsonl"] * 1e6,
                        "sqlite_us": costs["sqlite"] * 1e6,
                        "ratio": costs["sqlite"] / costs["jsonl"],
                    }
                }
            )
            print(
                f"  {what:36}  jsonl {costs['jsonl'] * 1e6:7.1f} us, "
                f"sqlite {costs['sqlite'] * 1e6:7.1f} us: "
                f"sqlite {costs['sqlite'] / costs['jsonl']:.2f}x jsonl"
            )
        await sqlite.aclose()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=200)
    add_json_option(parser)
    args = parser.parse_args()
    with json_output(args.json):
        trio.run(main, args.turns, args.sessions)
