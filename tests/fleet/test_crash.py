"""The fleet crash test: 4 worker processes share 200 sessions of 3 turns each
while a random worker is killed with SIGKILL every few hundred milliseconds and
started again. At the end every input is answered, every ledger loads, no call
to a tool whose effect is once was dispatched twice, every idempotent call ended
with exactly one result (run again by the worker that took its session over,
with the same idempotency key), and no session was written by two workers at
once."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import uuid
from collections import Counter

import pytest
import trio
from paths import SUPPORT

from trio_agent import ToolResultMessage
from trio_agent.fleet import submit, wait_for_turn
from trio_agent.ledger import MessageRecord, derive

pytest.importorskip("psycopg")


CHILD = SUPPORT / "fleet_child.py"
SESSIONS = 200
TURNS = 3
WORKERS = 4
EVERY = 16  # inputs answered between two kills, 12 on average: some 50 kills


def _start(dsn: str, schema: str) -> subprocess.Popen[bytes]:
    child = subprocess.Popen(
        [sys.executable, str(CHILD), dsn, schema],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=SUPPORT,
    )
    return child


async def _waiting(store) -> int:
    rows = await store.run(
        "count",
        lambda c: c.execute(
            f'SELECT count(*) FROM "{store.schema}".inbox WHERE done IS NULL'
        ).fetchone(),
    )
    return rows[0]


async def test_killed_workers_lose_nothing_and_run_only_idempotent_calls_again(
    pg_store, pg_cluster
):
    store = pg_store(schema=f"f_{uuid.uuid4().hex[:12]}")
    await store.run("make the schema", lambda c: None)  # the store's schema exists now
    await store.run(
        "side table",
        lambda c: c.execute(
            f"""CREATE TABLE "{store.schema}".dispatches (key text NOT NULL,
                session_id text NOT NULL, pid int NOT NULL, idem text NOT NULL,
                at timestamptz NOT NULL DEFAULT clock_timestamp())"""
        ),
    )
    numbers = {}
    for turn in range(TURNS):
        for i in range(SESSIONS):
            numbers[i, turn] = await submit(store, f"s{i}", f"s{i} t{turn}", create=True)
    rng = random.Random(22)
    workers = [_start(pg_cluster.dsn, store.schema) for _ in range(WORKERS)]
    kills = 0
    try:
        with trio.fail_after(900):  # a hang guard: 600 inputs and some 50 restarts, loaded
            # a kill per EVERY inputs answered, not per wall-clock interval: a fast
            # machine finishes the queue before a timed kill count is reached
            waiting = await _waiting(store)
            next_kill = waiting
            while waiting:
                if waiting <= next_kill:
                    victim = rng.randrange(WORKERS)
                    workers[victim].send_signal(signal.SIGKILL)
                    workers[victim].wait()
                    kills += 1
                    workers[victim] = _start(pg_cluster.dsn, store.schema)
                    next_kill = waiting - rng.randint(EVERY // 2, EVERY)
                await trio.sleep(0.05)
                waiting = await _waiting(store)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGKILL)
            worker.wait()
    assert kills >= 20, kills
    # every input answered, in order, once
    for (i, turn), number in numbers.items():
        result = await wait_for_turn(store, f"s{i}", number)
        assert result.final_text == f"answered s{i} t{turn}", (i, turn, result)
        assert result.end.reason in ("completed", "interrupted")
    records_of = {}
    for i in range(SESSIONS):
        records = (await store.load(f"s{i}")).records  # loads: contiguous, undamaged
        records_of[f"s{i}"] = records
        users = [
            r.message.id for r in records if type(r) is MessageRecord and r.message.role == "user"
        ]
        assert users == [f"fleet-{numbers[i, turn]}" for turn in range(TURNS)]
    rows = await store.run(
        "dispatches",
        lambda c: c.execute(
            f'SELECT key, session_id, pid, idem FROM "{store.schema}".dispatches ORDER BY at'
        ).fetchall(),
    )
    once = [key for key, _, _, _ in rows if key.endswith("-a")]
    assert len(once) == len(set(once)), "a once call was dispatched twice"
    for key, session, _, idem in rows:  # an idempotent call's key: the same every run
        assert idem == ("" if key.endswith("-a") else f"{session}/c-{key}"), (key, idem)
    again = Counter(key for key, _, _, _ in rows if key.endswith("-b"))
    reruns = sum(count - 1 for count in again.values())
    results = _results(records_of)
    for key in again:  # every idempotent call dispatched ends with its one real result
        assert results[f"c-{key}"] == [key], (key, results[f"c-{key}"])
    rows = [(key, session, pid) for key, session, pid, _ in rows]
    # each session's writers follow one another: a worker that lost a session never
    # dispatches in it again (pids are not reused among so few processes)
    for i in range(SESSIONS):
        pids = [pid for _, session, pid in rows if session == f"s{i}"]
        runs = [pid for k, pid in enumerate(pids) if k == 0 or pids[k - 1] != pid]
        assert len(runs) == len(set(runs)), f"s{i} written by two workers at once: {pids}"
    # the kills landed mid-session: sessions changed hands (all input was queued at
    # the start, so a worker lets a session go only when it is done, or dies)
    moved = sum(len({pid for _, s, pid in rows if s == f"s{i}"}) > 1 for i in range(SESSIONS))
    assert moved >= 5, (kills, moved)
    # once calls dispatched before a kill and never finished are answered as unknown,
    # not run again; idempotent ones run again (counted in the note)
    assert len(once) <= SESSIONS * TURNS
    print(f"fleet: {kills} kills, {reruns} idempotent calls run again")


def _results(records_of) -> dict[str, list[str]]:
    """Each call's results across the sessions' transcripts, by call id."""
    results: dict[str, list[str]] = {}
    for records in records_of.values():
        for message in derive(records).messages:
            if type(message) is ToolResultMessage:
                results.setdefault(message.tool_call_id, []).append(message.content)
    return results
