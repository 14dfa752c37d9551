"""The fleet's inbox (``submit``, ``wait_for_turn``) against a real PostgreSQL cluster:
what a wait costs while it waits, and input for a session whose creation was
refused."""

from __future__ import annotations

import time

import pytest
import trio
import trio.testing

from trio_agent import LedgerError
from trio_agent.fleet import submit, wait_for_turn

pytest.importorskip("psycopg")


async def test_waiting_for_turns_takes_no_thread_of_the_default_limiter(pg_store):
    """Issue 22 (review of the fleet): each ``wait_for_turn`` held a thread of trio's default
    limiter while it waited, so many waits starved every other ``trio.to_thread`` call."""
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


async def test_a_refused_creation_does_not_count_as_a_session_to_come(pg_store):
    """Issue 22 (review of the fleet): input queued to create a session counted as a session to come
    after its creation was refused, so ``submit`` without ``create=True`` took more input for it."""
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
