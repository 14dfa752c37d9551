"""Replicas on one database: a turn posted to a server that does not hold the
session is queued in the fleet's inbox and run by the server that does."""

from __future__ import annotations

import uuid
from contextlib import asynccontextmanager

import msgspec
import pytest
import serve_agents
import trio
from serving import client, running
from sse_client import finished, read_until
from waiting import WAIT, wait_until

from trio_agent.fleet import Worker, submit, wait_for_turn
from trio_agent.fleet._inbox import inbox_ready, message_id
from trio_agent.ledger import LedgerError, SessionLockedError
from trio_agent.messages import UserMessage
from trio_agent.serve._hub import Hub
from trio_agent.serve._postgres import PostgresPlace
from trio_agent.serve._relay import Relay
from trio_agent.stores import PostgresStore

EVENTS = "/sessions/s/events"


def _where(pg_cluster):
    return {"dsn": pg_cluster.dsn, "schema": f"t_{uuid.uuid4().hex[:16]}"}


async def _answer(store, number):
    with trio.fail_after(WAIT):
        return await wait_for_turn(store, "s", number)


async def test_a_turn_posted_to_another_server_runs_where_the_session_is_held(pg_cluster):
    """The first server holds the session (a turn runs); the second queues two
    turns posted to it (202 ``queued``), and the first runs them after its own, in
    order; a reader on the second gets every event, in sequence, and each input
    is answered with its turn's result. Bug: the second answered 409 "in use
    elsewhere", and the turn could only be posted where the session was held."""
    where = _where(pg_cluster)
    async with running(None, **where) as (first, url), running(None, **where) as (second, other):
        async with client(url) as http, client(other) as http2:
            assert (await http.post("/sessions/s/turns", json={"message": "hold g"})).json() == {
                "turn": 1
            }
            await serve_agents.holding.setdefault("g", trio.Event()).wait()
            two = await http2.post("/sessions/s/turns", json={"message": "two"})
            three = await http2.post("/sessions/s/turns", json={"message": "three"})
            assert two.status_code == three.status_code == 202
            assert set(two.json()) == set(three.json()) == {"queued"}
            assert three.json()["queued"] > two.json()["queued"]
            assert second.hub.running_turn("s") is None  # not run there
            serve_agents.release("g")
            there = await read_until(other, EVENTS, finished(3))
            store = second.hub.place.store
            answered_two = await _answer(store, two.json()["queued"])
            answered_three = await _answer(store, three.json()["queued"])
            assert (answered_two.turn, answered_two.final_text) == (2, "echo: two")
            assert (answered_three.turn, answered_three.final_text) == (3, "echo: three")
            assert not first.hub.draining and first.hub.holds("s")
            here = await read_until(url, EVENTS, finished(3))
            assert (await http2.get("/sessions/s")).json()["turns"] == 3
    assert there == here
    assert [sequence for sequence, _ in there] == list(range(len(there)))


async def test_content_that_cannot_be_queued_is_a_400_and_nothing_is_queued(pg_cluster):
    where = _where(pg_cluster)
    async with running(None, **where) as (first, url), running(None, **where) as (second, other):
        async with client(url) as http, client(other) as http2:
            await http.post("/sessions/s/turns", json={"message": "hold g"})
            await serve_agents.holding.setdefault("g", trio.Event()).wait()
            refused = await http2.post("/sessions/s/turns", json={"message": ""})
            assert refused.status_code == 400 and "refuses" in refused.json()["error"]
            assert await second.hub.place.inbox.pending("s") == []
            decided = await http2.post("/sessions/s/turns", json={})  # no message: none to queue
            assert decided.status_code == 409 and "elsewhere" in decided.json()["error"]
            serve_agents.release("g")
            await read_until(other, EVENTS, finished(1))


async def test_input_queued_while_its_holder_drains_waits_for_the_next_holder(pg_cluster):
    """A draining server runs no queued input: it stays queued, and the server
    that takes the session next runs it (after that server's own turn)."""
    where = _where(pg_cluster)
    async with running(None, **where) as (second, other), client(other) as http2:
        async with running(None, **where) as (first, url), client(url) as http:
            await http.post("/sessions/s/turns", json={"message": "hold g"})
            await serve_agents.holding.setdefault("g", trio.Event()).wait()
            first.stop()
            queued = await http2.post("/sessions/s/turns", json={"message": "two"})
            assert queued.status_code == 202
            serve_agents.release("g")
        assert [row.id for row in await second.hub.place.inbox.pending("s")] == [
            queued.json()["queued"]
        ]
        assert (await http2.post("/sessions/s/turns", json={"message": "one more"})).json() == {
            "turn": 2
        }
        answered = await _answer(second.hub.place.store, queued.json()["queued"])
        assert (answered.turn, answered.final_text) == (3, "echo: two")


