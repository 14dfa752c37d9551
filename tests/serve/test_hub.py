"""The session API's turns, cancellation, approvals and state, over real HTTP."""

from __future__ import annotations

import pytest
import serve_agents
import trio
from serving import client, running
from sse_client import finished, read_until
from waiting import wait_until

from trio_agent.serve._bodies import ApiError
from trio_agent.serve._hub import Hub
from trio_agent.serve._place import JsonlPlace

EVENTS = "/sessions/s/events"


def end_of(events, turn):
    return next(
        d["event"]["result"]
        for _, d in events
        if d["event"].get("turn") == turn and d["event"]["type"] == "turn.finished"
    )


async def test_a_turn_is_answered_at_once_and_a_second_is_refused_while_it_runs(tmp_path):
    """202 with the turn's number before the turn ends; 409 for another turn, or a
    decision, while it runs; then the next turn is number 2."""
    async with running(tmp_path) as (server, url), client(url) as http:
        response = await http.post("/sessions/s/turns", json={"message": "hold g"})
        assert (response.status_code, response.json()) == (202, {"turn": 1})
        assert server.hub.running_turn("s") == 1
        busy = await http.post("/sessions/s/turns", json={"message": "more"})
        assert busy.status_code == 409 and "turn 1" in busy.json()["error"]
        deciding = await http.post("/sessions/s/approvals/c1", json={"approved": True})
        assert deciding.status_code == 409 and "turn 1" in deciding.json()["error"]
        state = (await http.get("/sessions/s")).json()
        assert state["running_turn"] == 1
        serve_agents.release("g")
        events = await read_until(url, EVENTS, finished(1))
        assert end_of(events, 1)["end"]["reason"] == "completed"
        await wait_until(lambda: server.hub.running_turn("s") is None)
        response = await http.post("/sessions/s/turns", json={"message": "hi"})
        assert response.json() == {"turn": 2}
        listed = (await http.get("/sessions")).json()
        assert listed["sessions"][0]["id"] == "s"


async def test_cancel_ends_the_running_turn_as_cancelled(tmp_path):
    async with running(tmp_path) as (server, url), client(url) as http:
        assert (await http.post("/sessions/s/cancel")).status_code == 404  # no session yet
        await http.post("/sessions/s/turns", json={"message": "hold g"})
        await read_until(url, EVENTS, lambda e: e["type"] == "tool.started")
        response = await http.post("/sessions/s/cancel")
        assert (response.status_code, response.json()) == (202, {"turn": 1})
        events = await read_until(url, EVENTS, finished(1))
        assert end_of(events, 1)["end"]["reason"] == "cancelled"
        await wait_until(lambda: server.hub.running_turn("s") is None)
        idle = await http.post("/sessions/s/cancel")
        assert idle.status_code == 409 and "no turn" in idle.json()["error"]


async def test_a_held_call_is_decided_over_http_and_the_next_turn_runs_it(tmp_path):
    """The turn ends awaiting approval; the state lists the call; a decision is
    recorded (and starts no turn), a second one is refused; a turn on no new
    input runs it."""
    async with running(tmp_path) as (server, url), client(url) as http:
        await http.post("/sessions/s/turns", json={"message": "guard"})
        events = await read_until(url, EVENTS, finished(1))
        assert end_of(events, 1)["end"]["reason"] == "awaiting_approval"
        await wait_until(lambda: server.hub.running_turn("s") is None)
        state = (await http.get("/sessions/s")).json()
        [call] = state["pending_approvals"]
        assert (call["name"], call["arguments"]) == ("guarded", {"note": "n"})
        unknown = await http.post("/sessions/s/approvals/nope", json={"approved": True})
        assert unknown.status_code == 404
        path = f"/sessions/s/approvals/{call['id']}"
        decided = await http.post(path, json={"approved": True, "reason": "fine"})
        assert (decided.status_code, decided.json()) == (
            200,
            {"call": call["id"], "approved": True},
        )
        assert server.hub.running_turn("s") is None  # a decision starts no turn
        again = await http.post(path, json={"approved": False})
        assert again.status_code == 409
        state = (await http.get("/sessions/s")).json()
        assert state["pending_approvals"] == []
        assert [c["id"] for c in state["decided_approvals"]] == [call["id"]]
        assert (await http.post("/sessions/s/turns", json={})).json() == {"turn": 2}
        events = await read_until(url, EVENTS, finished(2))
        result = end_of(events, 2)
        assert (result["end"]["reason"], result["final_text"]) == ("completed", "after guard")


