"""The PostgreSQL store (issue 22, first part): one writer per session by a
fenced lease, errors as ``LedgerError``, and what the other stores share
(tests/ledger/ and tests/stores/ run on all three). Against a throwaway cluster the
suite starts (tests/support/pg_cluster.py)."""

from __future__ import annotations

import pytest
import trio
from helpers import add
from leases import lease_ended, lease_expiry
from waiting import WAIT, wait_until, wait_until_async

from trio_agent import Agent, ToolRegistry, UserMessage
from trio_agent.ledger import (
    LeaseLostError,
    Ledger,
    LedgerError,
    SessionExistsError,
    SessionLockedError,
    derive,
)
from trio_agent.stores import PostgresStore
from trio_agent.testing import ScriptedModel, scripted_response

pytest.importorskip("psycopg")


def answers(prefix: str, count: int = 3) -> list:
    return [scripted_response(f"{prefix}{n}", f"answer {prefix}{n}") for n in range(count)]


async def test_a_writer_paused_past_its_lease_loses_it_and_writes_nothing(pg_store):
    # a lease of 3 s: its heartbeat (every second) keeps it on a loaded machine, until cut off
    first_store = pg_store(lease_seconds=3, holder="worker-a")
    second_store = PostgresStore(first_store._dsn, schema=first_store.schema, holder="worker-b")
    try:
        first = Agent(model=ScriptedModel(answers("a")), store=first_store, session_id="s1")
        await first.prompt(UserMessage("u1", "one"))
        with pytest.raises(SessionLockedError, match="'worker-a' holds the lease"):
            await Agent.resume(second_store, "s1", model=ScriptedModel([]))

        # worker-a is cut off (its heartbeat cannot reach the server) and paused
        def unreachable(*args):
            raise LedgerError("the network is down")

        first_store.renew = unreachable
        await wait_until_async(lambda: lease_ended(second_store, "s1"))  # paused past its lease
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
    store = pg_store(holder="worker-a")
    other = PostgresStore(store._dsn, schema=store.schema, holder="worker-b")

    def unreachable(*args):
        raise LedgerError("the network is down")

    store.renew = unreachable  # its heartbeat is cut off: the flushes alone renew the lease
    try:
        agent = Agent(model=ScriptedModel(answers("a", 4)), store=store, session_id="s1")
        expiries = []
        for n in range(4):
            await agent.prompt(f"turn {n}")  # each turn's flushes renew the lease
            expiries.append(await lease_expiry(store, "s1"))
            with pytest.raises(SessionLockedError):
                await Agent.resume(other, "s1", model=ScriptedModel([]))
        assert expiries == sorted(set(expiries))  # later after each turn: renewed
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
    assert "hunter2" not in str(caught.value) and "nobody" in str(caught.value)
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


async def test_a_schema_whose_tables_are_another_applications_is_refused(pg_cluster):
    """A store given a schema that already has a table named as one of its own
    (``public`` with the application's ``records``) refuses it, and leaves it as
    it was. Bug: it wrote its ``meta`` table there, taking the schema for its
    own, and failed later on the first session ("column seq does not exist"),
    or not at all on a table whose columns happened to fit."""
    import uuid

    import psycopg

    schema = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
        connection.execute(f'CREATE TABLE "{schema}".records (id int PRIMARY KEY, note text)')
    store = PostgresStore(pg_cluster.dsn, schema=schema)
    try:
        with pytest.raises(LedgerError, match=r"has tables named as trio-agent's \(records\)"):
            await store.load("s1")
    finally:
        store.close()
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as connection:
        tables = connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (schema,),
        ).fetchall()
    assert tables == [("records",)]


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"schema": "Bad-Name"}, "schema"),
        ({"lease_seconds": 0}, "lease_seconds"),
        # a lease shorter than the heartbeat can renew expired between renewals: a
        # working writer lost its session to the next claim
        ({"lease_seconds": 0.001}, "lease_seconds must be .* from 1.0"),
        ({"lease_seconds": 0.99}, "MIN_LEASE_SECONDS"),
        ({"max_connections": 0}, "max_connections"),
        # a holder not a str was stored as text and compared as given: every renewal
        # failed ("operator does not exist: text = smallint") without a word
        ({"holder": 7}, "holder"),
        ({"holder": "pod\x00a"}, "holder"),
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
    """How many flushes a turn of 6 tool calls and its close ask of the store. (Flushes,
    not transactions: the group commit joins flushes that come together, and how many do
    depends on the machine's speed.)"""
    from helpers import call

    from trio_agent.stores.postgres._commit import GroupCommit

    flushes = []
    real = GroupCommit.flush

    async def counted(self, request):
        if self is store.commits:
            flushes.append(1)
        return await real(self, request)

    monkeypatch.setattr(GroupCommit, "flush", counted)
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
    from trio_agent.stores.postgres import _store as _postgres

    batched = await flushes_of_a_turn(pg_store(), monkeypatch)
    monkeypatch.setattr(_postgres._PostgresWriter, "flush_per_event", True)
    per_event = await flushes_of_a_turn(pg_store(), monkeypatch)
    # per event: each tool's result is a flush of its own; per step, they go
    # together at the step's end (the calls are still stored before they run)
    assert batched <= per_event - 5, (batched, per_event)


