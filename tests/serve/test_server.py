"""The server's lifetime: graceful shutdown drains the turns under way, and
nothing of serving is imported by ``import trio_agent``."""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import quote

import pytest
import serve_agents
import trio
from serving import client, running
from sse_client import finished, read_until
from waiting import WAIT, wait_until

from trio_agent import Agent
from trio_agent.ledger import derive
from trio_agent.serve import Server
from trio_agent.stores import JsonlStore

EVENTS = "/sessions/s/events"


async def turn_ends(store, session_id):
    records = (await JsonlStore(store).load(session_id)).records
    return [r.end.reason for r in records if r.kind == "turn/end"], derive(records).closed


async def test_stopping_lets_the_turn_under_way_finish_and_starts_no_other(tmp_path):
    """``stop()``: a new turn is refused with 503 while the one under way goes on
    to complete; then the session is closed cleanly and ``run`` returns."""
    async with running(tmp_path) as (server, url), client(url) as http:
        await http.post("/sessions/s/turns", json={"message": "hold g"})
        await read_until(url, EVENTS, lambda e: e["type"] == "tool.started")
        server.stop()
        refused = await http.post("/sessions/t/turns", json={"message": "hi"})
        assert refused.status_code == 503 and "stopping" in refused.json()["error"]
        assert server.hub.running_turn("s") == 1
        serve_agents.release("g")
    assert await turn_ends(tmp_path, "s") == (["completed"], True)


async def test_a_turn_that_outlasts_the_drain_is_cancelled_and_recorded(tmp_path):
    """Past ``drain_seconds`` the turn is cancelled, recorded as cancelled, and the
    session closed: a restarted server resumes it."""
    async with running(tmp_path, drain_seconds=0.05) as (server, url), client(url) as http:
        await http.post("/sessions/s/turns", json={"message": "hold never"})
        await read_until(url, EVENTS, lambda e: e["type"] == "tool.started")
    assert await turn_ends(tmp_path, "s") == (["cancelled"], True)
    async with running(tmp_path) as (server, url), client(url) as http:
        assert (await http.post("/sessions/s/turns", json={"message": "hi"})).json() == {"turn": 2}
        events = await read_until(url, EVENTS, finished(2))
        assert [d["event"]["type"] for _, d in events].count("turn.finished") == 2


async def test_a_factory_that_fails_is_a_json_500_and_the_server_goes_on(tmp_path):
    def broken(store, session_id, new):
        raise RuntimeError("no model today")

    async with running(tmp_path, factory=broken) as (server, url), client(url) as http:
        response = await http.post("/sessions/s/turns", json={"message": "hi"})
        assert response.status_code == 500
        assert "no model today" in response.json()["error"]
        assert (await http.get("/sessions")).status_code == 200


async def test_a_factory_may_return_a_plain_agent(tmp_path):
    def plain(store, session_id, new):
        return Agent(model=serve_agents.make_agent_model(), store=store, session_id=session_id)

    async with running(tmp_path, factory=plain) as (server, url), client(url) as http:
        await http.post("/sessions/s/turns", json={"message": "hi"})
        events = await read_until(url, EVENTS, finished(1))
        assert events[-1][1]["event"]["result"]["final_text"] == "echo: hi"