# -- the races, on hubs of their own: the first hears of no queued input (``Deaf``)
# but as it takes the session or lets it go


class Deaf:
    """A ``PostgresPlace`` whose inbox notifies nothing (``DeafInbox``)."""

    def __init__(self, place):
        self.place = place
        self.inbox = DeafInbox(place.inbox)

    def __getattr__(self, name):
        return getattr(self.place, name)


class DeafInbox:
    """A ``Relay`` that never calls ``wake``, and counts its looks at the inbox."""

    def __init__(self, relay):
        self.relay = relay
        self.looks = 0

    def __getattr__(self, name):
        return getattr(self.relay, name)

    async def pending(self, session_id):
        try:
            return await self.relay.pending(session_id)
        finally:
            self.looks += 1

    async def follow(self, wake, held, adopt, *, task_status=trio.TASK_STATUS_IGNORED):
        task_status.started()


@asynccontextmanager
async def hub_on(place, factory=serve_agents.make_agent, **options):
    hub = Hub(place, factory, keepalive_seconds=None, **options)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(hub.run)
            try:
                yield hub
            finally:
                hub.drain()
    finally:
        await place.aclose()


async def _held_idle(hub, place):
    """A turn on session ``s`` run to its end on ``hub``; a reader keeps it held."""
    await hub.start_turn("s", "one")
    watch = await hub.watch("s")
    await wait_until(lambda: hub.running_turn("s") is None and place.inbox.looks >= 1)
    return watch


async def test_input_queued_as_its_holder_lets_the_session_go_is_run_by_its_sender(pg_cluster):
    """The holder lets the session go (idle), and looks at its inbox, before the
    input is queued: the server that queued it takes the session and runs it.
    Bug: the sender only queued it, and the input waited for a holder that had
    gone."""
    where = _where(pg_cluster)
    locked, proceed = trio.Event(), trio.Event()

    async def hesitant(store, session_id, new):
        try:
            return await serve_agents.make_agent(store, session_id, new)
        except SessionLockedError:
            if not locked.is_set():  # the first time: until the holder let it go
                locked.set()
                await proceed.wait()
            raise

    deaf = Deaf(PostgresPlace(**where))
    async with hub_on(deaf, idle_seconds=0.2) as first:
        watch = await _held_idle(first, deaf)
        async with hub_on(PostgresPlace(**where), hesitant) as second:
            posted: list = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: _append(posted, second.post_turn("s", "two")))
                await locked.wait()
                looked = deaf.inbox.looks
                watch.leave(False)  # then it lets the session go, and looks: none yet
                await wait_until(lambda: not first.holds("s") and deaf.inbox.looks > looked)
                proceed.set()
            [(kind, number)] = posted
            assert kind == "queued"
            answered = await _answer(second.place.store, number)
            assert (answered.turn, answered.final_text) == (2, "echo: two")
            assert second.holds("s")


async def test_input_queued_as_its_holder_lets_the_session_go_is_run_by_the_holder(pg_cluster):
    """The input is queued while the holder holds the session but hears of it too
    late to run it (here: never): as it lets the session go it looks at its inbox,
    finds it, and takes the session again to run it. Bug: such input waited for
    whoever took the session next."""
    where = _where(pg_cluster)
    deaf = Deaf(PostgresPlace(**where))
    async with hub_on(deaf, idle_seconds=0.2) as first:
        watch = await _held_idle(first, deaf)
        number = await submit(deaf.store, "s", "two")
        watch.leave(False)
        answered = await _answer(deaf.store, number)
        assert (answered.turn, answered.final_text) == (2, "echo: two")


async def _append(into, awaitable):
    into.append(await awaitable)


