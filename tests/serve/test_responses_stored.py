"""GET /v1/responses/{id} and POST /v1/responses/{id}/cancel, driven by the
official openai SDK (``client.responses.retrieve``, ``.cancel``): a response is
rebuilt from its turn's logged events (finished, running, or cut), a running
one is cancelled, and an id none of ours has is an OpenAI-shaped 404 (before:
every such request was Starlette's 404)."""

from __future__ import annotations

import json

import openai
import pytest
import serve_agents
import trio
from openai_sdk import in_thread, session_of
from serving import client, running
from sse_client import finished, read_until
from waiting import wait_until

from trio_agent.serve._bodies import ApiError


def _started_tool(event) -> bool:
    return event["type"] == "tool.started"


def _second(done):
    """``done`` for ``read_until``: the second event ``done`` is true of."""
    seen: list[object] = []

    def second(event) -> bool:
        if done(event):
            seen.append(event)
        return len(seen) == 2

    return second


async def test_retrieve_gives_a_finished_response_as_the_post_returned_it(tmp_path):
    """Each response of a session, with its own turn's items only, also from a
    server started again on the same store (the event log is durable)."""

    def talk(ai: openai.OpenAI):
        first = ai.responses.create(model="any", input="think")
        second = ai.responses.create(model="any", input="guard", previous_response_id=first.id)
        return first, second, ai.responses.retrieve(first.id), ai.responses.retrieve(second.id)

    def again(ai: openai.OpenAI, *ids: str):
        return [ai.responses.retrieve(i) for i in ids]

    async with running(tmp_path) as (server, url):
        first, second, got_first, got_second = await in_thread(talk, url)
    async with running(tmp_path) as (server, url):
        later = await in_thread(lambda ai: again(ai, first.id, second.id), url)
    for made, got in [(first, got_first), (second, got_second), (first, later[0])]:
        assert (got.id, got.status, got.object) == (made.id, "completed", "response")
        assert [i.model_dump() for i in got.output] == [i.model_dump() for i in made.output]
        assert got.usage == made.usage
    assert got_first.output_text == "thought"
    assert [i.type for i in later[1].output] == ["function_call", "mcp_approval_request"]
    assert got_second.previous_response_id == first.id
    assert got_first.previous_response_id is None


async def test_a_running_response_is_in_progress_with_its_output_so_far(tmp_path):
    """``background=True`` answers at once, ``in_progress``; retrieving it while its
    turn runs gives the output so far, and once it ended the whole response."""
    async with running(tmp_path) as (server, url):
        made = await in_thread(
            lambda ai: ai.responses.create(model="any", input="hold g", background=True), url
        )
        assert (made.status, made.output) == ("in_progress", [])
        session = session_of(made.id)
        await read_until(url, f"/sessions/{session}/events", _started_tool)
        running_now = await in_thread(lambda ai: ai.responses.retrieve(made.id), url)
        assert running_now.status == "in_progress"
        [call] = running_now.output
        assert (call.type, call.name) == ("function_call", "hold")
        serve_agents.release("g")
        await read_until(url, f"/sessions/{session}/events", finished(1))
        done = await in_thread(lambda ai: ai.responses.retrieve(made.id), url)
    assert done.status == "completed"
    assert [i.type for i in done.output] == ["function_call", "function_call_output", "message"]
    assert done.output_text == "after hold g"


async def test_cancel_cancels_a_running_response_and_gives_it_cancelled(tmp_path):
    """The turn is cancelled as POST /sessions/{id}/cancel does; the answer is the
    response once its turn ended. Cancelling it again, or a finished response,
    gives the response as it is."""
    async with running(tmp_path) as (server, url), client(url) as http:

        def start(ai: openai.OpenAI):
            done = ai.responses.create(model="any", input="hi")
            return done, ai.responses.create(model="any", input="hold never", background=True)

        done, made = await in_thread(start, url)
        session = session_of(made.id)
        await read_until(url, f"/sessions/{session}/events", _started_tool)

        def cancel(ai: openai.OpenAI):
            return [ai.responses.cancel(made.id), ai.responses.cancel(made.id)]

        cancelled, again = await in_thread(cancel, url)
        assert server.hub.running_turn(session) is None
        assert (await http.get(f"/sessions/{session}")).json()["running_turn"] is None
        same = await in_thread(lambda ai: ai.responses.cancel(done.id), url)
        got = await in_thread(lambda ai: ai.responses.retrieve(made.id), url)
    for response in (cancelled, again, got):
        assert response.status == "cancelled"
        assert response.incomplete_details.reason == "cancelled"
    assert (same.status, same.output_text) == ("completed", "echo: hi")