async def test_a_busy_writer_keeps_its_lease_by_its_heartbeat(pg_store):
    # a tool that runs longer than the lease: the heartbeat renews it meanwhile
    from helpers import call

    from trio_agent import tool

    # a lease of 6 s, renewed every 2 s: the tool waits for two renewals (a running tool
    # flushes nothing: only the heartbeat renews), each followed by a refused take-over
    store = pg_store(lease_seconds=6, holder="worker-a")
    other = PostgresStore(store._dsn, schema=store.schema, holder="worker-b")
    refused = []

    @tool
    async def slow() -> str:
        """Takes a while, and looks whether another worker can take the session."""
        for _ in range(2):
            before = await lease_expiry(store, "s1")
            await wait_until_async(lambda before=before: _later(store, before))
            try:
                await Agent.resume(other, "s1", model=ScriptedModel([]))
            except SessionLockedError:
                refused.append(1)
        return "done"

    script = [scripted_response("r1", [call("slow", "c1", {})]), scripted_response("r2", "ok")]
    agent = Agent(
        model=ScriptedModel(script), tools=ToolRegistry([slow]), store=store, session_id="s1"
    )
    try:
        result = await agent.prompt("go")
        await agent.aclose()
    finally:
        other.close()
    assert result.end.reason == "completed" and len(refused) == 2


async def _later(store, before) -> bool:
    return await lease_expiry(store, "s1") > before


async def test_a_failed_writer_lets_its_lease_go(pg_store, monkeypatch):
    store = pg_store(holder="worker-a")
    agent = Agent(model=ScriptedModel(answers("a")), store=store, session_id="s1")
    await agent.prompt("one")

    real = store.call

    def broken(what, *args):
        if what == "write records":
            raise LedgerError("the disk is full")
        return real(what, *args)

    monkeypatch.setattr(store, "call", broken)
    with pytest.raises(LedgerError):
        await agent.prompt("two")
    monkeypatch.undo()
    with trio.fail_after(WAIT):
        while True:  # the heartbeat's thread frees it (a moment)
            try:
                resumed = await Agent.resume(store, "s1", model=ScriptedModel([]))
                break
            except SessionLockedError:
                await trio.sleep(0.05)
    await resumed.aclose()


def test_the_dsn_is_checked_and_never_quoted(tmp_path):
    with pytest.raises(ValueError, match="not a valid") as caught:
        PostgresStore("postgresql://app:s3cr%zzET@localhost/db")
    assert "s3cr" not in str(caught.value)
    store = PostgresStore("postgresql://app:hunter2@localhost:5433/db")
    assert "hunter2" not in repr(store) and "5433" in repr(store)


async def test_a_reserved_word_is_a_usable_schema_name(pg_store):
    store = pg_store(schema="user")
    async with Agent(model=ScriptedModel([]), store=store, session_id="s1"):
        pass
    assert (await store.load("s1")).records


async def test_an_application_role_without_create_privileges_can_use_the_store(pg_store):
    import psycopg

    owner = pg_store()  # the migration role (here the superuser) makes the schema
    async with Agent(model=ScriptedModel([]), store=owner, session_id="setup"):
        pass
    role = f"app_{owner.schema}"
    with psycopg.connect(owner._dsn, autocommit=True) as connection:
        connection.execute(f"CREATE ROLE {role} LOGIN")
        connection.execute("REVOKE CREATE ON DATABASE postgres FROM PUBLIC")
        connection.execute(f'GRANT USAGE ON SCHEMA "{owner.schema}" TO {role}')
        connection.execute(
            f'GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA "{owner.schema}" TO {role}'
        )
    app = PostgresStore(owner._dsn.replace("user=postgres", f"user={role}"), schema=owner.schema)
    try:
        agent = Agent(model=ScriptedModel(answers("a")), store=app, session_id="s1")
        await agent.prompt("one")
        await agent.aclose()
        assert (await app.load("s1")).records
    finally:
        app.close()


async def test_a_pooled_connection_the_server_ended_is_not_used(pg_store):
    # a server restart (here: the backends ended) leaves dead connections in the pool:
    # each is found before use (its socket is readable) and replaced, no error reaches
    # the writer; a live idle connection is used without a check's round trip
    store = pg_store()
    async with trio.open_nursery() as nursery:  # several connections in the pool
        for i in range(4):
            nursery.start_soon(_create_and_close, store, f"s{i}")
    ended = await store.run(
        "end the other backends",
        lambda c: c.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend' "
            "AND datname = current_database() AND application_name = ''"
        ).fetchall(),
    )
    assert ended

    # the backends have exited (their sockets closed with them): the pool's are readable
    await wait_until(lambda: not any(_runs(pid) for pid, _ in ended))
    for i in range(4):
        assert len((await store.load(f"s{i}")).records) == 1
    await _create_and_close(store, "after")
    checks = []
    from psycopg_pool import ConnectionPool

    original = ConnectionPool.check_connection
    ConnectionPool.check_connection = staticmethod(lambda c: checks.append(c) or original(c))
    try:
        for _ in range(3):
            await store.load("after")
    finally:
        ConnectionPool.check_connection = staticmethod(original)
    assert checks == []  # healthy idle connections: no extra round trip


def _runs(pid: int) -> bool:
    """Whether process ``pid`` of this machine runs (a zombie has closed its files)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False


async def _create_and_close(store, session_id):
    ledger = Ledger(await trio.to_thread.run_sync(store.create, session_id), 0, "step")
    ledger.session_started(session_id, 0.0, "")
    await ledger.aclose()
