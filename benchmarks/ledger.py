"""What the session ledger costs: records per second under each fsync policy, and
the time it adds per step of a session, against the same session kept in memory.

Run: ``python benchmarks/ledger.py`` (writes to a temporary directory);
``--postgres`` also measures ``PostgresStore`` on a throwaway local cluster
(tests/support/pg_cluster.py: unix socket, fsync off, so the figures are the store's
and the round trips', not a disk's).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import trio
from _figures import add_json_option, json_output, record
from _scenario import STEPS, add, script

from trio_agent import Agent, JsonlStore, Ledger, PostgresStore, SqliteStore, ToolRegistry
from trio_agent.testing import ScriptedModel

RECORDS = 2000


async def records_per_second(store, policy: str, writers: int, name: str) -> float:
    """``writers`` sessions appending concurrently, each awaiting the barrier a
    session would: every record (always), every 8 records (step), never."""
    per_writer = RECORDS // writers

    async def one(index: int) -> None:
        ledger = Ledger(store.create(f"{name}-{index}"), 0, policy)
        ledger.session_started("s", 0.0, "")
        ledger.commit()  # created, as Ledger.create stores it: each record then goes on its own
        for i in range(per_writer):
            ledger.step_started(f"request-{i:03d}")
            if policy == "always" or (policy == "step" and i % 8 == 7):
                await ledger.barrier("step")
        await ledger.aclose()

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for index in range(writers):
            nursery.start_soon(one, index)
    return per_writer * writers / (time.perf_counter() - start)


async def shared_ledger_always(store, tasks: int, name: str) -> tuple[float, int]:
    """``tasks`` tasks appending to one ledger, each awaiting durability of its record
    (fsync=always): group commit lets one fsync cover many of them."""
    writer = store.create(name)
    ledger = Ledger(writer, 0, "always")
    ledger.session_started("s", 0.0, "")
    ledger.commit()

    async def one(index: int) -> None:
        for i in range(RECORDS // tasks):
            ledger.step_started(f"request-{index}-{i}")
            await ledger.barrier("event")

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for index in range(tasks):
            nursery.start_soon(one, index)
    elapsed = time.perf_counter() - start
    fsyncs = writer.fsyncs
    await ledger.aclose()
    return RECORDS / elapsed, fsyncs


async def many_ledgers(store, count: int, records: int, name: str) -> tuple[float, int]:
    """``count`` sessions open at once, each appending ``records`` records and
    awaiting a step barrier (fsync="step") after every 8: records/s, and the
    most threads alive at any moment (sampled at every barrier)."""
    ledgers = [Ledger(store.create(f"{name}-{i}"), 0, "step") for i in range(count)]
    peak = threading.active_count()

    async def one(ledger: Ledger) -> None:
        nonlocal peak
        ledger.session_started("s", 0.0, "")
        ledger.commit()
        for i in range(records):
            ledger.step_started(f"request-{i:03d}")
            if i % 8 == 7:
                await ledger.barrier("step")
                peak = max(peak, threading.active_count())

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for ledger in ledgers:
            nursery.start_soon(one, ledger)
    elapsed = time.perf_counter() - start
    peak = max(peak, threading.active_count())
    for ledger in ledgers:
        await ledger.aclose()
    return count * records / elapsed, peak


async def create_and_close_seconds(store, name: str, count: int = 100) -> float:
    """Seconds to create a session (its writer, and its lock), write its first
    record and close it: a cost paid once per session, not per record."""
    start = time.perf_counter()
    for index in range(count):
        ledger = Ledger(store.create(f"{name}-{index}"), 0, "never")
        ledger.session_started("s", 0.0, "")
        ledger.commit()
        await ledger.aclose()
    return (time.perf_counter() - start) / count


async def session_seconds(store, policy: str | None, name: str) -> tuple[float, float]:
    """One 64-step session: the seconds its turn takes, and the seconds creating
    the session took before it (``Agent()`` and entering ``async with agent``).

    Since issue 14 an ``Agent`` creates its ledger on first use, in a worker
    thread: at ``async with agent``, or else inside the first turn. The agent is
    entered before the clock starts, so the turn's time holds no creation, as
    before issue 14 (when ``Agent()`` created the ledger); creation is timed on
    its own (the same way for code before issue 14: there ``Agent()`` does it)."""
    options = {} if store is None else {"store": store, "session_id": name, "fsync": policy}
    model, tools = ScriptedModel(script()), ToolRegistry([add])
    start = time.perf_counter()
    agent = Agent(model=model, tools=tools, max_steps=STEPS, **options)
    async with agent:
        created = time.perf_counter()
        result = await agent.prompt("go")
        elapsed = time.perf_counter() - created
    assert result.end.reason == "completed" and result.steps == STEPS, result.end
    return elapsed, created - start


async def main(rounds: int, postgres: str | None) -> None:
    directory = Path(tempfile.mkdtemp(prefix="trio-agent-bench-"))
    jsonl = JsonlStore(directory)
    sqlite = SqliteStore(directory / "bench.db")
    stores: list[tuple[str, object]] = [("jsonl", jsonl), ("sqlite", sqlite)]
    if postgres is not None:
        stores.append(("postgr", PostgresStore(postgres, schema="bench")))
    print(f"records/s ({RECORDS} records, medians of {rounds})")
    for label, store in stores:
        for policy in ("never", "step", "always"):
            for writers in (1, 32):
                rates = [
                    await records_per_second(
                        store, policy, writers, f"{label}-{policy}-{writers}-{r}"
                    )
                    for r in range(rounds)
                ]
                print(
                    f"  {label:6} fsync={policy:6} sessions={writers:2}: "
                    f"{statistics.median(rates):10,.0f} records/s"
                )
                record(**{f"{label}_{policy}_{writers}_records_per_s": statistics.median(rates)})
    for tasks in (1, 32):
        results = [
            await shared_ledger_always(jsonl, tasks, f"shared-{tasks}-{r}") for r in range(rounds)
        ]
        rate = statistics.median(r[0] for r in results)
        fsyncs = statistics.median(r[1] for r in results)
        record(**{f"jsonl_always_shared_{tasks}_records_per_s": rate})
        print(
            f"  jsonl  fsync=always, {tasks:2} tasks sharing one ledger: {rate:10,.0f} records/s"
            f" ({fsyncs:.0f} fsyncs for {RECORDS} records)"
        )
    many = [await many_ledgers(jsonl, 2000, 16, f"many-{r}") for r in range(max(1, rounds // 2))]
    print(
        f"  jsonl  fsync=step, 2000 ledgers open at once: "
        f"{statistics.median(m[0] for m in many):10,.0f} records/s, "
        f"at most {max(m[1] for m in many)} threads alive"
    )
    for label, store in stores:
        cost = statistics.median(
            [await create_and_close_seconds(store, f"c-{label}-{r}") for r in range(rounds)]
        )
        print(f"  {label:6} create, first record and close one session: {cost * 1e6:7.1f} us")
    print(
        f"\nsession of {STEPS} steps (10 chunks + 1 tool call each), per step, medians of "
        f"{rounds}; the session is created (Agent() and async with agent) before the clock starts"
    )
    runs = [await session_seconds(None, None, "") for _ in range(rounds)]
    base = statistics.median(r[0] for r in runs)
    record(in_memory_us_per_step=base / STEPS * 1e6)
    print(
        f"  in memory (no ledger):  {base / STEPS * 1e6:8.1f} us/step"
        f"  (Agent() and async with: {statistics.median(r[1] for r in runs) * 1e6:6.1f} us)"
    )
    for label, store in stores:
        for policy in ("never", "step", "always"):
            runs = [
                await session_seconds(store, policy, f"s-{label}-{policy}-{r}")
                for r in range(rounds)
            ]
            t = statistics.median(r[0] for r in runs)
            create = statistics.median(r[1] for r in runs)
            record(**{f"{label}_{policy}_added_us_per_step": (t - base) / STEPS * 1e6})
            print(
                f"  {label:6} fsync={policy:6}:   {t / STEPS * 1e6:8.1f} us/step  "
                f"(ledger adds {(t - base) / STEPS * 1e6:7.1f} us/step; "
                f"creating the session {create * 1e6:6.1f} us)"
            )
    await sqlite.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--postgres", action="store_true", help="measure PostgresStore too")
    add_json_option(parser)
    args = parser.parse_args()
    with json_output(args.json):
        if not args.postgres:
            trio.run(main, args.rounds, None)
        else:
            import sys

            sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
            from pg_cluster import Cluster

            cluster = Cluster().start()
            try:
                trio.run(main, args.rounds, cluster.dsn)
            finally:
                cluster.stop()