async def test_a_response_whose_turn_was_cut_is_incomplete(tmp_path):
    """A turn whose end is not logged (its server died mid-turn) is not running:
    ``incomplete``, reason ``interrupted``, not ``in_progress`` for ever."""
    async with running(tmp_path) as (server, url):
        made = await in_thread(lambda ai: ai.responses.create(model="any", input="hi"), url)
    log = tmp_path / ".events" / f"{session_of(made.id)}.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(line for line in lines if b'"turn.finished"' not in line))
    async with running(tmp_path) as (server, url):
        got = await in_thread(lambda ai: ai.responses.retrieve(made.id), url)
    assert got.status == "incomplete" and got.incomplete_details.reason == "interrupted"
    [message] = got.output
    assert (message.status, message.content[0].text) == ("incomplete", "echo: hi")


@pytest.mark.parametrize(
    "response_id",
    [
        "resp_nosuch_1",
        "resp_SESSION_2",  # a session's turn that never was
        "resp_SESSION_0",
        "resp_SESSION_01",
        "resp_SESSION_99999999999",
        "resp_SESSION",
        "SESSION_1",
        "resp_..%2F..%2Fetc_1",
        "resp_.events_1",
        "resp_%2e%2e_1",
        "resp_a%2Fb_1",
        "resp_%00_1",
        "resp_" + "a" * 129 + "_1",
        "x" * 5000,
        "",
    ],
)
async def test_an_id_none_of_ours_has_is_an_openai_shaped_404(tmp_path, response_id):
    async with running(tmp_path) as (server, url), client(url) as http:
        made = await in_thread(lambda ai: ai.responses.create(model="any", input="hi"), url)
        named = response_id.replace("SESSION", session_of(made.id))
        answers = [
            await http.get(f"/v1/responses/{named}"),
            await http.post(f"/v1/responses/{named}/cancel"),
        ]
    for answer in answers:
        assert answer.status_code == 404, answer.text
        error = answer.json()["error"]
        assert error["type"] == "not_found_error" and error["message"]
        assert "echo" not in answer.text


async def test_the_sdk_raises_not_found_for_an_unknown_response(tmp_path):
    """As its own ``NotFoundError``, with the error's type and message."""

    def ask(ai: openai.OpenAI):
        with pytest.raises(openai.NotFoundError) as retrieved:
            ai.responses.retrieve("resp_nosuch_1")
        with pytest.raises(openai.NotFoundError) as cancelled:
            ai.responses.cancel("resp_nosuch_1")
        for raised in (retrieved.value, cancelled.value):
            assert raised.type == "not_found_error" and "resp_nosuch_1" in raised.message

    async with running(tmp_path) as (server, url):
        await in_thread(ask, url)


async def test_a_token_guards_retrieve_and_cancel(tmp_path):
    token = "a-token-for-the-tests-0001"

    def ask(ai: openai.OpenAI):
        with openai.OpenAI(base_url=str(ai.base_url), api_key=token, max_retries=0) as good:
            made = good.responses.create(model="any", input="hi")
            with pytest.raises(openai.AuthenticationError):
                ai.responses.retrieve(made.id)
            with pytest.raises(openai.AuthenticationError):
                ai.responses.cancel(made.id)
            return good.responses.retrieve(made.id)

    async with running(tmp_path, token=token) as (server, url):
        got = await in_thread(ask, url)
    assert got.output_text == "echo: hi"


async def test_cancelling_a_response_never_cancels_another_turn_of_its_session(tmp_path):
    """``Hub.cancel(session, turn)`` cancels only that turn: a response's cancel
    that comes once its turn has ended, and another has started, leaves that one
    running (it answers 409, and the route gives the ended response)."""
    async with running(tmp_path) as (server, url), client(url) as http:
        await http.post("/sessions/s/turns", json={"message": "hold g"})
        await read_until(url, "/sessions/s/events", _started_tool)
        with pytest.raises(ApiError) as refused:
            await server.hub.cancel("s", 2)
        assert refused.value.status == 409
        assert server.hub.running_turn("s") == 1
        assert await server.hub.cancel("s", 1) == 1
        await read_until(url, "/sessions/s/events", finished(1))
        got = await in_thread(lambda ai: ai.responses.retrieve("resp_s_1"), url)
    assert got.status == "cancelled"