def test_import_trio_agent_imports_no_serving():
    """``import trio_agent`` (and its CLI's parser) imports neither trio_agent.serve
    nor Starlette, Hypercorn or asyncio's HTTP stack: the extra stays optional."""
    code = (
        "import sys, trio_agent, trio_agent.cli\n"
        "trio_agent.cli._parser.build_parser('0')\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('starlette', 'hypercorn', 'anyio', 'httpx', 'h11') or m.startswith('trio_agent.serve')]\n"
        "print(bad)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


async def test_a_port_in_use_is_an_error_at_start(tmp_path):
    async with running(tmp_path) as (server, url):
        port = int(url.rpartition(":")[2])
        other = Server(serve_agents.make_agent, store=tmp_path / "other", port=port)
        with trio.fail_after(60), pytest.raises(OSError, match=f"cannot serve on .*:{port}"):
            await other.run()


def test_a_server_needs_one_place_for_its_sessions(tmp_path):
    for where in ({}, {"store": tmp_path, "dsn": "host=/nowhere"}):
        with pytest.raises(TypeError, match=r"store= .* or dsn="):
            Server(serve_agents.make_agent, **where)


def test_regression_an_agent_or_a_function_of_other_arguments_is_refused_as_a_factory(tmp_path):
    """The docs' ``--agent`` takes an Agent or a factory, so ``Server(agent)`` is
    tried: it was refused as not callable with no word of what to pass. A
    function of other arguments (the model's ``echo(request)``) was taken, and
    every turn posted was then a 500 (the factory raised TypeError)."""
    agent = Agent(model=serve_agents.make_agent_model())
    with pytest.raises(TypeError, match=r"not an Agent: pass trio_agent\.fleet\.agent_maker"):
        Server(agent, store=tmp_path)

    def echo(request):
        return request

    with pytest.raises(TypeError, match=r"must take \(store, session_id, new\).*\(request\)"):
        Server(echo, store=tmp_path)
    Server(lambda store, session_id, new=False: None, store=tmp_path)  # fits: taken
    Server(serve_agents.make_agent, store=tmp_path)


async def test_a_session_another_server_holds_is_a_409(tmp_path):
    """Two servers on one store: the second cannot take a session the first
    writes (its ledger's lock), and says so rather than running a turn, without
    telling the client where the ledger is (the lock's error named the file,
    and a PostgreSQL store's named its host, database and user)."""
    async with running(tmp_path) as (first, one), running(tmp_path) as (second, other):
        async with client(one) as http:
            await http.post("/sessions/s/turns", json={"message": "hi"})
            await read_until(one, EVENTS, finished(1))
        async with client(other) as http:
            response = await http.post("/sessions/s/turns", json={"message": "hi"})
            assert response.status_code == 409
            error = response.json()["error"]
            assert "in use elsewhere" in error
            # where the ledger lives is the server's business, not the client's
            assert str(tmp_path) not in error and ".jsonl" not in error


ODD_CALL_IDS = [".", "..", "a/b", "50%", "%2F", "é ü\t"]


async def held(server, http, url, session_id, call_id):
    """The session ``session_id`` with one call, ``call_id``, held for approval."""
    posted = await http.post(
        f"/sessions/{session_id}/turns", json={"message": f"guard call {call_id}"}
    )
    assert posted.status_code == 202, posted.text
    await read_until(url, f"/sessions/{session_id}/events", finished(1))
    await wait_until(lambda: server.hub.running_turn(session_id) is None)
    [call] = (await http.get(f"/sessions/{session_id}")).json()["pending_approvals"]
    assert call["id"] == call_id


async def test_any_call_id_is_decided_with_the_id_in_the_body(tmp_path):
    """Bug: the calls ``.`` and ``..`` could not be decided: the route takes the id
    in its path (``approvals/{call_id:path}``), and browsers and HTTP clients
    take ``.`` and ``..`` out of a path before sending it. Now ``POST
    /sessions/{id}/approvals`` takes ``{"call_id": ..., "approved": ...}``: every
    id is decided, and the path form still serves the ids a path can hold."""
    async with running(tmp_path) as (server, url), client(url) as http:
        for n, call_id in enumerate(ODD_CALL_IDS):
            await held(server, http, url, f"s{n}", call_id)
            body = {"call_id": call_id, "approved": True, "reason": "fine"}
            decided = await http.post(f"/sessions/s{n}/approvals", json=body)
            assert (decided.status_code, decided.json()) == (
                200,
                {"call": call_id, "approved": True},
            )
            again = await http.post(f"/sessions/s{n}/approvals", json=body)
            assert again.status_code == 409, again.text
            state = (await http.get(f"/sessions/s{n}")).json()
            assert [c["id"] for c in state["decided_approvals"]] == [call_id]
            assert (await http.post(f"/sessions/s{n}/turns", json={})).json() == {"turn": 2}
            events = await read_until(url, f"/sessions/s{n}/events", finished(2))
            assert events[-1][1]["event"]["result"]["final_text"] == f"after guard call {call_id}"
        for n, call_id in enumerate(["a/b", "50%", "%2F"]):
            await held(server, http, url, f"p{n}", call_id)
            path = f"/sessions/p{n}/approvals/{quote(call_id, safe='')}"
            decided = await http.post(path, json={"approved": False})
            assert decided.json() == {"call": call_id, "approved": False}


@pytest.mark.parametrize(
    "body",
    [
        b"{}",
        b'{"approved": true}',
        b'{"call_id": "", "approved": true}',
        b'{"call_id": "' + b"c" * 257 + b'", "approved": true}',
        b'{"call_id": 5, "approved": true}',
        b'{"call_id": "c", "approved": true, "extra": 1}',
        b'{"call_id": "\\ud800", "approved": true}',
        b'["c", true]',
    ],
)
async def test_a_decision_with_no_usable_call_id_in_its_body_is_a_400(tmp_path, body):
    async with running(tmp_path) as (server, url), client(url) as http:
        response = await http.post("/sessions/s/approvals", content=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]


async def test_a_decision_on_no_waiting_call_in_the_body_is_a_404(tmp_path):
    async with running(tmp_path) as (server, url), client(url) as http:
        await held(server, http, url, "s", "c1")
        for call_id in ["..", "c", "c1/", "c" * 256]:
            body = {"call_id": call_id, "approved": True}
            response = await http.post("/sessions/s/approvals", json=body)
            assert response.status_code == 404, (call_id, response.text)


async def test_a_client_that_stops_reading_does_not_keep_the_server_from_stopping(
    tmp_path, monkeypatch
):
    """Bug: Hypercorn shields its socket writes, so an event stream blocked in a
    send to a client that stopped reading (its connection left open, its window
    full) could not be cancelled: ``stop()``, and cancelling ``run``, never
    returned. Now the request stops waiting at the streams' cut-off, and the
    connection is closed under the stuck write."""
    monkeypatch.setattr("trio_agent.serve._server.STREAMS_SECONDS", 0.5)
    async with running(tmp_path) as (server, url), client(url) as http:
        await http.post("/sessions/s/turns", json={"message": "hi"})
        await read_until(url, EVENTS, finished(1))
    pad = b"x" * 2000  # 16 MB of events: more than the kernel buffers hold
    with (tmp_path / ".events" / "s.jsonl").open("ab") as log:
        for sequence in range(100, 8100):
            line = b'{"schema":1,"event":{"type":"turn.started","turn":9,"sequence":%d,"pad":"%s"}}'
            log.write(line % (sequence, pad) + b"\n")
    server = Server(serve_agents.make_agent, store=tmp_path, port=0)
    stopped = trio.Event()

    async def serve(*, task_status=trio.TASK_STATUS_IGNORED):
        try:
            await server.run(task_status=task_status)
        finally:
            stopped.set()

    async with trio.open_nursery() as nursery:
        [url] = await nursery.start(serve)
        host, port = url.removeprefix("http://").rsplit(":", 1)
        stalled = trio.socket.socket()
        stalled.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, 4096)
        await stalled.connect((host, int(port)))
        await stalled.send(b"GET /sessions/s/events HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        await wait_until(lambda: server.hub.readers("s") == 1)
        server.stop()
        with trio.move_on_after(WAIT) as waited:
            await stopped.wait()
        stalled.close()  # frees a server stuck in its write, so the test ends either way
    assert not waited.cancelled_caught
