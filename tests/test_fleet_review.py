"""Regressions found by reviewing the fleet and the group commit (issue 22), each
named after what it pins."""

from __future__ import annotations

import threading
import time

import pytest
import trio
import trio.testing
from test_fleet import _answers, add, dispatched  # noqa: F401 (the tool's log)
from test_postgres_commit import Gate, _a_and_b_behind_c, _ledger

from trio_agent import Agent, LedgerError
from trio_agent.fleet import Worker, agent_maker, submit, wait_for_turn
from trio_agent.testing import CallableModel

pytest.importorskip("psycopg")


def _worker(store, **options):
    options.setdefault("poll_seconds", 0.2)
    return Worker(store, agent_maker(model=CallableModel(_answers), tools=[add]), **options)


async def test_refusing_a_damaged_sessions_input_while_the_database_fails_keeps_the_worker(
    pg_store, monkeypatch
):
    from trio_agent.fleet import _worker as _fleet_worker

    store = pg_store()
    bad = await submit(store, "bad", "hello", create=True)
    async with Agent(model=CallableModel(_answers), store=store, session_id="bad"):
        pass
    await store.run(
        "damage", lambda c: c.execute(f'UPDATE "{store.schema}".records SET body = %s', (b"{",))
    )

    def refuse_fails(*args):
        raise LedgerError("the connection dropped")

    monkeypatch.setattr(_fleet_worker, "refuse", refuse_fails)
    good = await submit(store, "good", "hello", create=True)
    worker = _worker(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        with trio.fail_after(10):
            assert (await wait_for_turn(store, "good", good)).final_text == "answered hello"
        worker.drain()
    monkeypatch.undo()
    assert bad  # still queued: refused later, when the database answers


async def test_a_shared_commit_that_fails_unexpectedly_reports_no_flush_stored(
    pg_store, monkeypatch
):
    from trio_agent.stores.postgres import _commit as _postgres_commit

    store = pg_store()
    ledgers = {name: _ledger(store, name) for name in ("c", "a", "b")}
    for ledger in ledgers.values():
        await ledger.barrier("step")
    gate = Gate(monkeypatch)
    held = _postgres_commit.insert_flushes

    def breaks_on_the_shared_batch(connection, store_, batch):
        if len(batch) > 1:
            raise RuntimeError("a bug in the driver")
        return held(connection, store_, batch)

    monkeypatch.setattr(_postgres_commit, "insert_flushes", breaks_on_the_shared_batch)
    failures = await _a_and_b_behind_c(ledgers, gate)  # the shared batch breaks
    assert "c" not in failures  # stored alone, before
    assert sorted(type(failures[name]).__name__ for name in ("a", "b")) == [
        "LedgerError",
        "RuntimeError",
    ]
    for name in ("a", "b"):  # nothing was stored, and nothing claims it was
        assert [r.seq for r in (await store.load(name)).records] == [0]


async def test_waiting_for_turns_takes_no_thread_of_the_default_limiter(pg_store):
    store = pg_store()
    numbers = [await submit(store, f"s{i}", "hello", create=True) for i in range(30)]
    limiter = trio.to_thread.current_default_thread_limiter()
    async with trio.open_nursery() as nursery:
        for i, number in enumerate(numbers):
            nursery.start_soon(wait_for_turn, store, f"s{i}", number)
        await trio.sleep(0.5)  # all of them waiting (nobody answers: no worker runs)
        assert limiter.borrowed_tokens == 0
        started = time.monotonic()
        await trio.to_thread.run_sync(lambda: None)
        assert time.monotonic() - started < 0.5
        nursery.cancel_scope.cancel()


async def test_a_schema_name_of_63_characters_carries_notifications(pg_store):
    store = pg_store(schema="s" * 63)
    number = await submit(store, "s1", "hello", create=True)
    worker = _worker(store, poll_seconds=60)  # only a notification wakes it soon
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        number = await submit(store, "s2", "hello", create=True)
        with trio.fail_after(10):
            assert (await wait_for_turn(store, "s2", number)).final_text == "answered hello"
        worker.drain()


async def test_cancelling_a_worker_during_a_slow_claim_returns_at_once_and_lets_it_go(
    pg_store, monkeypatch
):
    store = pg_store(lease_seconds=30)
    number = await submit(store, "s", "hello", create=True)
    entered = threading.Event()
    real = store.claims.take

    def slow_take(*args):
        entered.set()
        time.sleep(1.0)  # the database is slow to answer
        return real(*args)

    monkeypatch.setattr(store.claims, "take", slow_take)
    worker = _worker(store)
    with trio.move_on_after(5) as waited:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.run)
            await trio.to_thread.run_sync(entered.wait)
            started = trio.current_time()
            nursery.cancel_scope.cancel()
    assert not waited.cancelled_caught and trio.current_time() - started < 0.5
    monkeypatch.undo()
    await trio.sleep(1.5)  # the abandoned claim ends, and lets its lease go
    other = _worker(pg_store(schema=store.schema))
    async with trio.open_nursery() as nursery:
        await nursery.start(other.run)
        with trio.fail_after(5):  # not 30 s: the lease was let go
            assert (await wait_for_turn(store, "s", number)).final_text == "answered hello"
        other.drain()


