"""The PostgreSQL store's leases (trio_agent/stores/postgres/_leases.py) against the
suite's cluster: what the heartbeat's renewals may and may not do."""

from __future__ import annotations

import threading

import pytest
from leases import lease_ended
from waiting import WAIT, wait_until

from trio_agent import Agent
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