async def test_regression_a_background_streams_client_going_away_never_cancels_its_turn(
    tmp_path,
):
    """Bug: with ``"background": true, "stream": true`` under
    ``on_disconnect="cancel"``, the client going away cancelled the turn, as for a
    plain stream; a background response goes on without its client (OpenAI's
    API: a client may drop the stream and retrieve the response later)."""
    body = json.dumps({"model": "any", "input": "hold g", "background": True, "stream": True})
    head = b"POST /v1/responses HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n"
    async with running(tmp_path, on_disconnect="cancel") as (server, url), client(url) as http:
        host, _, port = url.removeprefix("http://").rpartition(":")
        async with await trio.open_tcp_stream(host, int(port)) as stream:
            sent = head + b"content-length: %d\r\n\r\n" % len(body) + body.encode()
            await stream.send_all(sent)
            await serve_agents.holding.setdefault("g", trio.Event()).wait()
            [session] = [s["id"] for s in (await http.get("/sessions")).json()["sessions"]]
            assert server.hub.readers(session) == 1
        await wait_until(lambda: server.hub.readers(session) == 0)
        assert server.hub.running_turn(session) == 1  # it goes on without its reader
        serve_agents.release("g")
        await read_until(url, f"/sessions/{session}/events", finished(1))
        got = await in_thread(lambda ai: ai.responses.retrieve(f"resp_{session}_1"), url)
    assert (got.status, got.output_text) == ("completed", "after hold g")


async def test_regression_another_reader_going_away_never_cancels_a_background_turn(
    tmp_path,
):
    """Bug: under ``on_disconnect="cancel"`` a background response's own stream
    leaving was held off, but any other reader of its session (a page on
    ``/sessions/{id}/events``) going away last cancelled the turn. The turn of
    the session started after it, a plain one, is still cancelled so."""
    body = {"model": "any", "input": "hold g", "background": True}
    async with running(tmp_path, on_disconnect="cancel") as (server, url), client(url) as http:
        posted = await http.post("/v1/responses", json=body)
        assert (posted.status_code, posted.json()["status"]) == (200, "in_progress")
        session = session_of(posted.json()["id"])
        events = f"/sessions/{session}/events"
        await read_until(url, events, _started_tool)  # then it leaves
        await wait_until(lambda: server.hub.readers(session) == 0)
        assert server.hub.running_turn(session) == 1  # it goes on without its readers
        serve_agents.release("g")
        first = await read_until(url, events, finished(1))
        assert first[-1][1]["event"]["result"]["end"]["reason"] == "completed"
        await wait_until(lambda: server.hub.running_turn(session) is None)
        await http.post(f"/sessions/{session}/turns", json={"message": "hold h"})
        await read_until(url, events, _second(_started_tool))
        await wait_until(lambda: server.hub.running_turn(session) is None)
        got = await read_until(url, events, finished(2))
    assert got[-1][1]["event"]["result"]["end"]["reason"] == "cancelled"


async def test_regression_a_response_says_whether_it_runs_in_the_background(tmp_path):
    """Bug: the answer to ``background=True`` had no ``background`` field (the SDK's
    ``response.background`` was None), where OpenAI's says ``true``; a retrieved
    response, whose request is not stored, still does not say."""

    def talk(ai: openai.OpenAI):
        made = ai.responses.create(model="any", input="hi", background=True)
        return made, ai.responses.create(model="any", input="hi")

    async with running(tmp_path) as (server, url):
        made, plain = await in_thread(talk, url)
        await read_until(url, f"/sessions/{session_of(made.id)}/events", finished(1))
        got = await in_thread(lambda ai: ai.responses.retrieve(made.id), url)
    assert (made.background, plain.background, got.background) == (True, False, None)


async def test_regression_retrieving_a_response_again_reads_its_log_from_its_turn_on(
    tmp_path, monkeypatch
):
    """Bug: each retrieve read the session's event log from its first event, so a
    client polling a running background response late in a long session read the
    whole log every time. A turn retrieved once is read again from its start (the
    answer the same, ``previous_response_id`` too)."""
    async with running(tmp_path) as (server, url):

        def start(ai: openai.OpenAI):
            first = ai.responses.create(model="any", input="hi")
            second = ai.responses.create(model="any", input="ho", previous_response_id=first.id)
            return ai.responses.create(
                model="any", input="hold g", previous_response_id=second.id, background=True
            )

        made = await in_thread(start, url)
        session = session_of(made.id)
        events = await read_until(url, f"/sessions/{session}/events", _started_tool)
        [before] = [s for s, e in events if finished(2)(e["event"])]
        log, reads = server.hub.place.events, []
        read = log.read

        async def counted(session_id: str, after: int):
            reads.append(after)
            return await read(session_id, after)

        monkeypatch.setattr(log, "read", counted)
        polls = []
        for _ in range(2):
            reads.clear()
            polls.append(await in_thread(lambda ai: ai.responses.retrieve(made.id), url))
        serve_agents.release("g")
    assert reads[0] == before  # from the turn's start, not the log's (-1)
    for poll in polls:
        assert (poll.status, poll.previous_response_id) == ("in_progress", f"resp_{session}_2")
        assert [item.type for item in poll.output] == ["function_call"]


