"""Serving from PostgreSQL (``dsn=``): the events are rows beside the records, so
a stream resumes exactly on a server started afresh on the same database."""

from __future__ import annotations

import uuid

import psycopg
import pytest
import serve_agents
import trio
from serving import client, running
from sse_client import finished, read_until
from waiting import wait_until, wait_until_async

from trio_agent.ledger import LeaseLostError, LedgerError
from trio_agent.serve._postgres import PostgresPlace, _make_table

EVENTS = "/sessions/s/events"


async def test_a_stream_resumes_exactly_on_a_new_server_over_the_same_database(pg_cluster):
    where = {"dsn": pg_cluster.dsn, "schema": f"t_{uuid.uuid4().hex[:16]}"}
    async with running(None, **where) as (server, url), client(url) as http:
        await http.post("/sessions/s/turns", json={"message": "hold g"})
        first = await read_until(url, EVENTS, lambda e: e["type"] == "tool.started")
        server.stop()
        serve_agents.release("g")
    async with running(None, **where) as (server, url), client(url) as http:
        rest: list = []
        headers = {"Last-Event-ID": str(first[1][0])}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: read_until(url, EVENTS, finished(2), headers=headers, got=rest)
            )
            await wait_until(lambda: any(d["event"]["type"] == "turn.finished" for _, d in rest))
            assert (await http.post("/sessions/s/turns", json={"message": "two"})).json() == {
                "turn": 2
            }
        whole = await read_until(url, EVENTS, finished(2))
        assert (await http.get("/sessions")).json() == {
            "sessions": [{"id": "s", "running_turn": None}]
        }
        assert (await http.get("/sessions/s")).json()["turns"] == 2
        assert (await http.get("/sessions/nope")).status_code == 404
    assert first[:2] + rest == whole
    assert [sequence for sequence, _ in whole] == list(range(len(whole)))


async def test_a_server_streams_a_session_whose_turn_runs_on_another(pg_cluster):
    """Two servers on one database: a reader of the second follows, live, the
    turn the first runs (woken by NOTIFY, read from the table), and gets the
    same complete sequence as the first's reader. Bug: the second's readers
    waited for events only their own server publishes, and hung."""
    where = {"dsn": pg_cluster.dsn, "schema": f"t_{uuid.uuid4().hex[:16]}"}
    quiet = {**where, "keepalive_seconds": None}  # a keep-alive would look again, late
    async with running(None, **where) as (first, url), running(None, **quiet) as (second, other):
        async with client(url) as http:
            await http.post("/sessions/s/turns", json={"message": "hold g"})
        await serve_agents.holding.setdefault("g", trio.Event()).wait()
        there: list = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: read_until(other, EVENTS, finished(1), got=there))
            await wait_until(lambda: any(d["event"]["type"] == "tool.started" for _, d in there))
            serve_agents.release("g")
        here = await read_until(url, EVENTS, finished(1))
    assert there == here
    assert [sequence for sequence, _ in there] == list(range(len(there)))


async def test_servers_making_the_events_table_at_once_both_serve(pg_cluster):
    """Replicas started together on a new schema each make the events table on
    their first request: the one that finds another making it waits for it and
    uses it. Bug: ``CREATE TABLE IF NOT EXISTS`` is not safe run at once (a
    unique violation on ``pg_type``, "type serve_events already exists"), and
    that request failed with a 500; two replicas posted a new session's first
    turn at once saw it most of the time."""
    place = PostgresPlace(pg_cluster.dsn, schema=f"t_{uuid.uuid4().hex[:16]}")
    store = place.store
    try:
        assert await place.sessions() == []  # the schema is made; the events table not yet
        making = await trio.to_thread.run_sync(psycopg.connect, pg_cluster.dsn)
        try:
            await trio.to_thread.run_sync(_make_table, making, store)  # not committed yet
            read: list = []
            async with trio.open_nursery() as nursery:

                async def first_read():
                    read.append(await place.events.read("s", -1))

                nursery.start_soon(first_read)
                await wait_until_async(lambda: _waiting_on(store, making.info.backend_pid))
                await trio.to_thread.run_sync(making.commit)
        finally:
            await trio.to_thread.run_sync(making.close)
        assert read == [[]]
    finally:
        await place.aclose()


async def _waiting_on(store, backend: int) -> bool:
    """Whether a connection waits for a lock the connection of ``backend`` holds."""
    sql = "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
    row = await store.run("look at the locks", lambda c: c.execute(sql, (backend,)).fetchone())
    return row[0] > 0