def _listeners_of(store) -> str:
    return (
        f"FROM pg_stat_activity WHERE query LIKE 'LISTEN \"{store.schema}.%%'"
        " AND pid <> pg_backend_pid()"
    )


async def _listening(store) -> int:
    sql = f"SELECT count(*) {_listeners_of(store)}"
    return await store.run("count listeners", lambda c: c.execute(sql).fetchone()[0])


async def test_a_wait_goes_on_when_its_listening_connection_is_ended(pg_store):
    store = pg_store()
    number = await submit(store, "s", "hello", create=True)
    async with trio.open_nursery() as nursery:
        result = []

        async def wait():
            result.append(await wait_for_turn(store, "s", number))

        nursery.start_soon(wait)
        with trio.fail_after(5):
            while not await _listening(store):  # noqa: ASYNC110 (the database has it)
                await trio.sleep(0.05)
        sql = f"SELECT pg_terminate_backend(pid) {_listeners_of(store)}"
        await store.run("end the listener", lambda c: c.execute(sql))
        worker = _worker(pg_store(schema=store.schema))
        await nursery.start(worker.run)
        with trio.fail_after(10):
            while not result:  # noqa: ASYNC110 (the waiting task's list)
                await trio.sleep(0.05)
        worker.drain()
    assert result[0].final_text == "answered hello"


async def test_a_workers_listening_connection_ends_with_it(pg_store):
    store = pg_store()
    worker = _worker(store, poll_seconds=30)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        assert await _listening(store) == 1
        worker.drain()
    with trio.fail_after(3):  # its thread waits a second at most
        while await _listening(store):  # noqa: ASYNC110 (the database has it)
            await trio.sleep(0.1)


async def test_a_refused_creation_does_not_count_as_a_session_to_come(pg_store):
    store = pg_store()

    async def no_agent(store, session_id, new):
        raise AssertionError("not asked")

    await submit(store, "s", "hello", create=True)
    await store.run(
        "refuse it",
        lambda c: c.execute(f"""UPDATE "{store.schema}".inbox SET done = now(), error = 'no'"""),
    )
    with pytest.raises(LedgerError, match="no session 's'"):
        await submit(store, "s", "again")


async def test_show_with_a_mistyped_schema_makes_nothing(pg_cluster):
    from cli_runner import TRIO_AGENT, cli

    shown = await cli([*TRIO_AGENT, "show", "--dsn", pg_cluster.dsn, "--schema", "typo_x", "s"])
    assert shown.returncode == 1 and b"no trio-agent schema 'typo_x'" in shown.stderr
    import psycopg

    with psycopg.connect(pg_cluster.dsn) as connection:
        (made,) = connection.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'typo_x'"
        ).fetchone()
    assert made == 0
