"""Many readers of one session: each gets the same complete sequence of events,
whether it joined before the turn or while it ran."""

from __future__ import annotations

import serve_agents
import trio
from serving import client, running
from sse_client import finished, read_until
from waiting import WAIT, wait_until

READERS = 200


async def test_two_hundred_streams_on_one_session_all_get_the_identical_complete_sequence(
    tmp_path,
):
    """200 clients read the session from its first event while a turn is held
    mid-way, then it ends: every client has every event, ids 0..last without a
    gap or a repeat, byte for byte the same as every other client's."""
    got: list[list] = [[] for _ in range(READERS)]
    async with running(tmp_path) as (server, url), client(url) as http:
        assert (await http.post("/sessions/s/turns", json={"message": "hi"})).status_code == 202
        await read_until(url, "/sessions/s/events", finished(1))
        assert (await http.post("/sessions/s/turns", json={"message": "hold g"})).status_code == 202
        await serve_agents.holding.setdefault("g", trio.Event()).wait()
        with trio.fail_after(4 * WAIT):
            async with trio.open_nursery() as nursery:
                for events in got:
                    nursery.start_soon(
                        lambda events=events: read_until(
                            url, "/sessions/s/events", finished(2), got=events
                        )
                    )
                await wait_until(lambda: server.hub.readers("s") == READERS)
                serve_agents.release("g")
    first = got[0]
    assert [sequence for sequence, _ in first] == list(range(len(first)))
    assert first[-1][1]["event"]["type"] == "turn.finished"
    assert [e[1]["event"]["type"] for e in first].count("turn.finished") == 2
    assert all(events == first for events in got)
