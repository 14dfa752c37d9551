"""The fleet's inbox (``submit``, ``wait_for_turn``) against a real PostgreSQL cluster:
what a wait costs while it waits, and input for a session whose creation was
refused."""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing
from waiting import WAIT, wait_until

from trio_agent import Agent, LedgerError
from trio_agent.fleet import submit, wait_for_turn
from trio_agent.fleet._listen import Listener
from trio_agent.testing import CallableModel, scripted_response

pytest.importorskip("psycopg")


async def test_waiting_for_turns_takes_no_thread_of_the_default_limiter(pg_store, monkeypatch):
    """Issue 22 (review of the fleet): each ``wait_for_turn`` held a thread of trio's default
    limiter while it waited, so many waits starved every other ``trio.to_thread`` call.

    Once every wait has entered its listener's wait (counted, not guessed with a sleep), none
    of them holds a token of the default limiter."""
    store = pg_store()
    numbers = [await submit(store, f"s{i}", "hello", create=True) for i in range(30)]
    limiter = trio.to_thread.current_default_thread_limiter()
    waiting = set()
    real = Listener.wait

    async def counted(self, seconds):
        waiting.add(self)
        return await real(self, seconds)

    monkeypatch.setattr(Listener, "wait", counted)
    async with trio.open_nursery() as nursery:
        for i, number in enumerate(numbers):
            nursery.start_soon(wait_for_turn, store, f"s{i}", number)
        await wait_until(lambda: len(waiting) == len(numbers))  # nobody answers: no worker runs
        assert limiter.borrowed_tokens == 0  # every token free for other thread hops
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


async def _tables(store) -> set[str]:
    sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
    rows = await store.run("list tables", lambda c: c.execute(sql, (store.schema,)).fetchall())
    return {row[0] for row in rows}


async def test_the_fleet_makes_its_inbox_and_the_store_knows_none(pg_store):
    """The house issue (33): the store's schema held the fleet's inbox table, and
    the fleet's claims were consulted by the store's take. The store now makes
    only its own tables; the fleet makes the inbox at its first use; a store that
    may not create anything gets a clear error, not a missing relation."""
    store = pg_store()
    session = Agent(model=CallableModel(lambda request: scripted_response("hi")), store=store)
    await session.prompt("hello")
    await session.aclose()
    assert await _tables(store) == {"records", "leases", "meta"}
    reader = pg_store(schema=store.schema, create_schema=False)
    with pytest.raises(LedgerError, match="has no fleet inbox, and may not make one"):
        await submit(reader, session.session_id, "hi")
    number = await submit(store, session.session_id, "more")
    assert "inbox" in await _tables(store) and number >= 1
    assert await submit(reader, session.session_id, "and more") == number + 1


async def test_a_cancelled_wait_for_turn_returns_while_its_read_hangs(pg_store):
    """Cancelling ``wait_for_turn`` returns at once, as it says, even while its
    look at the input hangs (the database away: the pool waits 30 s for a
    connection). Bug: the look was a store call that cancellation waits for, so
    a cancelled wait stayed until the database answered or the pool gave up."""
    store = pg_store()
    number = await submit(store, "s", "hello", create=True)
    looking, answer = threading.Event(), threading.Event()
    real = store.call

    def call(what, function, *args):
        if what.startswith("read input"):
            looking.set()
            answer.wait()  # until the test has seen the wait return
        return real(what, function, *args)

    store.call = call
    returned = trio.Event()
    waiting: list[trio.CancelScope] = []

    async def wait() -> None:
        with trio.CancelScope() as scope:
            waiting.append(scope)
            await wait_for_turn(store, "s", number)
        returned.set()

    async with trio.open_nursery() as nursery:
        try:
            nursery.start_soon(wait)
            await wait_until(looking.is_set)
            waiting[0].cancel()
            with trio.move_on_after(WAIT):
                await returned.wait()
            assert returned.is_set()
        finally:
            answer.set()  # the hung read ends (the wait, not abandoning it, too)
