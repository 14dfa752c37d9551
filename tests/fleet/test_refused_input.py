"""Input the agent refuses, in the fleet: ``submit`` refuses what it can check at
once, and a worker answers input its agent refuses with the reason instead of
retrying it forever, while a transient failure is still retried."""

from __future__ import annotations

import msgspec
import pytest
import trio
from fleet_agents import add, dispatched
from fleet_agents import answers as _answers
from waiting import WAIT, wait_until

from trio_agent import LedgerError, TextBlock, TranscriptError, UserMessage
from trio_agent.fleet import Worker, agent_maker, submit, wait_for_turn
from trio_agent.fleet._inbox import inbox_ready
from trio_agent.limits import MAX_CONTENT_BLOCKS
from trio_agent.testing import CallableModel

pytest.importorskip("psycopg")

TOO_MANY = tuple(TextBlock(f"part {i}") for i in range(MAX_CONTENT_BLOCKS + 44))


@pytest.fixture(autouse=True)
def _clear():
    dispatched.clear()


@pytest.fixture(autouse=True)
def _long_backoff(monkeypatch):
    """A session a worker backs off from is left ten minutes: input taken for a failure to
    retry would then be answered only long after any bound of these tests."""
    from trio_agent.fleet import _worker

    monkeypatch.setattr(_worker, "BACKOFF_SECONDS", 600.0)


def _worker(store, **options):
    options.setdefault("poll_seconds", 0.2)
    return Worker(store, agent_maker(model=CallableModel(_answers), tools=[add]), **options)


async def _queued(store) -> int:
    sql = f'SELECT count(*) FROM "{store.schema}".inbox'
    return await store.run("count the inbox", lambda c: c.execute(sql).fetchone()[0])


async def _queue_raw(store, session_id: str, body: bytes, create: bool = True) -> int:
    """A row as an older client (or a hand) could have queued it, past ``submit``'s checks."""
    sql = f"""INSERT INTO "{store.schema}".inbox (session_id, content, create_session)
              VALUES (%s, %s, %s) RETURNING id"""
    await inbox_ready(store)  # the fleet's table (submit and the workers make it)
    return await store.run(
        "queue raw input",
        lambda c: c.execute(sql, (session_id, body, create)).fetchone()[0],
    )


async def test_submit_refuses_a_message_its_agent_would_refuse(pg_store):
    """submit queued 300 text blocks (over MAX_CONTENT_BLOCKS); the worker's turn
    refused them, and the session's input waited behind them forever."""
    store = pg_store()
    with pytest.raises(TranscriptError, match="300 blocks, more than 256") as refused:
        await submit(store, "s", UserMessage("u", TOO_MANY), create=True)
    assert refused.value.code == "INVALID_FIELD"
    with pytest.raises(TranscriptError, match=r"content\[1\] is a UserMessage"):
        await submit(store, "s", UserMessage("u", (TextBlock("a"), UserMessage("v", "b"))))
    assert await _queued(store) == 0  # nothing queued


@pytest.mark.parametrize(
    "message",
    ["lone \ud800 surrogate", UserMessage("u", (TextBlock("fine"), TextBlock("bad \udfff")))],
    ids=["str", "blocks"],
)
async def test_submit_refuses_a_lone_surrogate_as_bad_input(pg_store, message):
    """A lone surrogate raised a bare UnicodeEncodeError from submit (the JSON
    encoding of the row), not the clear error any other bad input gets."""
    store = pg_store()
    with pytest.raises(TranscriptError, match=r"not valid Unicode \(lone surrogate\)") as refused:
        await submit(store, "s", message, create=True)
    assert refused.value.code == "INVALID_UNICODE"
    assert "cannot be queued for session 's'" in str(refused.value)
    assert await _queued(store) == 0


