"""The PostgreSQL store (issue 22, first part): one writer per session by a
fenced lease, errors as ``LedgerError``, and what the other stores share
(tests/test_ledger*.py run on all three). Against a throwaway cluster the
suite starts (tests/pg_cluster.py)."""

from __future__ import annotations

import time

import pytest
import trio
from helpers import add

pytest.importorskip("psycopg")

from trio_agent import Agent, ToolRegistry, UserMessage
from trio_agent.ledger import (
    LeaseLostError,
    LedgerError,
    SessionExistsError,
    SessionLockedError,
    derive,
)
from trio_agent.stores import PostgresStore
from trio_agent.testing import ScriptedModel, scripted_response


def answers(prefix: str, count: int = 3) -> list:
    return [scripted_response(f"{prefix}{n}", f"answer {prefix}{n}") for n in range(count)]


async def test_a_writer_paused_past_its_lease_loses_it_and_writes_nothing(pg_store):
    first_store = pg_store(lease_seconds=0.5, holder="worker-a")
    second_store = PostgresStore(first_store._dsn, schema=first_store.schema, holder="worker-b")
    try:
        first = Agent(model=ScriptedModel(answers("a")), store=first_store, session_id="s1")
        await first.prompt(UserMessage("u1", "one"))
        with pytest.raises(SessionLockedError, match="'worker-a' holds the lease"):
            await Agent.resume(second_store, "s1", model=ScriptedModel([]))
        time.sleep(0.6)  # noqa: ASYNC251  # worker-a is paused (a GC pause, a lost network)
        second = await Agent.resume(second_store, "s1", model=ScriptedModel(answers("b")))
        await second.prompt(UserMessage("u2", "two"))
        with pytest.raises(LeaseLostError, match="taken over"):
            await first.prompt(UserMessage("u3", "three"))  # wakes up: fenced off
        await second.prompt(UserMessage("u4", "four"))
        await second.aclose()
        with pytest.raises(LeaseLostError, match="writes nothing more"):
            await first.aclose()  # the fenced writer closes, saying why it stopped
        loaded = await second_store.load("s1")
        derived = derive(loaded.records)
        texts = [m.content for m in derived.messages if m.role == "user"]
        assert texts == ["one", "two", "four"]  # nothing of worker-a after its lease ended
        assert derived.turns == 3 and derived.closed
    finally:
        second_store.close()


async def test_a_writer_that_flushes_keeps_its_lease(pg_store):
    store = pg_store(lease_seconds=0.5, holder="worker-a")
    other = PostgresStore(store._dsn, schema=store.schema, holder="worker-b")
    try:
        agent = Agent(model=ScriptedModel(answers("a", 4)), store=store, session_id="s1")
        for n in range(4):
            await agent.prompt(f"turn {n}")  # each turn's flushes renew the lease
            await trio.sleep(0.3)
            with pytest.raises(SessionLockedError):
                await Agent.resume(other, "s1", model=ScriptedModel([]))
        await agent.aclose()
        resumed = await Agent.resume(other, "s1", model=ScriptedModel([]))  # freed at close
        await resumed.aclose()
    finally:
        other.close()


async def test_creating_an_existing_session_is_refused(pg_store):
    store = pg_store()
    async with Agent(model=ScriptedModel([]), store=store, session_id="dup"):
        pass
    with pytest.raises(SessionExistsError, match=r"Agent\.resume"):
        async with Agent(model=ScriptedModel([]), store=store, session_id="dup"):
            pass


async def test_every_database_failure_is_a_ledger_error_without_the_password(tmp_path):
    store = PostgresStore(f"host={tmp_path} dbname=nope user=nobody password=hunter2")
    agent = Agent(model=ScriptedModel([]), store=store, session_id="s1")
    with pytest.raises(LedgerError, match="cannot take the new session") as caught:
        async with agent:
            pass
    assert "hunter2" not in str(caught.value) and "password=***" in str(caught.value)
    with pytest.raises(LedgerError, match="cannot load session"):
        await store.load("s1")


async def test_a_schema_of_another_version_is_refused(pg_store):
    store = pg_store()
    await store.run("make the schema", lambda connection: None)
    await store.run(
        "change the version",
        lambda c: c.execute(f"UPDATE {store.schema}.meta SET value = '99'"),
    )
    store.close()
    again = PostgresStore(store._dsn, schema=store.schema)
    try:
        with pytest.raises(LedgerError, match="version 99"):
            await again.load("s1")
    finally:
        again.close()


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"schema": "Bad-Name"}, "schema"),
        ({"lease_seconds": 0}, "lease_seconds"),
        ({"max_connections": 0}, "max_connections"),
    ],
)
def test_bad_options_are_refused(options, says):
    with pytest.raises(ValueError, match=says):
        PostgresStore("dbname=x", **options)


async def test_the_tools_and_turns_of_a_session_round_trip(pg_store):
    from helpers import call

    store = pg_store()
    script = [
        scripted_response("r1", [call("add", "c1", {"left": 1, "right": 2})]),
        scripted_response("r2", "3"),
    ]
    agent = Agent(model=ScriptedModel(script), tools=ToolRegistry([add]), store=store)
    result = await agent.prompt("add")
    await agent.aclose()
    derived = derive((await store.load(agent.session_id)).records)
    assert [m.id for m in derived.messages] == [m.id for m in result.messages]


async def flushes_of_a_turn(store, monkeypatch) -> int:
    """How many transactions a turn of 6 tool calls and its close take."""
    from helpers import call

    flushes = []
    insert = store.insert
    monkeypatch.setattr(store, "insert", lambda *args: (flushes.append(1), insert(*args))[1])
    calls = [call("add", f"c{n}", {"left": n, "right": 1}) for n in range(6)]
    script = [scripted_response("r1", calls), scripted_response("r2", "done")]
    agent = Agent(
        model=ScriptedModel(script),
        tools=ToolRegistry([add]),
        store=store,
        tool_execution="parallel",
    )
    await agent.prompt("add")
    await agent.aclose()
    return len(flushes)


async def test_records_are_stored_per_step_not_per_event(pg_store, monkeypatch):
    from trio_agent.stores import _postgres

    batched = await flushes_of_a_turn(pg_store(), monkeypatch)
    monkeypatch.setattr(_postgres._PostgresWriter, "flush_per_event", True)
    per_event = await flushes_of_a_turn(pg_store(), monkeypatch)
    # per event: each tool's result is a transaction of its own; per step, they
    # go together at the step's end (the calls are still stored before they run)
    assert batched <= per_event - 5, (batched, per_event)
