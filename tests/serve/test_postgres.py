"""Serving from PostgreSQL (``dsn=``): the events are rows beside the records, so
a stream resumes exactly on a server started afresh on the same database."""

from __future__ import annotations

import uuid

import serve_agents
import trio
from serving import client, running
from sse_client import finished, read_until
from waiting import wait_until

EVENTS = "/sessions/s/events"


async def test_a_stream_resumes_exactly_on_a_new_server_over_the_same_database(pg_cluster):
    where = {"dsn": pg_cluster.dsn, "schema": f"t_{uuid.uuid4().hex[:16]}"}
    async with running(None, **where) as (server, url), client(url) as http:
        await http.post("/sessions/s/turns", json={"message": "hold g"})
        first = await read_until(url, EVENTS, lambda e: e["type"] == "tool.started")
        server.stop()
        serve_agents.release("g")
    async with running(None, **where) as (server, url), client(url) as http:
        rest: list = []
        headers = {"Last-Event-ID": str(first[1][0])}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: read_until(url, EVENTS, finished(2), headers=headers, got=rest)
            )
            await wait_until(lambda: any(d["event"]["type"] == "turn.finished" for _, d in rest))
            assert (await http.post("/sessions/s/turns", json={"message": "two"})).json() == {
                "turn": 2
            }
        whole = await read_until(url, EVENTS, finished(2))
        assert (await http.get("/sessions")).json() == {
            "sessions": [{"id": "s", "running_turn": None}]
        }
        assert (await http.get("/sessions/s")).json()["turns"] == 2
        assert (await http.get("/sessions/nope")).status_code == 404
    assert first[:2] + rest == whole
    assert [sequence for sequence, _ in whole] == list(range(len(whole)))
