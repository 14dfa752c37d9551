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

from trio_agent.fleet import submit, wait_for_turn
from trio_agent.fleet._inbox import inbox_ready, message_id
from trio_agent.ledger import LedgerError, SessionLockedError
from trio_agent.messages import UserMessage
from trio_agent.serve._hub import Hub
from trio_agent.serve._postgres import PostgresPlace

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

    async def follow(self, wake, held, *, task_status=trio.TASK_STATUS_IGNORED):
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