async def test_a_rejected_call_is_answered_with_the_reason(tmp_path):
    async with running(tmp_path) as (server, url), client(url) as http:
        await http.post("/sessions/s/turns", json={"message": "guard"})
        await read_until(url, EVENTS, finished(1))
        await wait_until(lambda: server.hub.running_turn("s") is None)
        [call] = (await http.get("/sessions/s")).json()["pending_approvals"]
        path = f"/sessions/s/approvals/{call['id']}"
        response = await http.post(path, json={"approved": False, "reason": "not today"})
        assert response.status_code == 200
        await http.post("/sessions/s/turns", json={})
        events = await read_until(url, EVENTS, finished(2))
        results = [d["event"]["result"] for _, d in events if d["event"]["type"] == "tool.finished"]
        assert results and "not today" in str(results[-1])


async def test_unknown_sessions_are_404_everywhere(tmp_path):
    async with running(tmp_path) as (server, url), client(url) as http:
        for method, path, body in [
            ("GET", "/sessions/nope", None),
            ("GET", "/sessions/nope/events", None),
            ("POST", "/sessions/nope/cancel", None),
            ("POST", "/sessions/nope/approvals/c1", {"approved": True}),
            ("GET", "/nowhere", None),
        ]:
            response = await http.request(method, path, json=body)
            assert response.status_code == 404, (path, response.text)
            assert "error" in response.json()
        assert (await http.get("/sessions")).json() == {"sessions": []}


async def test_a_stopped_hub_takes_no_session_in(tmp_path):
    """Once the hub has closed its sessions, a request for another one is a 503:
    before, it made a feed nobody would close (a stream that never ended) while
    the sessions were being closed."""
    place = JsonlPlace(tmp_path)
    first = Hub(place, serve_agents.make_agent)
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        assert await first.start_turn("s", "hi") == 1
        first.drain()
    stopped = Hub(place, serve_agents.make_agent)
    async with trio.open_nursery() as nursery:
        await nursery.start(stopped.run)
        stopped.drain()
    with pytest.raises(ApiError) as raised:
        await stopped.watch("s")
    assert raised.value.status == 503


async def test_a_held_call_is_pending_after_a_restart_and_runs_only_once_approved(tmp_path):
    """Section 11.5 over HTTP: pending approvals survive the server process; a
    turn posted before the decision leaves the call held (it never runs without
    its recorded approval); the decision, made on the new server, lets the next
    turn run it."""
    async with running(tmp_path) as (server, url), client(url) as http:
        await http.post("/sessions/s/turns", json={"message": "guard"})
        await read_until(url, EVENTS, finished(1))
    async with running(tmp_path) as (server, url), client(url) as http:
        [call] = (await http.get("/sessions/s")).json()["pending_approvals"]
        assert (await http.post("/sessions/s/turns", json={})).json() == {"turn": 2}
        events = await read_until(url, EVENTS, finished(2))
        assert end_of(events, 2)["end"]["reason"] == "awaiting_approval"
        assert not [d for _, d in events if d["event"]["type"] == "tool.finished"]
        await wait_until(lambda: server.hub.running_turn("s") is None)
        path = f"/sessions/s/approvals/{call['id']}"
        assert (await http.post(path, json={"approved": True})).status_code == 200
        assert (await http.post("/sessions/s/turns", json={})).json() == {"turn": 3}
        events = await read_until(url, EVENTS, finished(3))
    ran = [d["event"]["result"] for _, d in events if d["event"]["type"] == "tool.finished"]
    assert [r["content"] for r in ran] == ["done n"]
    assert end_of(events, 3)["final_text"] == "after guard"


async def test_regression_a_decision_sent_as_its_turn_ends_is_taken_not_refused(
    tmp_path, monkeypatch
):
    """A client that answered a held call the moment it read the turn's end got
    409 "turn 1 is running": the hub still held the turn while it let the session
    go. A turn whose end is out is waited out, so the decision is taken."""
    from trio_agent.serve import _feed

    gate, publish = trio.Event(), _feed.Feed.publish

    async def held_at_the_end(self, event):
        await publish(self, event)
        if event.type == "turn.finished":
            await gate.wait()  # the turn's end is out; the hub still holds the turn

    monkeypatch.setattr(_feed.Feed, "publish", held_at_the_end)
    statuses: list[int] = []
    async with running(tmp_path) as (server, url), client(url) as http:
        await http.post("/sessions/s/turns", json={"message": "guard"})
        events = await read_until(url, EVENTS, finished(1))
        [call_id] = end_of(events, 1)["end"]["call_ids"]

        async def decide():
            path = f"/sessions/s/approvals/{call_id}"
            statuses.append((await http.post(path, json={"approved": True})).status_code)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(decide)
            await wait_until(lambda: bool(statuses) or _waiting_decision(server))
            gate.set()
    assert statuses == [200]


def _waiting_decision(server) -> bool:
    """Whether a request holds the session's lock (the decision waiting the turn out)."""
    live = server.hub._sessions.get("s")
    return live is not None and live.lock.locked()