async def test_queued_input_a_holder_recorded_before_it_stopped_is_answered_with_its_turn(
    pg_cluster,
):
    """A holder recorded an input's message and its turn, and stopped before it
    stored the answer: the next holder answers it with that turn's result (after
    its own turn), and does not run it again."""
    where = _where(pg_cluster)
    place = PostgresPlace(**where)
    number = await submit(place.store, "s", "two", create=True)
    agent = await serve_agents.make_agent(place.store, "s", True)
    async with agent:
        await agent.prompt(UserMessage(id=message_id(number), content="two"))
    async with hub_on(place) as hub:
        assert await hub.start_turn("s", "one more") == 2
        answered = await _answer(place.store, number)
        assert (answered.turn, answered.final_text) == (1, "echo: two")
        await wait_until(lambda: hub.running_turn("s") is None)
        assert (await hub.state("s"))["turns"] == 2


def _insert_quietly(connection, store, session_id, content, body=None):
    """A row of the inbox, queued with no notification (``body``: its raw content)."""
    row = connection.execute(
        f"""INSERT INTO "{store.schema}".inbox (session_id, content, create_session)
            VALUES (%s, %s, false) RETURNING id""",
        (session_id, msgspec.json.encode(content) if body is None else body),
    ).fetchone()
    return row[0]


async def test_input_whose_notification_was_lost_is_run_by_the_holder_looking_again(pg_cluster):
    """Input queued with no notification (one lost: the listening connection
    dropped, say) is found by the holder's look each second, and run. Bug: the
    holder only ever heard of queued input by its notification."""
    where = _where(pg_cluster)
    place = PostgresPlace(**where)
    async with hub_on(place) as hub:
        await hub.start_turn("s", "one")
        await wait_until(lambda: hub.running_turn("s") is None)
        store = place.store
        await inbox_ready(store)
        number = await store.run("queue quietly", _insert_quietly, store, "s", "two")
        answered = await _answer(store, number)
        assert (answered.turn, answered.final_text) == (2, "echo: two")


async def test_queued_input_the_holder_cannot_run_is_refused_and_the_next_runs(pg_cluster):
    """A row whose content is no message is answered with the reason
    (``wait_for_turn`` raises it), and the input after it runs."""
    where = _where(pg_cluster)
    place = PostgresPlace(**where)
    async with hub_on(place) as hub:
        await hub.start_turn("s", "one")
        await wait_until(lambda: hub.running_turn("s") is None)
        store = place.store
        await inbox_ready(store)
        bad = await store.run("queue quietly", _insert_quietly, store, "s", None, b"17")
        number = await submit(store, "s", "two")
        with pytest.raises(LedgerError, match="not run: its content is not a message"):
            await _answer(store, bad)
        answered = await _answer(store, number)
        assert (answered.turn, answered.final_text) == (2, "echo: two")


# -- what an operator of several replicas runs into


async def test_a_new_session_posted_to_two_servers_at_once_loses_neither_message(pg_cluster):
    """Two servers are posted the first turn of a new session at once: the first
    makes the session while the second, which found it new, makes its agent.
    The second's message is queued for the first (202 ``queued``) and run
    there. Bug: the second answered 202 ``{"turn": 1}``, its turn failed as it
    started (SessionLockedError: the first holds the lease; logged only), and
    its message was dropped: neither run nor queued, and its client, reading
    the events of turn 1, saw the first server's turn as its own."""
    where = _where(pg_cluster)
    asked, go = trio.Event(), trio.Event()

    async def slow(store, session_id, new):
        if not asked.is_set():  # the first time: until the first server made the session
            asked.set()
            await go.wait()
        return await serve_agents.make_agent(store, session_id, new)

    async with (
        hub_on(PostgresPlace(**where)) as first,
        hub_on(PostgresPlace(**where), slow) as second,
    ):
        posted: list = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: _append(posted, second.post_turn("s", "two")))
            await asked.wait()
            assert await first.start_turn("s", "hold g") == 1
            await serve_agents.holding.setdefault("g", trio.Event()).wait()
            go.set()
        serve_agents.release("g")
        [(kind, number)] = posted
        assert kind == "queued"
        answered = await _answer(second.place.store, number)
        assert (answered.turn, answered.final_text) == (2, "echo: two")


