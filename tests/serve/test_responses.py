"""OpenAI Responses-compatible POST /v1/responses, driven by the official openai
SDK (its synchronous client, in a worker thread: no asyncio in this process):
a response is a turn, previous_response_id continues the session, streamed and
not, tool calls as output items, approvals as mcp_approval_request items."""

from __future__ import annotations

import json

import openai
import pytest
from openai_sdk import in_thread
from serving import client, running
from sse_client import finished, read_until


async def test_a_response_is_a_turn_and_previous_response_id_continues_its_session(tmp_path):
    def talk(ai: openai.OpenAI):
        first = ai.responses.create(model="any", input="hi")
        second = ai.responses.create(
            model="any",
            input=[{"role": "user", "content": [{"type": "input_text", "text": "again"}]}],
            previous_response_id=first.id,
        )
        return first, second

    async with running(tmp_path) as (server, url), client(url) as http:
        first, second = await in_thread(talk, url)
        assert (first.status, first.output_text) == ("completed", "echo: hi")
        assert (second.status, second.output_text) == ("completed", "echo: again")
        assert second.previous_response_id == first.id
        session = first.id.removeprefix("resp_").rpartition("_")[0]
        assert second.id == f"resp_{session}_2"
        state = (await http.get(f"/sessions/{session}")).json()
        assert state["turns"] == 2


