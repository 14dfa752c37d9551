"""LISTEN/NOTIFY in the fleet (``Listener``) against a real PostgreSQL cluster: a
schema name as long as PostgreSQL allows, a wait whose listening connection the
server ends, and a worker's listening connection ending with it."""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing
from fleet_agents import count_claims, fleet_worker
from waiting import WAIT, wait_until, wait_until_async

from trio_agent.fleet import submit, wait_for_turn

pytest.importorskip("psycopg")


async def test_a_schema_name_of_63_characters_carries_notifications(pg_store, monkeypatch):
    """Issue 22 (review of the fleet): a schema name of 63 characters, PostgreSQL's longest, gave a
    notification channel past the identifier limit, so only a poll woke the worker."""
    store = pg_store(schema="s" * 63)
    number = await submit(store, "s1", "hello", create=True)
    claims = count_claims(monkeypatch)
    worker = fleet_worker(store, poll_seconds=3600)  # only a notification wakes it soon
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_for_turn(store, "s1", number)
        # s1 let go, and the claim that follows found nothing: the worker is idle
        await wait_until(lambda: not worker.sessions and len(claims) >= 2)
        number = await submit(store, "s2", "hello", create=True)
        with trio.fail_after(WAIT):
            assert (await wait_for_turn(store, "s2", number)).final_text == "answered hello"
        worker.drain()


def _listeners_of(store) -> str:
    return (
        f"FROM pg_stat_activity WHERE query LIKE 'LISTEN \"{store.schema}.%%'"
        " AND pid <> pg_backend_pid()"
    )


async def _listening(store) -> int:
    sql = f"SELECT count(*) {_listeners_of(store)}"
    return await store.run("count listeners", lambda c: c.execute(sql).fetchone()[0])


async def test_a_wait_goes_on_when_its_listening_connection_is_ended(pg_store):
    """Issue 22 (review of the fleet): a ``wait_for_turn`` whose listening connection the server
    ended never heard the answer; it listens again and gets it."""
    store = pg_store()
    number = await submit(store, "s", "hello", create=True)
    async with trio.open_nursery() as nursery:
        result = []

        async def wait():
            result.append(await wait_for_turn(store, "s", number))

        nursery.start_soon(wait)
        await wait_until_async(lambda: _listening(store))
        sql = f"SELECT pg_terminate_backend(pid) {_listeners_of(store)}"
        await store.run("end the listener", lambda c: c.execute(sql))
        worker = fleet_worker(pg_store(schema=store.schema))
        await nursery.start(worker.run)
        await wait_until(lambda: result)
        worker.drain()
    assert result[0].final_text == "answered hello"


async def test_a_workers_listening_connection_ends_with_it(pg_store):
    """Issue 22 (review of the fleet): a worker left its listening connection open after it
    drained."""
    store = pg_store()
    worker = fleet_worker(store, poll_seconds=30)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        assert await _listening(store) == 1
        worker.drain()
    # its thread waits a second at most, then closes it
    await wait_until_async(lambda: _no_listener(store))


async def _no_listener(store) -> bool:
    return await _listening(store) == 0


async def test_a_cancelled_open_returns_at_once_and_its_late_connection_is_closed(pg_store):
    """Cancelling a listener's ``open`` (a ``wait_for_turn`` or a worker cancelled
    while the database is slow to connect: up to ``connect_timeout``, 10 s a
    try) returns at once, and the connection its thread makes after is closed.
    Bug: the open was a thread hop that cancellation waits for, so a cancelled
    ``wait_for_turn`` stayed until the connection was made or refused."""
    from trio_agent.fleet._listen import Listener, channel

    store = pg_store()
    connecting, connect = threading.Event(), threading.Event()
    made: list = []
    real = store.listen_connection

    def slow():
        connecting.set()
        connect.wait()  # until the test has seen the open return
        made.append(real())
        return made[-1]

    store.listen_connection = slow
    listener = Listener(store, channel(store, "inbox"))
    returned = trio.Event()

    async def opening(scope: trio.CancelScope) -> None:
        with scope:
            await listener.open()
        returned.set()

    scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        try:
            nursery.start_soon(opening, scope)
            await wait_until(connecting.is_set)
            scope.cancel()
            with trio.move_on_after(WAIT):
                await returned.wait()
            assert returned.is_set()
        finally:
            connect.set()
    await wait_until(lambda: made and made[0].closed)