async def test_input_queued_for_a_holder_that_died_runs_once_its_lease_expires(pg_cluster):
    """The holder dies (here: its heartbeat is cut and it does nothing more) with
    the session's lease; a turn posted to another server is queued (the lease
    is still live, so that server cannot take the session). Once the lease
    expires, a server runs the input. Bug: nothing did: the server that queued
    it tried to take the session once, before the lease expired, and the
    servers only look at the inbox of sessions they hold; the input waited
    until the next request for the session, or forever (only a fleet Worker,
    if one runs, took it)."""
    where = _where(pg_cluster)
    dead = PostgresStore(where["dsn"], schema=where["schema"], lease_seconds=3, holder="dead")
    agent = await serve_agents.make_agent(dead, "s", True)
    try:
        await agent.prompt("one")

        def unreachable(*args):
            raise LedgerError("the network is down")

        dead.renew = unreachable  # it dies: its lease is renewed no more
        async with hub_on(PostgresPlace(**where)) as second:
            kind, number = await second.post_turn("s", "two")
            assert kind == "queued"
            # no wait for the lease to end: the server takes the session at once
            # then, and from there the lease is its own
            answered = await _answer(second.place.store, number)
            assert (answered.turn, answered.final_text) == (2, "echo: two")
    finally:
        with trio.CancelScope(shield=True):
            try:
                await agent.aclose()  # fenced off once taken over
            except LedgerError:
                pass
        dead.close()


async def test_a_queued_turn_cut_by_a_drain_stays_queued_for_the_next_holder(pg_cluster):
    """The holder drains while a queued input's turn runs, past its
    ``drain_seconds``: the turn is cancelled (recorded so) and the input stays
    queued, as a fleet Worker leaves it (docs/concepts/fleet.md, "Graceful
    drain"); the next holder continues it and answers it with the model's
    reply. Bug: the server stored the cancelled turn's result as the input's
    answer, so a rolling restart answered queued messages with ``cancelled``
    and the model never replied to them."""
    where = _where(pg_cluster)
    place = PostgresPlace(**where)
    async with hub_on(place, drain_seconds=0.1) as first:  # the hold never ends in time
        await first.start_turn("s", "one")
        await wait_until(lambda: first.running_turn("s") is None)
        number = await submit(place.store, "s", "hold g")
        await serve_agents.holding.setdefault("g", trio.Event()).wait()
    store = PostgresStore(where["dsn"], schema=where["schema"], holder="next")
    try:
        assert [row.id for row in await Relay(store).pending("s")] == [number]
        worker = Worker(store, serve_agents.make_agent)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            answered = await _answer(store, number)
            worker.drain()
        assert (answered.turn, answered.final_text) == (3, "after hold g")
    finally:
        await store.aclose()


async def test_a_server_reports_the_turn_another_server_runs(pg_cluster):
    """``GET /sessions/{id}`` and ``GET /sessions`` on a server that does not hold
    the session, while the holder runs its turn: ``running_turn`` is that
    turn, as the holder says. Bug: it was null there (only the turns the
    answering server runs counted), so replicas behind one load balancer
    disagreed on whether a turn runs, and the page on one showed none."""
    where = _where(pg_cluster)
    async with running(None, **where) as (_, url), running(None, **where) as (_, other):
        async with client(url) as http, client(other) as http2:
            await http.post("/sessions/s/turns", json={"message": "hold g"})
            await serve_agents.holding.setdefault("g", trio.Event()).wait()
            here = (await http.get("/sessions/s")).json()
            there = (await http2.get("/sessions/s")).json()
            listed = (await http2.get("/sessions")).json()
            serve_agents.release("g")
            await read_until(other, EVENTS, finished(1))
    assert here["running_turn"] == 1
    assert there["running_turn"] == 1
    assert listed == {"sessions": [{"id": "s", "running_turn": 1}]}


async def test_cancel_posted_to_a_server_that_does_not_hold_the_session_says_so(pg_cluster):
    """``POST /sessions/{id}/cancel`` on a server that does not hold the session,
    while the holder runs its turn: 409 saying the session is in use elsewhere
    (as an approval posted there says). Bug: 409 "no turn of session s is
    running", which is false (the turn runs on), and sends the operator
    looking for a turn that has ended."""
    where = _where(pg_cluster)
    async with running(None, **where) as (_, url), running(None, **where) as (_, other):
        async with client(url) as http, client(other) as http2:
            await http.post("/sessions/s/turns", json={"message": "hold g"})
            await serve_agents.holding.setdefault("g", trio.Event()).wait()
            cancelled = await http2.post("/sessions/s/cancel")
            serve_agents.release("g")
            await read_until(other, EVENTS, finished(1))
    assert cancelled.status_code == 409
    assert "elsewhere" in cancelled.json()["error"]
