"""Idle streams and idle sessions: an event stream with nothing to send sends a
keep-alive comment; a session nobody uses is released and opened again by the
next request."""

from __future__ import annotations

import pytest
import serve_agents
import trio
from serving import client, running
from sse_client import finished, read_until
from waiting import WAIT, wait_until

from trio_agent.serve import Server


async def read_raw(url: str, path: str, until: bytes) -> bytes:
    """The stream's bytes, read off a socket until ``until`` came (bounded)."""
    host, _, port = url.removeprefix("http://").rpartition(":")
    got = b""
    with trio.fail_after(WAIT):
        async with await trio.open_tcp_stream(host, int(port)) as stream:
            await stream.send_all(f"GET {path} HTTP/1.1\r\nhost: {host}\r\n\r\n".encode())
            while until not in got:
                chunk = await stream.receive_some(65536)
                assert chunk, got
                got += chunk
    return got


async def test_an_idle_stream_sends_keep_alive_comments(tmp_path):
    """Caught up and waiting, the stream sends ': keep-alive' (a comment every SSE
    client skips) rather than nothing, which a proxy may cut."""
    async with running(tmp_path, keepalive_seconds=0.05) as (server, url), client(url) as http:
        await http.post("/sessions/s/turns", json={"message": "hi"})
        [*_, (last, _)] = await read_until(url, "/sessions/s/events", finished(1))
        got = await read_raw(url, f"/sessions/s/events?after={last}", b": keep-alive\n\n")
    assert b"id: " not in got  # nothing after the last event: only the comment


async def test_an_idle_session_is_released_and_opened_again_on_demand(tmp_path):
    """Unused (no turn, no reader, no request), the session's agent and ledger are
    closed: another process could open it. The next turn resumes it, and its
    events go on from the last sequence."""
    async with running(tmp_path, idle_seconds=0.2) as (server, url), client(url) as http:
        await http.post("/sessions/s/turns", json={"message": "hi"})
        first = await read_until(url, "/sessions/s/events", finished(1))
        await wait_until(lambda: server.hub.readers("s") == 0 and not server.hub.holds("s"))
        other = await serve_agents.make_agent(server.hub.place.store, "s", False)
        await other.aclose()  # the ledger was free: its lock released
        assert (await http.post("/sessions/s/turns", json={"message": "again"})).status_code == 202
        both = await read_until(url, "/sessions/s/events", finished(2))
    assert both[: len(first)] == first
    assert [sequence for sequence, _ in both] == list(range(len(both)))
    assert both[-1][1]["event"]["result"]["final_text"] == "echo: again"


@pytest.mark.parametrize("name", ["keepalive_seconds", "idle_seconds"])
@pytest.mark.parametrize("value", [0, -1.0, float("inf"), float("nan"), "5"])
def test_bad_periods_are_refused(tmp_path, name, value):
    with pytest.raises(ValueError, match=name):
        Server(lambda *a: None, store=tmp_path, **{name: value})