async def test_input_its_agent_refuses_is_answered_with_the_reason_and_the_session_goes_on(
    pg_store,
):
    """An input the agent refuses (TranscriptError when its turn starts) was taken
    for a transient failure: the worker backed off 30 s and took it again, forever;
    wait_for_turn never returned and the session's later input waited behind it."""
    store = pg_store()
    first = await submit(store, "s", "hello", create=True)
    poison = await _queue_raw(store, "s", msgspec.json.encode(TOO_MANY), create=False)
    after = await submit(store, "s", "again")
    worker = _worker(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        with trio.fail_after(WAIT):  # far below the back-off
            assert (await wait_for_turn(store, "s", first)).final_text == "answered hello"
            with pytest.raises(LedgerError, match=r"was not run: .*300 blocks, more than 256"):
                await wait_for_turn(store, "s", poison)
            assert (await wait_for_turn(store, "s", after)).final_text == "answered again"
        worker.drain()
    assert worker.turns == 2 and len(dispatched) == 2


async def test_a_refused_input_that_would_create_its_session_creates_nothing(pg_store):
    """The refusal leaves the session as it was: a refused input that would have
    created it creates nothing (the worker entered the new agent, which records
    the session, before its first turn was refused), and a later one creates it."""
    store = pg_store()
    poison = await _queue_raw(store, "new", msgspec.json.encode(TOO_MANY))
    worker = _worker(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        with trio.fail_after(WAIT):
            with pytest.raises(LedgerError, match=r"was not run: .*more than 256"):
                await wait_for_turn(store, "new", poison)
            with pytest.raises(LedgerError, match="no session 'new'"):
                await store.load("new")
            with pytest.raises(LedgerError, match="no session 'new'"):
                await submit(store, "new", "hello")  # not queued to be created either
            number = await submit(store, "new", "hello", create=True)
            result = await wait_for_turn(store, "new", number)
        worker.drain()
    assert (result.turn, result.final_text) == (1, "answered hello")


async def test_a_refused_first_input_lets_the_next_one_create_the_session(pg_store):
    """Input queued behind a refused one that was to create the session still
    creates it: the session was queued to be created when it was submitted."""
    store = pg_store()
    poison = await _queue_raw(store, "new", msgspec.json.encode(TOO_MANY))
    after = await submit(store, "new", "hello")  # queued to be created: accepted
    worker = _worker(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        with trio.fail_after(WAIT):
            with pytest.raises(LedgerError, match=r"was not run: .*more than 256"):
                await wait_for_turn(store, "new", poison)
            result = await wait_for_turn(store, "new", after)
        worker.drain()
    assert (result.turn, result.final_text) == (1, "answered hello")


async def test_input_whose_row_does_not_decode_is_refused_not_retried(pg_store):
    """A row whose content is no message (written by hand, or by a newer client)
    failed to decode when the worker read the inbox: the session was backed off
    and read again, forever, and none of its input was answered."""
    store = pg_store()
    broken = await _queue_raw(store, "s", b'{"not": "a message"}')
    after = await submit(store, "s", "hello")
    worker = _worker(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        with trio.fail_after(WAIT):
            with pytest.raises(LedgerError, match="was not run: its content is not a message"):
                await wait_for_turn(store, "s", broken)
            assert (await wait_for_turn(store, "s", after)).final_text == "answered hello"
        worker.drain()


async def test_a_failing_agent_factory_is_retried_and_its_input_kept(pg_store):
    """The other side of the refusal: a transient failure (here the agent factory)
    must not refuse the input; the session is left and tried again."""
    store = pg_store()
    failing = True
    made = trio.Event()

    async def make(store_, session_id, new):
        if failing:
            made.set()
            raise RuntimeError("the model's configuration is not there yet")
        return await agent_maker(model=CallableModel(_answers), tools=[add])(
            store_, session_id, new
        )

    number = await submit(store, "s", "hello", create=True)
    worker = Worker(store, make, poll_seconds=0.2)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        with trio.fail_after(WAIT):
            await made.wait()
        # the worker is done with the session: it backed off (or refused the input)
        await wait_until(lambda: not worker.sessions)
        done = await store.run(
            "read the input",
            lambda c: c.execute(
                f'SELECT done IS NOT NULL FROM "{store.schema}".inbox WHERE id = %s', (number,)
            ).fetchone()[0],
        )
        worker.drain()
    assert done is False
    failing = False
    other = _worker(pg_store(schema=store.schema))
    async with trio.open_nursery() as nursery:
        await nursery.start(other.run)
        with trio.fail_after(WAIT):
            assert (await wait_for_turn(store, "s", number)).final_text == "answered hello"
        other.drain()
