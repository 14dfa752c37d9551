"""The fleet's ``Worker`` against a real PostgreSQL cluster: submitted input answered
in order, wake-up by NOTIFY, takeover of a dead or stalled worker's session, drain,
a session whose agent cannot be made, damaged sessions, and cancellation during a
slow claim."""

from __future__ import annotations

import logging
import threading

import pytest
import trio
import trio.testing
from fleet_agents import add, answers, asked, count_claims, dispatched, fleet_worker
from waiting import WAIT, wait_until

from trio_agent import Agent, LedgerError, ToolResultMessage, UserMessage
from trio_agent.fleet import Worker, agent_maker, submit, wait_for_turn
from trio_agent.fleet._claims import Claims
from trio_agent.ledger import MessageRecord
from trio_agent.stores import JsonlStore
from trio_agent.testing import CallableModel, scripted_response

pytest.importorskip("psycopg")


async def _records(store, session_id):
    return (await store.load(session_id)).records


async def test_submitted_input_is_answered_in_order_and_its_result_awaited(pg_store):
    store = pg_store()
    model = CallableModel(answers)
    worker = Worker(store, agent_maker(model=model, tools=[add]), concurrency=3, poll_seconds=0.2)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        first = [await submit(store, f"s{i}", f"hello {i}", create=True) for i in range(5)]
        second = [await submit(store, f"s{i}", f"again {i}") for i in range(5)]
        for i in range(5):
            one = await wait_for_turn(store, f"s{i}", first[i])
            two = await wait_for_turn(store, f"s{i}", second[i])
            assert (one.turn, one.final_text, one.steps) == (1, f"answered hello {i}", 2)
            assert (two.turn, two.final_text) == (2, f"answered again {i}")
            assert one.end.reason == two.end.reason == "completed"
            assert one.messages == ()  # the transcript is the session's: load it
        worker.drain()
    assert worker.turns == 10 and len(dispatched) == 10
    # the input joined each transcript once, in order, with the fleet's ids
    records = await _records(store, "s3")
    users = [r.message for r in records if type(r) is MessageRecord and r.message.role == "user"]
    assert [(m.id, m.content) for m in users] == [
        (f"fleet-{first[3]}", "hello 3"),
        (f"fleet-{second[3]}", "again 3"),
    ]


async def test_submit_refuses_what_it_cannot_queue(pg_store, tmp_path):
    store = pg_store()
    with pytest.raises(LedgerError, match=r"no session 'ghost'.*create=True"):
        await submit(store, "ghost", "hi")
    with pytest.raises(TypeError, match="needs a PostgresStore"):
        await submit(JsonlStore(tmp_path), "s", "hi")
    with pytest.raises(ValueError, match="session id"):
        await submit(store, "../x", "hi", create=True)
    with pytest.raises(ValueError, match="empty"):
        await submit(store, "s", "", create=True)
    with pytest.raises(TypeError, match="str or a UserMessage"):
        await submit(store, "s", 42, create=True)  # type: ignore[arg-type]
    with pytest.raises(LedgerError, match="has no input 999"):
        await wait_for_turn(store, "s", 999)
    with pytest.raises(TypeError, match="not seed_x"):
        agent_maker(model=CallableModel(answers), seed_x=1)
    with pytest.raises(ValueError, match="concurrency"):
        Worker(store, agent_maker(model=CallableModel(answers)), concurrency=0)
    # a session queued to be created takes more input before it exists
    await submit(store, "later", "one", create=True)
    await submit(store, "later", "two")


async def test_a_notification_wakes_an_idle_worker_long_before_its_poll(pg_store, monkeypatch):
    store = pg_store()
    claims = count_claims(monkeypatch)
    worker = Worker(
        store, agent_maker(model=CallableModel(answers), tools=[add]), poll_seconds=3600
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: claims)  # its first claim found nothing: idle, for an hour
        with trio.fail_after(WAIT):  # only NOTIFY can wake it this soon
            number = await submit(store, "woken", "hello", create=True)
            result = await wait_for_turn(store, "woken", number)
        assert result.final_text == "answered hello"
        worker.drain()