async def test_a_streamed_response_sends_the_responses_events_in_order(tmp_path):
    def talk(ai: openai.OpenAI):
        events = list(ai.responses.create(model="any", input="hi", stream=True))
        with ai.responses.stream(
            model="any", input="more", previous_response_id=events[-1].response.id
        ) as s:
            final = s.get_final_response()
        return events, final

    async with running(tmp_path) as (server, url):
        events, final = await in_thread(talk, url)
    kinds = [e.type for e in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 5,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "echo: hi"
    assert events[-1].response.output_text == "echo: hi"
    assert final.output_text == "echo: more"


async def test_tool_calls_are_output_items_and_an_approval_answers_a_held_one(tmp_path):
    """The held call is a function_call item then an mcp_approval_request; the next
    request's mcp_approval_response approves it, and that response holds the call's
    output and the answer."""

    def talk(ai: openai.OpenAI):
        held = ai.responses.create(model="any", input="guard")
        [call, request] = held.output
        answer = {"type": "mcp_approval_response", "approval_request_id": request.id}
        events = list(
            ai.responses.create(
                model="any",
                input=[{**answer, "approve": True}],
                previous_response_id=held.id,
                stream=True,
            )
        )
        return held, events

    async with running(tmp_path) as (server, url):
        held, events = await in_thread(talk, url)
    call, request = held.output
    assert (call.type, call.name, json.loads(call.arguments)) == (
        "function_call",
        "guarded",
        {"note": "n"},
    )
    assert (request.type, request.id, request.name) == (
        "mcp_approval_request",
        call.call_id,
        "guarded",
    )
    done = events[-1].response
    assert done.status == "completed"
    assert [item.type for item in done.output] == ["function_call_output", "message"]
    assert (done.output[0].call_id, done.output[0].output) == (call.call_id, "done n")
    assert done.output_text == "after guard"


async def test_thinking_is_a_reasoning_item(tmp_path):
    def talk(ai: openai.OpenAI):
        return list(ai.responses.create(model="any", input="think", stream=True))

    async with running(tmp_path) as (server, url):
        events = await in_thread(talk, url)
    done = events[-1].response
    assert [item.type for item in done.output] == ["reasoning", "message"]
    assert done.output[0].content[0].text == "pondering"
    assert "response.reasoning_text.delta" in [e.type for e in events]
    assert done.output_text == "thought"


@pytest.mark.parametrize(
    "given",
    [
        {"input": [{"role": "assistant", "content": "earlier"}]},
        {"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]},
        {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
        {"input": "hi", "previous_response_id": "resp_nosuch_1"},
        {"input": "hi", "previous_response_id": "not-ours"},
        {"input": [{"type": "mcp_approval_response", "approval_request_id": "c", "approve": True}]},
        {"input": []},
    ],
)
async def test_bad_requests_are_openai_shaped_400s(tmp_path, given):
    def ask(ai: openai.OpenAI):
        with pytest.raises(openai.BadRequestError) as caught:
            ai.responses.create(model="any", **given)
        return caught.value

    async with running(tmp_path) as (server, url):
        error = await in_thread(ask, url)
    assert error.status_code == 400
    assert isinstance(error.body, dict) and error.body["type"] == "invalid_request_error"
    assert isinstance(error.body["message"], str)


@pytest.mark.parametrize(
    "body",
    [b"", b"not json", b"[1]", b'{"input": 5}', b'{"input": "x", "stream": "yes"}'],
)
async def test_bodies_that_are_no_request_are_openai_shaped_400s(tmp_path, body):
    async with running(tmp_path) as (server, url), client(url) as http:
        answer = await http.post("/v1/responses", content=body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]


async def test_a_response_that_continues_an_old_one_starts_a_branch(tmp_path):
    """Continuing from a response older than its session's latest branches, as the
    Responses API does: a new session with the history through that response;
    the original session goes on unchanged (before: a 400)."""

    def talk(ai: openai.OpenAI):
        first = ai.responses.create(model="any", input="one")
        second = ai.responses.create(model="any", input="two", previous_response_id=first.id)
        branch = ai.responses.create(model="any", input="three", previous_response_id=first.id)
        on = ai.responses.create(model="any", input="four", previous_response_id=branch.id)
        return first, second, branch, on

    async with running(tmp_path) as (server, url), client(url) as http:
        first, second, branch, on = await in_thread(talk, url)
        origin = first.id.removeprefix("resp_").rpartition("_")[0]
        forked = branch.id.removeprefix("resp_").rpartition("_")[0]
        assert forked != origin and branch.id == f"resp_{forked}_2"
        assert branch.previous_response_id == first.id
        assert (branch.output_text, on.output_text) == ("echo: three", "echo: four")
        assert on.id == f"resp_{forked}_3"
        assert (await http.get(f"/sessions/{origin}")).json()["turns"] == 2
        assert (await http.get(f"/sessions/{forked}")).json()["turns"] == 3
        events = await read_until(url, f"/sessions/{forked}/events", finished(3))
    users = [
        e["event"]["message"]["content"]
        for _, e in events
        if e["event"]["type"] == "message.accepted" and e["event"]["message"]["role"] == "user"
    ]
    assert users == ["three", "four"]  # the branch's own turns; turn 1 is its history


async def test_instructions_reach_the_model_ahead_of_the_input(tmp_path):
    def talk(ai: openai.OpenAI):
        return ai.responses.create(model="any", input="hi", instructions="Be brief.")

    async with running(tmp_path) as (server, url):
        answer = await in_thread(talk, url)
    assert answer.output_text == "echo: Be brief.\n\nhi"
    assert answer.instructions == "Be brief."


async def test_system_and_developer_messages_are_instructions(tmp_path):
    """The SDK's other way to give instructions: system or developer messages in
    ``input``, ahead of the user's (before: a 400)."""

    def talk(ai: openai.OpenAI):
        return ai.responses.create(
            model="any",
            instructions="First.",
            input=[
                {"role": "system", "content": "Be brief."},
                {"role": "developer", "content": [{"type": "input_text", "text": "Be kind."}]},
                {"role": "user", "content": "hi"},
            ],
        )

    async with running(tmp_path) as (server, url):
        answer = await in_thread(talk, url)
    assert answer.output_text == "echo: First.\n\nBe brief.\n\nBe kind.\n\nhi"


async def test_a_token_guards_the_responses_endpoint(tmp_path):
    def ask(ai: openai.OpenAI):
        with pytest.raises(openai.AuthenticationError):
            ai.responses.create(model="any", input="hi")
        token = "a-token-for-the-tests-0001"
        with openai.OpenAI(base_url=str(ai.base_url), api_key=token, max_retries=0) as good:
            return good.responses.create(model="any", input="hi")

    async with running(tmp_path, token="a-token-for-the-tests-0001") as (server, url):
        answer = await in_thread(ask, url)
    assert answer.output_text == "echo: hi"