async def test_a_role_without_create_privilege_serves_events_from_a_table_made_before(
    pg_cluster,
):
    """A server whose role may use the schema but not create in it (the events
    table made by a migration role, as the store's own tables may be) reads and
    logs events. Bug: every first use ran ``CREATE TABLE IF NOT EXISTS``, which
    PostgreSQL refuses without CREATE privilege on the schema even when the
    table is there: every event read and write failed ("permission denied")."""
    schema = f"t_{uuid.uuid4().hex[:16]}"
    owner = PostgresPlace(pg_cluster.dsn, schema=schema)
    role = f"app_{schema}"
    try:
        held = await trio.to_thread.run_sync(owner.store.create, "s")  # events are fenced by it
        writer = await owner.events.writer("s")
        assert await writer.append(0, b'{"seen": 0}')
        await held.aclose()
        with psycopg.connect(pg_cluster.dsn, autocommit=True) as connection:
            connection.execute(f"CREATE ROLE {role} LOGIN")
            connection.execute("REVOKE CREATE ON DATABASE postgres FROM PUBLIC")
            connection.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}')
            connection.execute(
                f'GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA "{schema}" TO {role}'
            )
    finally:
        await owner.aclose()
    app = PostgresPlace(pg_cluster.dsn.replace("user=postgres", f"user={role}"), schema=schema)
    try:
        assert await app.events.read("s", -1) == [(0, b'{"seen": 0}')]
        held = await trio.to_thread.run_sync(app.store.create, "s")
        writer = await app.events.writer("s")
        assert await writer.append(1, b'{"seen": 1}')
        await held.aclose()
        assert [sequence for sequence, _ in await app.events.read("s", -1)] == [0, 1]
    finally:
        await app.aclose()


async def _expire(store, session_id: str) -> None:
    """Its holder paused past its lease: the lease expired (by the database's clock)."""
    sql = f"""UPDATE "{store.schema}".leases SET expires = now() - interval '1 second'
              WHERE session_id = %s"""
    await store.run("expire the lease", lambda c: c.execute(sql, (session_id,)))


async def test_a_server_whose_lease_was_taken_over_logs_no_more_events(pg_cluster):
    """The events of a session are fenced by its writer's lease, as its records
    are. Bug: a server paused past its lease (another took the session over and
    logged its own turn's events) still logged events when it woke, under the
    sequences of the new holder's: a reader resuming from the table got the stale
    server's events as the session's."""
    schema = f"t_{uuid.uuid4().hex[:16]}"
    stale, fresh = (
        PostgresPlace(pg_cluster.dsn, schema=schema),
        PostgresPlace(pg_cluster.dsn, schema=schema),
    )
    try:
        old = await trio.to_thread.run_sync(stale.store.create, "s")
        stale_log = await stale.events.writer("s")
        assert await stale_log.append(0, b'{"by": "stale"}')
        await _expire(stale.store, "s")  # the stale server is paused past its lease
        new = await trio.to_thread.run_sync(fresh.store.create, "s")  # taken over
        fresh_log = await fresh.events.writer("s")
        assert await fresh_log.append(1, b'{"by": "fresh"}')
        with pytest.raises(LeaseLostError, match="taken over"):
            await stale_log.append(2, b'{"by": "stale"}')  # it wakes and goes on
        with pytest.raises(LeaseLostError):  # and again, without a round trip
            await stale_log.append(3, b'{"by": "stale"}')
        assert await fresh_log.append(2, b'{"by": "fresh"}')
        assert await fresh.events.read("s", -1) == [
            (0, b'{"by": "stale"}'),
            (1, b'{"by": "fresh"}'),
            (2, b'{"by": "fresh"}'),
        ]
        await new.aclose()
        await old.aclose()
    finally:
        await stale.aclose()
        await fresh.aclose()


async def test_a_server_with_no_writer_of_the_session_logs_no_events(pg_cluster):
    """Events are logged only under a lease held here: a server whose writer of
    the session closed (or never opened) is refused, never logs unfenced."""
    place = PostgresPlace(pg_cluster.dsn, schema=f"t_{uuid.uuid4().hex[:16]}")
    try:
        log = await place.events.writer("s")
        with pytest.raises(LedgerError, match="no writer holds its lease"):
            await log.append(0, b"{}")
        held = await trio.to_thread.run_sync(place.store.create, "s")
        assert await log.append(0, b"{}")
        await held.aclose()
        with pytest.raises(LedgerError, match="no writer holds its lease"):
            await log.append(1, b"{}")
        assert [sequence for sequence, _ in await place.events.read("s", -1)] == [0]
    finally:
        await place.aclose()