async def test_input_a_dead_worker_answered_is_not_answered_again(pg_store):
    # the worker before recorded the turn but died before storing the answer
    store = pg_store()
    model = CallableModel(answers)
    number = await submit(store, "s", "hello", create=True)
    async with Agent(model=model, tools=[add], store=store, session_id="s") as agent:
        await agent.prompt(UserMessage(id=f"fleet-{number}", content="hello"))
    calls = model.call_count
    worker = Worker(store, agent_maker(model=model, tools=[add]), poll_seconds=0.2)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        result = await wait_for_turn(store, "s", number)
        worker.drain()
    assert model.call_count == calls and len(dispatched) == 1  # nothing run again
    assert (result.turn, result.final_text, result.steps) == (1, "answered hello", 2)
    assert result.end.reason == "completed"


async def test_input_whose_turn_was_cut_short_is_continued_not_repeated(pg_store):
    store = pg_store()
    gate, hanging = trio.Event(), trio.Event()

    async def slow_answer(request):
        if isinstance(request.messages[-1], ToolResultMessage) and not gate.is_set():
            hanging.set()
            await trio.sleep_forever()  # the worker stops here (its turn is cancelled)
        return answers(request)

    model = CallableModel(slow_answer)
    number = await submit(store, "s", "hello", create=True)
    async with trio.open_nursery() as nursery:
        worker = Worker(store, agent_maker(model=model, tools=[add]), poll_seconds=0.2)
        nursery.start_soon(worker.run)
        await hanging.wait()
        nursery.cancel_scope.cancel()
    assert len(dispatched) == 1  # the tool ran; the model's answer never came
    gate.set()
    worker = Worker(store, agent_maker(model=model, tools=[add]), poll_seconds=0.2)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        result = await wait_for_turn(store, "s", number)
        worker.drain()
    assert result.final_text == "answered hello" and result.turn == 2  # a continuation
    records = await _records(store, "s")
    users = [r for r in records if type(r) is MessageRecord and r.message.role == "user"]
    assert len(users) == 1 and len(dispatched) == 1  # the message and the call once each


async def test_drain_finishes_the_turn_under_way_and_starts_no_other(pg_store):
    store = pg_store(lease_seconds=600)
    started = trio.Event()

    async def slow(request):
        started.set()
        await trio.sleep(0.5)
        return scripted_response(f"r-{request.id}", f"answered {asked(request.messages)}")

    model = CallableModel(slow)
    first = await submit(store, "s", "one", create=True)
    second = await submit(store, "s", "two")
    worker = Worker(store, agent_maker(model=model), poll_seconds=0.2)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await started.wait()
        worker.drain()
    assert worker.turns == 1 and worker.sessions == frozenset()
    assert (await wait_for_turn(store, "s", first)).final_text == "answered one"
    # the lease was let go: another worker takes the session at once (not after the
    # lease's ten minutes), and answers "two"
    other = Worker(store, agent_maker(model=model), poll_seconds=0.2)
    async with trio.open_nursery() as nursery:
        await nursery.start(other.run)
        with trio.fail_after(WAIT):
            assert (await wait_for_turn(store, "s", second)).final_text == "answered two"
        other.drain()


async def test_drain_cancels_a_turn_that_outlasts_it_and_keeps_its_input(pg_store):
    store = pg_store(lease_seconds=600)
    hang = True
    asked_once = trio.Event()

    async def hanging(request):
        if hang:
            asked_once.set()
            await trio.sleep_forever()
        return scripted_response(f"r-{request.id}", f"answered {asked(request.messages)}")

    model = CallableModel(hanging)
    number = await submit(store, "s", "one", create=True)
    worker = Worker(store, agent_maker(model=model), poll_seconds=0.2, drain_seconds=0.3)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await asked_once.wait()  # the turn is under way
        worker.drain()
    assert worker.turns == 0
    hang = False
    other = Worker(store, agent_maker(model=model), poll_seconds=0.2)
    async with trio.open_nursery() as nursery:
        await nursery.start(other.run)
        with trio.fail_after(WAIT):  # the lease was let go: not its ten minutes
            result = await wait_for_turn(store, "s", number)
        other.drain()
    assert result.final_text == "answered one"
    ends = [r.end.reason for r in await _records(store, "s") if r.kind == "turn/end"]
    assert ends == ["cancelled", "completed"]


