"""How the fleet scales: turns per second with 1, 2 and 4 worker processes against
one PostgreSQL, the model I/O-bound (a scripted model that takes 50 ms a
request, as a real one waits on the network).

Run: ``python benchmarks/fleet.py`` (starts a throwaway local cluster,
tests/support/pg_cluster.py). Each run: the workers start and listen, then
``SESSIONS`` sessions get ``TURNS`` inputs each, all at once (``submit``);
the clock runs from the first submit until every input is answered. A turn
is two requests (a tool call, then the answer): 100 ms of model time. Each
worker runs ``--concurrency`` sessions at a time, so one worker's ceiling is
concurrency / 0.1 s turns per second, and N workers' N times that, as long
as the database and the machine keep up.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import trio
from _figures import add_json_option, json_output, record

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))

SESSIONS = 64
TURNS = 3
MODEL_SECONDS = 0.05


def _answer(request):  # type: ignore[no-untyped-def]
    from trio_agent import ToolCall, UserMessage
    from trio_agent.testing import scripted_response

    last = request.messages[-1]
    if isinstance(last, UserMessage):
        call = ToolCall(f"c-{last.id}", "add", {"a": 1, "b": 2})
        return scripted_response(f"r-{request.id}", [call])
    return scripted_response(f"r-{request.id}", "done")


async def worker_main(dsn: str, schema: str, concurrency: int) -> None:
    """One worker process: ``--worker``. Prints "ready" once listening."""
    from trio_agent import tool
    from trio_agent.fleet import Worker, agent_maker
    from trio_agent.stores import PostgresStore
    from trio_agent.testing import CallableModel

    @tool
    async def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    async def answer(request):  # type: ignore[no-untyped-def]
        await trio.sleep(MODEL_SECONDS)
        return _answer(request)

    store = PostgresStore(dsn, schema=schema)
    make = agent_maker(model=CallableModel(answer, record_requests=False), tools=[add])
    worker = Worker(store, make, concurrency=concurrency)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        print("ready", flush=True)


def _cpu_seconds(pids: list[int]) -> float:
    """User and system CPU seconds the processes ``pids`` used so far (Linux /proc)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def _postgres_pids() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "postgres":
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


async def one_run(dsn: str, workers: int, concurrency: int) -> tuple[float, float, float]:
    """Turns per second with ``workers`` processes, on a schema of its own, and the
    CPU milliseconds a turn took in the workers and in the database."""
    from trio_agent.fleet import submit
    from trio_agent.stores import PostgresStore

    schema = f"fleet_{uuid.uuid4().hex[:10]}"
    store = PostgresStore(dsn, schema=schema)
    await store.run("make the schema", lambda connection: None)
    command = [sys.executable, __file__, "--worker", dsn, schema, str(concurrency)]
    started = subprocess.Popen  # started once, before the clock runs
    processes = [started(command, stdout=subprocess.PIPE) for _ in range(workers)]
    try:
        for process in processes:
            assert process.stdout is not None
            line = await trio.to_thread.run_sync(process.stdout.readline)
            assert line.strip() == b"ready", line
        pids = [process.pid for process in processes]
        database = _postgres_pids()
        cpu = _cpu_seconds(pids), _cpu_seconds(database)
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(SESSIONS):
                nursery.start_soon(_submit_all, submit, store, f"s{i}")
        while await _waiting(store):  # noqa: ASYNC110 (the database has the count)
            await trio.sleep(0.05)
        elapsed = time.perf_counter() - start
        database += [pid for pid in _postgres_pids() if pid not in database]
        worker_cpu = _cpu_seconds(pids) - cpu[0]
        database_cpu = _cpu_seconds(database) - cpu[1]
    finally:
        for process in processes:
            process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()
        await store.aclose()
    turns = SESSIONS * TURNS
    return turns / elapsed, worker_cpu / turns * 1000, database_cpu / turns * 1000


async def _submit_all(submit, store, session_id: str) -> None:  # type: ignore[no-untyped-def]
    for turn in range(TURNS):
        await submit(store, session_id, f"input {turn}", create=True)


async def _waiting(store) -> int:  # type: ignore[no-untyped-def]
    def count(connection):  # type: ignore[no-untyped-def]
        sql = f'SELECT count(*) FROM "{store.schema}".inbox WHERE done IS NULL'
        return connection.execute(sql).fetchone()[0]

    return await store.run("count waiting input", count)


async def main(dsn: str, rounds: int, concurrencies: list[int]) -> None:
    for concurrency in concurrencies:
        await scaling(dsn, rounds, concurrency)


async def scaling(dsn: str, rounds: int, concurrency: int) -> None:
    print(
        f"{SESSIONS} sessions x {TURNS} turns, 2 requests of {MODEL_SECONDS * 1000:.0f} ms a "
        f"turn, {concurrency} session(s) per worker; medians of {rounds}"
    )
    base = None
    for workers in (1, 2, 4):
        runs = [await one_run(dsn, workers, concurrency) for _ in range(rounds)]
        rate = statistics.median(run[0] for run in runs)
        base = base or rate
        figures = {"turns_per_s": rate, "over_one": rate / base}
        record(**{f"concurrency_{concurrency}_workers_{workers}": figures})
        ceiling = workers * concurrency / (2 * MODEL_SECONDS)
        print(
            f"  {workers} worker(s): {rate:7.1f} turns/s  ({rate / base:4.2f}x one worker; "
            f"the model's ceiling {ceiling:.0f} turns/s); CPU a turn: workers "
            f"{statistics.median(run[1] for run in runs):.1f} ms, PostgreSQL "
            f"{statistics.median(run[2] for run in runs):.1f} ms"
        )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        trio.run(worker_main, sys.argv[2], sys.argv[3], int(sys.argv[4]))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=[1, 4],
        help="sessions per worker: one scaling table each (default: 1 4)",
    )
    add_json_option(parser)
    args = parser.parse_args()
    from pg_cluster import Cluster

    with json_output(args.json):
        cluster = Cluster().start()
        try:
            trio.run(main, cluster.dsn, args.rounds, args.concurrency)
        finally:
            cluster.stop()
