"""The PostgreSQL store's leases (trio_agent/stores/postgres/_leases.py) against the
suite's cluster: what the heartbeat's renewals may and may not do."""

from __future__ import annotations

import threading

import pytest
from leases import lease_ended
from waiting import WAIT, wait_until, wait_until_async

from trio_agent import Agent
from trio_agent.ledger import LedgerError
from trio_agent.testing import ScriptedModel

pytest.importorskip("psycopg")


async def test_a_renewal_under_way_when_the_writer_closes_does_not_take_the_session_again(
    pg_store,
):
    """A renewal the heartbeat had begun before the writer closed, committed after the close
    had freed the lease, set the lease 30 s ahead again: for a moment the session was held by
    nobody's writer, and a resume right after ``aclose`` was refused ("this process holds the
    lease"). Found on a loaded machine by the cancellation explorer of tests/ledger/; here the
    heartbeat's renewal is held across the close, then let go."""
    store = pg_store(lease_seconds=3)  # renewed every second
    armed, entered, go, renewed, hold = (threading.Event() for _ in range(5))
    real = store.call

    def call(what, function, *args):
        if what != "renew leases" or not armed.is_set():
            return real(what, function, *args)
        armed.clear()
        entered.set()
        go.wait(WAIT)  # the renewal is under way: the writer closes meanwhile
        try:
            return real(what, function, *args)  # committed
        finally:
            renewed.set()
            hold.wait(WAIT)  # the heartbeat frees nothing more until the test has looked

    store.call = call
    agent = Agent(model=ScriptedModel([]), store=store, session_id="s1")
    try:
        async with agent:
            armed.set()
            await wait_until(entered.is_set)
        assert await lease_ended(store, "s1")  # aclose freed it
        go.set()
        await wait_until(renewed.is_set)
        assert await lease_ended(store, "s1")  # ... and the late renewal did not take it back
        resumed = await Agent.resume(store, "s1", model=ScriptedModel([]))
        await resumed.aclose()
    finally:
        go.set()
        hold.set()


async def test_a_lease_the_heartbeat_could_not_free_is_freed_once_the_database_answers(
    pg_store,
):
    """A writer closed while the database did not answer (its own free and the
    heartbeat's first one fail) has its lease freed by the heartbeat once the
    database answers again, not left to expire. Bug: the heartbeat dropped a
    free that failed, so the session stayed locked for the rest of its lease (a
    worker's claims let go during a database restart: their sessions held by
    nobody for up to ``lease_seconds``), though ``Claims.release`` counts on the
    heartbeat's thread to try again."""
    store = pg_store(lease_seconds=600)  # expires long after the test
    refused: list[str] = []
    real = store.call

    def call(what, function, *args):
        if what == "free the lease" or (what == "free leases" and what not in refused):
            refused.append(what)
            raise LedgerError("the database does not answer")
        return real(what, function, *args)

    store.call = call
    async with Agent(model=ScriptedModel([]), store=store, session_id="s1"):
        pass
    await wait_until(lambda: "free leases" in refused)
    await wait_until_async(lambda: lease_ended(store, "s1"))
    resumed = await Agent.resume(store, "s1", model=ScriptedModel([]))
    await resumed.aclose()
