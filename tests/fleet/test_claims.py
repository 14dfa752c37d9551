"""Fleet claims (trio_agent/fleet/_claims.py) against the suite's cluster: what two
workers claiming at once may do to each other."""

from __future__ import annotations

import pytest
import trio
from waiting import wait_until_async

from trio_agent.ledger import LedgerError
from trio_agent.stores.postgres._leases import Held

psycopg = pytest.importorskip("psycopg")

PAUSE_KEY = 7_240_531  # the advisory lock the paused claims wait on


def _pause_between_rows(connection, schema: str) -> None:
    """A trigger that stops a claim before its second lease row (holder ``a``
    before ``s2``, holder ``b`` before ``s1``) until the test lets it go on: each
    holding the row it took first."""
    connection.execute(
        f"""CREATE FUNCTION "{schema}".pause() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF (NEW.holder = 'a' AND NEW.session_id = 's2')
                        OR (NEW.holder = 'b' AND NEW.session_id = 's1') THEN
                    PERFORM pg_advisory_xact_lock_shared({PAUSE_KEY});
                END IF;
                RETURN NEW;
            END $$"""
    )
    connection.execute(
        f"""CREATE TRIGGER pause BEFORE INSERT ON "{schema}".leases
            FOR EACH ROW EXECUTE FUNCTION "{schema}".pause()"""
    )


async def _paused(store, count: int) -> bool:
    sql = """SELECT count(*) FROM pg_locks
             WHERE locktype = 'advisory' AND objid = %s AND NOT granted"""
    row = await store.run("look at the locks", lambda c: c.execute(sql, (PAUSE_KEY,)).fetchone())
    return row[0] >= count


async def test_claims_of_overlapping_sessions_in_opposite_orders_do_not_deadlock(
    pg_store, pg_cluster
):
    """Two workers claiming the same expired sessions, one listing them s1, s2 and
    the other s2, s1: each took the lease row it listed first and waited for the
    other's, and PostgreSQL aborted one claim ("deadlock detected"), which the
    next poll tried again. The leases are now taken in session order. Each claim
    is stopped by a trigger before its second row, both stopped at once, then
    let go together."""
    store_a = pg_store(holder="a")
    store_b = pg_store(holder="b", schema=store_a.schema)
    taken = await store_a.run("lease", store_a.lease_sessions, ["s1", "s2"])
    freed = [Held(session_id, epoch) for session_id, epoch, _ in taken]
    await store_a.run("free", store_a.free, freed)  # free again: the claims update the rows
    await store_a.run("add the trigger", _pause_between_rows, store_a.schema)
    pause = await trio.to_thread.run_sync(lambda: psycopg.connect(pg_cluster.dsn, autocommit=True))
    try:
        await trio.to_thread.run_sync(pause.execute, f"SELECT pg_advisory_lock({PAUSE_KEY})")
        outcomes: dict[str, object] = {}

        async def claim(store, name, session_ids):
            try:
                taken = await store.run("claim sessions", store.lease_sessions, session_ids)
                outcomes[name] = sorted(session_id for session_id, _, _ in taken)
            except LedgerError as exc:
                outcomes[name] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(claim, store_a, "a", ["s1", "s2"])
            await wait_until_async(lambda: _paused(store_a, 1))  # a holds its first row
            nursery.start_soon(claim, store_b, "b", ["s2", "s1"])
            await wait_until_async(lambda: _paused(store_a, 2))  # b is stopped too
            await trio.to_thread.run_sync(pause.execute, f"SELECT pg_advisory_unlock({PAUSE_KEY})")
    finally:
        await trio.to_thread.run_sync(pause.close)
    errors = [o for o in outcomes.values() if isinstance(o, LedgerError)]
    assert not errors, errors
    assert sorted(map(tuple, outcomes.values())) == [(), ("s1", "s2")]  # one took both


def _pause_at_first_update(connection, schema: str) -> None:
    """A trigger that stops each transaction at the first lease row it updates,
    that row locked, until the test lets it go on."""
    connection.execute(
        f"""CREATE FUNCTION "{schema}".pause_once() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF current_setting('test.paused', true) IS DISTINCT FROM 'yes' THEN
                    PERFORM set_config('test.paused', 'yes', true);
                    PERFORM pg_advisory_xact_lock_shared({PAUSE_KEY});
                END IF;
                RETURN NEW;
            END $$"""
    )
    connection.execute(
        f"""CREATE TRIGGER pause_once BEFORE UPDATE ON "{schema}".leases
            FOR EACH ROW EXECUTE FUNCTION "{schema}".pause_once()"""
    )


async def _waiting(store, count: int) -> bool:
    """Whether ``count`` connections wait for a lock (the pause, or a row)."""
    sql = "SELECT count(DISTINCT pid) FROM pg_locks WHERE NOT granted"
    row = await store.run("look at the locks", lambda c: c.execute(sql).fetchone())
    return row[0] >= count


async def test_a_late_renewal_and_a_claim_of_the_same_sessions_do_not_deadlock(
    pg_store, pg_cluster
):
    """A worker paused past its leases wakes and renews them just as another
    worker claims them. The renewal locked the lease rows in the order of its
    join (here s2 first) and the claim in session order (s1 first): each waited
    for the other's row, and PostgreSQL aborted one ("deadlock detected"). Every
    statement that locks many lease rows now locks them in session order. Both
    are stopped by a trigger at their first row, then let go together."""
    store_a = pg_store(holder="a")
    store_b = pg_store(holder="b", schema=store_a.schema)
    held = []
    for session_id in ("s2", "s1"):  # s2's row first in the table
        for taken_id, epoch, _ in await store_a.run("lease", store_a.lease_sessions, [session_id]):
            held.append(Held(taken_id, epoch))
    expire = f"""UPDATE "{store_a.schema}".leases SET expires = now() - interval '1 second'"""
    await store_a.run("expire the leases", lambda c: c.execute(expire))  # a is paused
    await store_a.run("add the trigger", _pause_at_first_update, store_a.schema)
    pause = await trio.to_thread.run_sync(lambda: psycopg.connect(pg_cluster.dsn, autocommit=True))
    outcomes: dict[str, object] = {}

    async def attempt(name, store, what, function, arguments):
        try:
            outcomes[name] = await store.run(what, function, arguments)
        except LedgerError as exc:
            outcomes[name] = exc

    try:
        await trio.to_thread.run_sync(pause.execute, f"SELECT pg_advisory_lock({PAUSE_KEY})")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(attempt, "renew", store_a, "renew leases", store_a.renew, held)
            await wait_until_async(lambda: _waiting(store_a, 1))  # a holds a row
            claim = ["s1", "s2"]
            nursery.start_soon(attempt, "claim", store_b, "claim", store_b.lease_sessions, claim)
            await wait_until_async(lambda: _waiting(store_a, 2))  # b holds one or waits
            await trio.to_thread.run_sync(pause.execute, f"SELECT pg_advisory_unlock({PAUSE_KEY})")
    finally:
        await trio.to_thread.run_sync(pause.close)
    errors = [o for o in outcomes.values() if isinstance(o, LedgerError)]
    assert not errors, errors
    assert outcomes["renew"] == {"s1": {1}, "s2": {1}}  # a kept both; b waited, took none
    assert outcomes["claim"] == []
