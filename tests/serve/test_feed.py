"""Resuming an event stream by sequence: exactly the events after the cursor,
from the log and then live, none twice, none missing; across reconnects in the
middle of a turn and across a server restart."""

from __future__ import annotations

import serve_agents
import trio
from serving import client, running
from sse_client import finished, read_until
from waiting import wait_until

from trio_agent.events import TurnStarted
from trio_agent.serve._eventlog import EventLog
from trio_agent.serve._feed import Feed

EVENTS = "/sessions/s/events"


def started_hold(event) -> bool:
    return event["type"] == "tool.started"


async def test_reconnects_mid_turn_get_each_event_once(tmp_path):
    """A reader that reconnects mid-turn (``?after=`` or ``Last-Event-ID``) gets
    exactly the events after its cursor, those logged before it came back and
    those published while it reads: concatenated, they are the whole turn."""
    async with running(tmp_path) as (server, url), client(url) as http:
        assert (await http.post("/sessions/s/turns", json={"message": "hold g"})).json() == {
            "turn": 1
        }
        first = await read_until(url, EVENTS, started_hold)
        cut = first[1][0]
        again = await read_until(url, f"{EVENTS}?after={cut}", started_hold)
        assert again == [e for e in first if e[0] > cut]
        rest: list = []
        headers = {"Last-Event-ID": str(first[-1][0])}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: read_until(url, EVENTS, finished(1), headers=headers, got=rest)
            )
            await wait_until(lambda: server.hub.readers("s") == 1)
            assert rest == []  # it waits live: the turn holds
            serve_agents.release("g")
        whole = await read_until(url, EVENTS, finished(1))
    assert first + rest == whole
    assert [sequence for sequence, _ in whole] == list(range(len(whole)))
    assert [data["event"]["sequence"] for sequence, data in whole] == list(range(len(whole)))
    assert [data["event"]["type"] for _, data in whole][-3:] == [
        "model.chunk",
        "model.chunk",
        "turn.finished",
    ]


async def test_a_stream_resumes_across_a_server_restart(tmp_path):
    """Cut mid-turn, the server stopped (draining the turn) and started again on the
    same store: ``Last-Event-ID`` gives the rest of that turn from the log, then the
    next turn live, on one stream; nothing twice, nothing missing, no gap."""
    async with running(tmp_path) as (server, url), client(url) as http:
        await http.post("/sessions/s/turns", json={"message": "hold g"})
        first = await read_until(url, EVENTS, started_hold)
        server.stop()  # drains: the turn finishes once released
        serve_agents.release("g")
    async with running(tmp_path) as (server, url), client(url) as http:
        rest: list = []
        headers = {"Last-Event-ID": str(first[-1][0])}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: read_until(url, EVENTS, finished(2), headers=headers, got=rest)
            )
            await wait_until(lambda: any(d["event"]["type"] == "turn.finished" for _, d in rest))
            response = await http.post("/sessions/s/turns", json={"message": "again"})
            assert response.json() == {"turn": 2}
        whole = await read_until(url, EVENTS, finished(2))
    assert first + rest == whole
    sequences = [sequence for sequence, _ in whole]
    assert sequences == list(range(len(whole)))  # a clean close: numbering goes on
    texts = [
        d["event"]["result"]["final_text"]
        for _, d in whole
        if d["event"]["type"] == "turn.finished"
    ]
    assert texts == ["after hold g", "echo: again"]


async def test_a_reader_far_behind_reads_the_log_then_the_tail(tmp_path, monkeypatch):
    """Whatever the cursor, ``after`` gives exactly the events above it, whether
    the in-memory tail still reaches back that far or only the log does."""
    monkeypatch.setattr("trio_agent.serve._feed.TAIL_EVENTS", 4)
    feed = Feed(EventLog(tmp_path), "s")
    await feed.open()
    for sequence in range(10):
        await feed.publish(TurnStarted(sequence=sequence, turn=1))
    for cursor in range(-1, 11):
        got = await feed.after(cursor)
        assert [sequence for sequence, _ in got] == list(range(cursor + 1, 10))
    feed.close()
    restarted = Feed(EventLog(tmp_path), "s")
    assert [s for s, _ in await restarted.after(6)] == [7, 8, 9]


async def test_an_event_published_twice_is_logged_once(tmp_path):
    """An event at or below the last logged sequence is dropped, not sent again."""
    feed = Feed(EventLog(tmp_path), "s")
    await feed.open()
    await feed.publish(TurnStarted(sequence=0, turn=1))
    await feed.publish(TurnStarted(sequence=1, turn=1))
    await feed.publish(TurnStarted(sequence=1, turn=1))
    feed.close()
    again = Feed(EventLog(tmp_path), "s")
    await again.open()
    await again.publish(TurnStarted(sequence=1, turn=1))
    await again.publish(TurnStarted(sequence=2, turn=1))
    assert [s for s, _ in await again.after(-1)] == [0, 1, 2]
    again.close()