async def test_a_stalled_worker_loses_its_session_and_writes_nothing_more(pg_store):
    # worker A's heartbeat stops (a paused process): its lease expires, worker B
    # takes the session over and answers; A's late write is fenced off
    # (only A's lease is short: B's heartbeat must not lose B's lease on a loaded machine)
    store_a = pg_store(lease_seconds=1.0)  # MIN_LEASE_SECONDS
    store_b = pg_store(schema=store_a.schema)
    resume = trio.Event()

    async def a_model(request):
        await resume.wait()
        return answers(request)

    def frozen(connection, leases):
        raise LedgerError("paused")

    store_a.renew = frozen
    number = await submit(store_a, "s", "hello", create=True)
    worker_a = Worker(store_a, agent_maker(model=CallableModel(a_model), tools=[add]))
    worker_b = Worker(
        store_b, agent_maker(model=CallableModel(answers), tools=[add]), poll_seconds=0.2
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(worker_a.run)
        await wait_until(lambda: worker_a.sessions == {"s"})
        await nursery.start(worker_b.run)
        with trio.fail_after(WAIT):
            result = await wait_for_turn(store_b, "s", number)
        assert result.final_text == "answered hello"
        resume.set()  # A wakes up and tries to go on
        await wait_until(lambda: not worker_a.sessions)  # its fenced write fails; it lets go
        worker_a.drain()
        worker_b.drain()
    assert worker_a.turns == 0 and worker_b.turns == 1
    assert dispatched == ["1+2"]  # A's tool call never ran
    records = (await store_b.load("s")).records  # whole, contiguous
    assert [r.seq for r in records] == list(range(len(records)))


async def test_a_session_whose_agent_cannot_be_made_is_left_and_the_worker_goes_on(
    pg_store, caplog
):
    store = pg_store()

    async def make(store, session_id, new):
        if session_id == "bad":
            raise RuntimeError("no config for it")
        return await agent_maker(model=CallableModel(answers), tools=[add])(store, session_id, new)

    await submit(store, "bad", "hello", create=True)
    good = await submit(store, "good", "hello", create=True)
    worker = Worker(store, make, poll_seconds=0.2)
    with caplog.at_level(logging.ERROR, logger="trio_agent.fleet"):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            assert (await wait_for_turn(store, "good", good)).final_text == "answered hello"
            worker.drain()
    assert "session bad: failed" in caplog.text and "no config for it" in caplog.text


async def test_input_of_a_damaged_session_is_refused_with_the_reason(pg_store):
    store = pg_store()
    number = await submit(store, "s", "hello", create=True)
    async with Agent(model=CallableModel(answers), store=store, session_id="s") as agent:
        pass
    await store.run(
        "damage", lambda c: c.execute(f'UPDATE "{store.schema}".records SET body = %s', (b"{",))
    )
    worker = Worker(store, agent_maker(model=CallableModel(answers)), poll_seconds=0.2)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        with pytest.raises(LedgerError, match="was not run: the session's ledger is damaged"):
            await wait_for_turn(store, "s", number)
        worker.drain()
    assert agent.turns == 0


async def test_two_workers_share_many_sessions_each_input_answered_once(pg_store):
    store_a = pg_store()
    store_b = pg_store(schema=store_a.schema)
    model = CallableModel(answers)
    workers = [
        Worker(store, agent_maker(model=model, tools=[add]), concurrency=4, poll_seconds=0.2)
        for store in (store_a, store_b)
    ]
    async with trio.open_nursery() as nursery:
        for worker in workers:
            await nursery.start(worker.run)
        numbers = {}
        for round_ in range(3):
            for i in range(12):
                numbers[i, round_] = await submit(store_a, f"s{i}", f"m{round_}", create=True)
        for (i, round_), number in numbers.items():
            result = await wait_for_turn(store_b, f"s{i}", number)
            assert result.final_text == f"answered m{round_}"
        for worker in workers:
            worker.drain()
    assert sum(w.turns for w in workers) == 36 and len(dispatched) == 36
    assert all(w.turns > 0 for w in workers)


async def test_refusing_a_damaged_sessions_input_while_the_database_fails_keeps_the_worker(
    pg_store, monkeypatch
):
    """Issue 22 (review of the fleet): a worker that could not refuse a damaged session's input
    because the database failed ended; it goes on with the other sessions, and the input waits to be
    refused later."""
    from trio_agent.fleet import _worker as _fleet_worker

    store = pg_store()
    bad = await submit(store, "bad", "hello", create=True)
    async with Agent(model=CallableModel(answers), store=store, session_id="bad"):
        pass
    await store.run(
        "damage", lambda c: c.execute(f'UPDATE "{store.schema}".records SET body = %s', (b"{",))
    )

    def refuse_fails(*args):
        raise LedgerError("the connection dropped")

    monkeypatch.setattr(_fleet_worker, "refuse", refuse_fails)
    good = await submit(store, "good", "hello", create=True)
    worker = fleet_worker(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        with trio.fail_after(WAIT):
            assert (await wait_for_turn(store, "good", good)).final_text == "answered hello"
        worker.drain()
    monkeypatch.undo()
    assert bad  # still queued: refused later, when the database answers


async def test_cancelling_a_worker_during_a_slow_claim_returns_at_once_and_lets_it_go(
    pg_store, monkeypatch
):
    """Issue 22 (review of the fleet): cancelling a worker while a slow claim ran in its thread
    waited for the database, and the claimed lease was held to its end; the cancel returns at once
    and the abandoned claim lets the lease go."""
    store = pg_store(lease_seconds=600)
    number = await submit(store, "s", "hello", create=True)
    entered, answer, ended = threading.Event(), threading.Event(), threading.Event()
    real = Claims.take

    def slow_take(self, *args):
        entered.set()
        answer.wait(WAIT)  # the database is slow to answer: until the test lets it
        try:
            return real(self, *args)
        finally:
            ended.set()

    monkeypatch.setattr(Claims, "take", slow_take)
    worker = fleet_worker(store)
    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.run)
            await wait_until(entered.is_set)
            nursery.cancel_scope.cancel()
    assert not ended.is_set()  # the cancel returned while the claim still waited
    monkeypatch.undo()
    answer.set()  # the abandoned claim takes the lease now, and lets it go
    await wait_until(ended.is_set)
    other = fleet_worker(pg_store(schema=store.schema))
    async with trio.open_nursery() as nursery:
        await nursery.start(other.run)
        with trio.fail_after(WAIT):  # not the lease's ten minutes: it was let go
            assert (await wait_for_turn(store, "s", number)).final_text == "answered hello"
        other.drain()


async def test_an_agent_on_another_store_is_an_error_and_its_session_left(pg_store, caplog):
    """``make_agent`` makes the agent on a store of its own (the same database):
    its writer is refused the lease the worker claimed for it. The worker says
    so as an error and leaves the session for ``BACKOFF_SECONDS``, its input
    kept. Bug: it took this for another worker holding the session (an INFO
    record), let the claim go and claimed the session again at once: a loop
    that hammered the database for ever, the input never answered, nothing
    said at the levels an operator reads."""
    store = pg_store()
    other = pg_store(schema=store.schema)
    claimed: list[str] = []

    async def make(given, session_id, new):
        claimed.append(session_id)
        return await agent_maker(model=CallableModel(answers))(other, session_id, new)

    number = await submit(store, "s", "hello", create=True)
    worker = Worker(store, make, poll_seconds=0.2)
    with caplog.at_level(logging.INFO, logger="trio_agent.fleet"):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await wait_until(lambda: any(r.levelno >= logging.ERROR for r in caplog.records))
            worker.drain()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "make_agent must make the agent on the worker's store" in errors[0]
    assert claimed == ["s"]  # left, not claimed again at once
    waiting = await store.run(
        "read the inbox",
        lambda c: c.execute(f'SELECT id FROM "{store.schema}".inbox WHERE done IS NULL').fetchall(),
    )
    assert [row[0] for row in waiting] == [number]