async def test_a_background_response_under_way_at_shutdown_is_drained_and_kept(tmp_path):
    """A background turn runs in the hub's nursery, not in its request: the server
    stopping drains it as any turn (cancelled once ``drain_seconds`` passed), and
    after a restart it is retrieved ``cancelled``, its output so far kept, and
    continued."""
    async with running(tmp_path, drain_seconds=0) as (server, url):
        made = await in_thread(
            lambda ai: ai.responses.create(model="any", input="hold never", background=True), url
        )
        await read_until(url, f"/sessions/{session_of(made.id)}/events", _started_tool)

    def again(ai: openai.OpenAI):
        got = ai.responses.retrieve(made.id)
        return got, ai.responses.create(model="any", input="hi", previous_response_id=made.id)

    async with running(tmp_path) as (server, url):
        got, more = await in_thread(again, url)
    assert (got.status, [item.type for item in got.output]) == ("cancelled", ["function_call"])
    assert (more.previous_response_id, more.output_text) == (made.id, "echo: hi")


async def test_regression_a_turn_that_never_was_is_a_404_without_reading_the_log(
    tmp_path, monkeypatch
):
    """Bug: ``resp_<session>_<turn>`` for a turn past the session's read the whole
    event log before its 404 (a client could make a long session's log be read
    for nothing, request after request); the ledger's turns say it never was."""
    async with running(tmp_path) as (server, url), client(url) as http:
        made = await in_thread(lambda ai: ai.responses.create(model="any", input="hi"), url)
        log, reads = server.hub.place.events, []
        read = log.read

        async def counted(session_id: str, after: int):
            reads.append(after)
            return await read(session_id, after)

        monkeypatch.setattr(log, "read", counted)
        unknown = f"resp_{session_of(made.id)}_9999999999"
        answers = [
            await http.get(f"/v1/responses/{unknown}"),
            await http.post(f"/v1/responses/{unknown}/cancel"),
        ]
        assert (await http.get(f"/v1/responses/{made.id}")).status_code == 200
    assert [answer.status_code for answer in answers] == [404, 404]
    assert reads == [-1]  # the turn that was only


async def test_regression_input_items_of_a_response_is_a_404_that_says_what_is_served(tmp_path):
    """Bug: ``client.responses.input_items.list(id)`` of a response that is there
    raised ``NotFoundError`` saying "No response found with this id"; the path is
    what is not served."""

    def ask(ai: openai.OpenAI):
        made = ai.responses.create(model="any", input="hi")
        with pytest.raises(openai.NotFoundError) as raised:
            ai.responses.input_items.list(made.id)
        return raised.value

    async with running(tmp_path) as (server, url):
        raised = await in_thread(ask, url)
    assert raised.type == "not_found_error"
    assert "No response found" not in raised.message and "/cancel are served" in raised.message


async def test_regression_deleting_a_response_is_an_openai_shaped_405(tmp_path):
    """Bug: ``client.responses.delete(id)`` got Starlette's ``{"error": "Method Not
    Allowed"}``, not OpenAI's error shape; it is one, saying responses are kept,
    with the methods that are served (``Allow``); other ``/v1/`` paths too."""
    async with running(tmp_path) as (server, url), client(url) as http:
        made = await in_thread(lambda ai: ai.responses.create(model="any", input="hi"), url)
        with pytest.raises(openai.APIStatusError) as raised:
            await in_thread(lambda ai: ai.responses.delete(made.id), url)
        nowhere = await http.get("/v1/models")
        put = await http.put("/v1/responses")
        page = await http.get("/nowhere")
        long = await http.get("/v1/" + "x" * 5000)
    assert raised.value.status_code == 405
    error = raised.value.body
    assert error["type"] == "invalid_request_error" and "responses are kept" in error["message"]
    assert "GET" in raised.value.response.headers["allow"]
    assert nowhere.status_code == 404 and nowhere.json()["error"]["type"] == "not_found_error"
    assert put.status_code == 405 and put.json()["error"]["param"] is None
    assert len(long.json()["error"]["message"]) < 300  # a client's path is not echoed whole
    assert page.status_code == 404 and page.json() == {"error": "Not Found"}  # not under /v1/
