"""POST /v1/responses under the requests a client can race or get wrong: a
refused request changes nothing, and a response continues exactly the response
it names."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

import openai
import serve_agents
import trio
from openai_sdk import in_thread, session_of
from serving import client, running
from sse_client import finished, read_until
from waiting import wait_until

from trio_agent import JsonlStore
from trio_agent import tool as trio_agent_tool
from trio_agent.fleet import agent_maker
from trio_agent.ledger import derive
from trio_agent.testing import CallableModel, CutStream, FaultyModel, scripted_response


async def test_a_refused_branch_request_leaves_no_session_behind(tmp_path):
    """Bug: the branch (``Agent.fork``) is made before the request's approval
    answers are checked, so a branch request refused for an unknown
    ``approval_request_id`` (404) still leaves a new session in ``/sessions``,
    holding the call for approval, that no response names."""

    def talk(ai: openai.OpenAI):
        held = ai.responses.create(model="any", input="guard")
        later = ai.responses.create(model="any", input="more", previous_response_id=held.id)
        answer = {"type": "mcp_approval_response", "approval_request_id": "nosuch", "approve": True}
        try:
            ai.responses.create(model="any", input=[answer], previous_response_id=held.id)
        except openai.NotFoundError:
            pass
        return held, later

    async with running(tmp_path) as (server, url), client(url) as http:
        held, later = await in_thread(talk, url)
        sessions = [s["id"] for s in (await http.get("/sessions")).json()["sessions"]]
    assert session_of(held.id) == session_of(later.id)
    assert sessions == [session_of(held.id)]


async def test_a_refused_request_records_none_of_its_approval_answers(tmp_path):
    """Bug: the answers of a request are recorded one by one, so a request whose
    second ``mcp_approval_response`` names no held call is refused (404) after
    the first answer was recorded: the client's corrected retry then gets a 409
    ("decided already") and cannot go on from that response."""

    def talk(ai: openai.OpenAI):
        held = ai.responses.create(model="any", input="guard")
        _, request = held.output
        answer = {"type": "mcp_approval_response", "approval_request_id": request.id}
        try:
            ai.responses.create(
                model="any",
                input=[
                    {**answer, "approve": True},
                    {**answer, "approval_request_id": "nosuch", "approve": True},
                ],
                previous_response_id=held.id,
            )
        except openai.NotFoundError:
            pass
        return ai.responses.create(
            model="any", input=[{**answer, "approve": True}], previous_response_id=held.id
        )

    async with running(tmp_path) as (server, url):
        retried = await in_thread(talk, url)
    assert (retried.status, retried.output_text) == ("completed", "after guard")


async def test_a_response_continues_the_response_it_names_when_another_continues_it_first(
    tmp_path,
):
    """Bug: which session a request continues is decided from the session's state
    read before its turn starts, without holding the session: when another request
    continues the same response in between (two tabs, a retry), this one is
    appended after the other's turn, in the original session, instead of
    branching, so its model reads an exchange the client never saw."""
    async with running(tmp_path) as (server, url):
        first = await in_thread(lambda ai: ai.responses.create(model="any", input="one"), url)
        hub = server.hub
        read_state = hub.state
        read, other_done = trio.Event(), trio.Event()

        async def state_then_wait(session_id: str):
            # the late request reads the state, then the other one runs whole
            got = await read_state(session_id)
            if not read.is_set():
                read.set()
                await other_done.wait()
            return got

        hub.state = state_then_wait
        answers = {}

        async def late() -> None:
            answers["late"] = await in_thread(
                lambda ai: ai.responses.create(
                    model="any", input="late", previous_response_id=first.id
                ),
                url,
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(late)
            await read.wait()
            answers["other"] = await in_thread(
                lambda ai: ai.responses.create(
                    model="any", input="other", previous_response_id=first.id
                ),
                url,
            )
            other_done.set()
    loaded = await JsonlStore(tmp_path).load(session_of(answers["late"].id))
    said = [m.content for m in derive(loaded.records).messages if m.role == "user"]
    assert said == ["one", "late"]
    assert answers["late"].id.endswith("_2")


async def test_instructions_sent_again_with_approval_answers_alone_are_left_out(tmp_path):
    """OpenAI's clients send ``instructions`` with every request; one that only
    answers a held call (no user text) was a 400 ("instructions go with a user
    message"): they are left out, and the call runs."""

    def talk(ai: openai.OpenAI):
        held = ai.responses.create(model="any", input="guard")
        _, request = held.output
        answer = {"type": "mcp_approval_response", "approval_request_id": request.id}
        return ai.responses.create(
            model="any",
            instructions="Be brief.",
            input=[{**answer, "approve": True}],
            previous_response_id=held.id,
        )

    async with running(tmp_path) as (server, url):
        answered = await in_thread(talk, url)
    assert answered.status == "completed" and answered.output_text.startswith("after ")


@asynccontextmanager
async def _whole_request_left(tmp_path, **options):
    """A server (``options``), and a session whose whole (not streamed) response a
    client waited for on a socket of its own, then left while its turn was held
    (``hold g``): yields the server, its URL and the session."""
    body = json.dumps({"model": "any", "input": "hold g"}).encode()
    head = b"POST /v1/responses HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n"
    async with running(tmp_path, **options) as (server, url), client(url) as http:
        host, _, port = url.removeprefix("http://").rpartition(":")
        async with await trio.open_tcp_stream(host, int(port)) as stream:
            await stream.send_all(head + b"content-length: %d\r\n\r\n" % len(body) + body)
            await serve_agents.holding.setdefault("g", trio.Event()).wait()
            [session] = [s["id"] for s in (await http.get("/sessions")).json()["sessions"]]
            assert server.hub.readers(session) == 1
        yield server, url, session


async def test_a_client_waiting_for_a_whole_response_going_away_cancels_it_under_cancel(
    tmp_path,
):
    """Bug: a request without ``stream`` waited for its turn to end without
    listening for its client, so with ``on_disconnect="cancel"`` a client that
    went away left its turn running (as a reader that never leaves), where a
    streamed one cancelled it."""
    async with _whole_request_left(tmp_path, on_disconnect="cancel") as (server, url, session):
        await wait_until(lambda: server.hub.running_turn(session) is None)
        events = await read_until(url, f"/sessions/{session}/events", finished(1))
    assert events[-1][1]["event"]["result"]["end"]["reason"] == "cancelled"


async def test_a_client_waiting_for_a_whole_response_going_away_detaches_by_default(tmp_path):
    """Section 12.5: a client that goes away detaches by default; the turn of a
    whole (not streamed) response it waited for goes on and is recorded whole."""
    async with _whole_request_left(tmp_path) as (server, url, session):
        await wait_until(lambda: server.hub.readers(session) == 0)
        assert server.hub.running_turn(session) == 1  # it goes on without its reader
        serve_agents.release("g")
        events = await read_until(url, f"/sessions/{session}/events", finished(1))
    result = events[-1][1]["event"]["result"]
    assert (result["end"]["reason"], result["final_text"]) == ("completed", "after hold g")


def _retrying_agent(*faults: CutStream):
    """The test agent whose model drops its stream as ``faults`` say (retried)."""
    model = FaultyModel(serve_agents.make_agent_model(), faults=faults)
    return agent_maker(model=model, tools=[serve_agents.hold, serve_agents.guarded])


async def test_a_retried_attempt_leaves_neither_its_text_nor_its_calls_in_the_response(
    tmp_path,
):
    """Bug: the chunks of an attempt that failed (``attempt.failed``: void, never in
    the transcript) stayed in the response: its partial text item made
    ``output_text`` ``"echo: echoecho: hi"`` for a turn that answered ``"echo:
    hi"``, and its tool call was framed, then the retry's call with the same id,
    so the SDK's stream helper raised "conflicting output identities"."""

    def talk(ai: openai.OpenAI):
        text = ai.responses.create(model="any", input="hi")
        held = ai.responses.create(model="any", input="guard")
        with ai.responses.stream(model="any", input="guard") as stream:
            kinds = [event.type for event in stream]
            streamed = stream.get_final_response()
        return text, held, kinds, streamed

    faults = CutStream(call=1, after=3), CutStream(call=3, after=1), CutStream(call=5, after=1)
    async with running(tmp_path, factory=_retrying_agent(*faults)) as (server, url):
        text, held, kinds, streamed = await in_thread(talk, url)
    assert (text.output_text, [item.status for item in text.output]) == ("echo: hi", ["completed"])
    for response in held, streamed:
        assert [item.type for item in response.output] == ["function_call", "mcp_approval_request"]
    assert kinds.count("response.output_item.added") == 2


def _look_twice(request):
    """The text ``looking``, a ``ping`` call (its id the request's: the same on a
    retry), the text `` now``; once answered, ``found``."""
    import trio_agent

    if isinstance(request.messages[-1], trio_agent.ToolResultMessage):
        return scripted_response(f"r-{request.id}", "found")
    call = trio_agent.ToolCall(f"c-{request.id}", "ping", {})
    blocks = [trio_agent.TextBlock("looking"), call, trio_agent.TextBlock(" now")]
    return scripted_response(f"r-{request.id}", blocks)


@trio_agent_tool
async def ping() -> str:
    """Answers pong."""
    return "pong"


async def test_regression_a_failed_attempts_call_followed_by_text_is_never_framed(tmp_path):
    """Bug: an attempt that streamed a call and then text, and then failed, had its
    call framed at the text (held calls went out at any text), then the retry's
    call with the same id: the SDK's stream helper raised "conflicting output
    identities". A call is held until its own attempt goes on."""
    model = FaultyModel(CallableModel(_look_twice), faults=[CutStream(call=1, after=3)])

    def talk(ai: openai.OpenAI):
        with ai.responses.stream(model="any", input="look") as stream:
            kinds = [event.type for event in stream]
            return kinds, stream.get_final_response()

    async with running(tmp_path, factory=agent_maker(model=model, tools=[ping])) as (_, url):
        kinds, response = await in_thread(talk, url)
    assert model.injected == [CutStream(call=1, after=3)]
    calls = [item for item in response.output if item.type == "function_call"]
    assert [call.call_id for call in calls] == ["c-request-001"]
    assert response.output_text.endswith("found")
    assert kinds[-1] == "response.completed"
