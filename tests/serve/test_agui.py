"""AG-UI 1.0 at POST /ag-ui: a run is a turn of the thread's session; its events,
approvals as interrupts and a resume that decides them, checked against the
ag-ui-protocol package's own models."""

from __future__ import annotations

import json

from ag_ui.core import (
    AssistantMessage,
    Event,
    FunctionCall,
    ResumeEntry,
    RunAgentInput,
    Tool,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from pydantic import TypeAdapter
from serving import client, running
from sse_client import post_stream

EVENTS = TypeAdapter(Event)


def run_input(run_id: str, text: str | None = None, resume=None, messages=None, tools=()) -> bytes:
    if messages is None:
        messages = [] if text is None else [UserMessage(id=f"u-{run_id}", content=text)]
    value = RunAgentInput(
        thread_id="t", run_id=run_id, messages=messages, resume=resume, tools=list(tools)
    )
    return json.dumps(value.model_dump(by_alias=True, exclude_none=True, mode="json")).encode()


async def run(url: str, body: bytes) -> list:
    status, values = await post_stream(url, "/ag-ui", body)
    assert status == 200, values
    return [EVENTS.validate_python(value) for value in values]


def types(events) -> list[str]:
    return [event.type.value for event in events]


async def test_a_run_streams_its_text_as_ag_ui_events(tmp_path):
    async with running(tmp_path) as (server, url):
        events = await run(url, run_input("r1", "hi"))
    assert types(events) == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        *["TEXT_MESSAGE_CONTENT"] * 5,
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    assert (events[0].thread_id, events[0].run_id) == ("t", "r1")
    assert "".join(e.delta for e in events if e.type.value == "TEXT_MESSAGE_CONTENT") == "echo: hi"
    assert events[-1].outcome.type == "success"


async def test_a_held_call_is_an_interrupt_and_a_resume_decides_it(tmp_path):
    """The run ends with an interrupt naming the held call; the next run, whose
    resume entry approves it, runs the call and answers: a run sends only its
    own turn's events."""
    async with running(tmp_path) as (server, url), client(url) as http:
        first = await run(url, run_input("r1", "guard"))
        assert types(first) == [
            "RUN_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "RUN_FINISHED",
        ]
        call_id = first[1].tool_call_id
        assert (first[1].tool_call_name, json.loads(first[2].delta)) == ("guarded", {"note": "n"})
        [interrupt] = first[-1].outcome.interrupts
        assert (interrupt.id, interrupt.tool_call_id) == (call_id, call_id)
        resume = [ResumeEntry(interrupt_id=call_id, status="resolved", payload={"approved": True})]
        second = await run(url, run_input("r2", resume=resume))
        assert types(second)[:2] == ["RUN_STARTED", "TOOL_CALL_RESULT"]
        assert (second[1].tool_call_id, second[1].content) == (call_id, "done n")
        assert second[-1].outcome.type == "success"
        text = "".join(e.delta for e in second if e.type.value == "TEXT_MESSAGE_CONTENT")
        assert text == "after guard"
        assert (await http.get("/sessions/t")).json()["turns"] == 2


async def test_bad_runs_are_refused_with_a_json_error(tmp_path):
    async with running(tmp_path) as (server, url):
        for body in [
            b"{}",
            b'{"threadId": "t", "runId": "r", "messages": []}',
            b'{"threadId": "..", "runId": "r", "messages": [{"role": "user", "content": "x"}]}',
            b'{"threadId": "t", "runId": "r", "messages": [{"role": "user", "content": 5}]}',
            b'{"threadId": "t", "runId": "r", "messages": [], "resume": '
            b'[{"interruptId": "c", "status": "resolved", "payload": {"approved": "yes"}}]}',
        ]:
            status, error = await post_stream(url, "/ag-ui", body)
            assert status == 400 and isinstance(error["error"], str), (body, status, error)
    # Review of issue 38: a run refused for its input opened the thread's event
    # log first, leaving an empty file for a thread that never ran.
    assert [path for path in tmp_path.rglob("*") if path.is_file()] == []


async def test_thinking_streams_as_reasoning_events(tmp_path):
    async with running(tmp_path) as (server, url):
        events = await run(url, run_input("r1", "think"))
    assert types(events) == [
        "RUN_STARTED",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    reasoning = events[1:6]
    assert len({e.message_id for e in reasoning}) == 1 and events[3].delta == "pondering"
    assert events[1].message_id != events[6].message_id


PICK = Tool(
    name="pick_color",
    description="Ask the person for a color.",
    parameters={"type": "object", "properties": {"hint": {"type": "string"}}},
)


async def test_a_frontend_tool_call_ends_the_run_as_an_interrupt_its_tool_message_answers(
    tmp_path,
):
    """The client offers pick_color; the model's call of it ends the run as a
    frontend_tool interrupt; the next run carries the client's answer as a tool
    message (the history sent again), and the turn goes on with it."""
    async with running(tmp_path) as (server, url):
        asked = UserMessage(id="u-1", content="use frontend")
        first = await run(url, run_input("r1", messages=[asked], tools=[PICK]))
        assert types(first) == [
            "RUN_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "RUN_FINISHED",
        ]
        call_id = first[1].tool_call_id
        assert first[1].tool_call_name == "pick_color"
        [interrupt] = first[-1].outcome.interrupts
        assert (interrupt.reason, interrupt.tool_call_id) == ("frontend_tool", call_id)
        call = ToolCall(
            id=call_id,
            type="function",
            function=FunctionCall(name="pick_color", arguments=first[2].delta),
        )
        history = [
            asked,
            AssistantMessage(id="a-1", tool_calls=[call]),
            ToolMessage(id="t-1", content="teal", tool_call_id=call_id),
        ]
        second = await run(url, run_input("r2", messages=history, tools=[PICK]))
    assert types(second)[:2] == ["RUN_STARTED", "TOOL_CALL_RESULT"]
    assert (second[1].tool_call_id, second[1].content) == (call_id, "teal")
    text = "".join(e.delta for e in second if e.type.value == "TEXT_MESSAGE_CONTENT")
    assert text == "the client said teal"
    assert second[-1].outcome.type == "success"


async def test_bad_frontend_tools_and_tool_messages_are_refused(tmp_path):
    user = {"role": "user", "id": "u", "content": "hi"}
    async with running(tmp_path) as (server, url):
        for tools, messages in [
            ([{"name": "guarded", "description": "", "parameters": {}}], [user]),
            ([{"name": "a b", "description": "", "parameters": {}}], [user]),
            ([{"name": "ok", "description": "", "parameters": 5}], [user]),
            ([], [user, {"role": "tool", "id": "x", "content": "y"}]),
            ([], [user, {"role": "tool", "id": "x", "content": "y", "toolCallId": "nosuch"}]),
        ]:
            body = {"threadId": "t", "runId": "r", "messages": messages, "tools": tools}
            status, error = await post_stream(url, "/ag-ui", json.dumps(body).encode())
            assert status == 400 and isinstance(error["error"], str), (tools, messages, error)


async def test_a_refused_resume_records_none_of_its_decisions(tmp_path):
    """Bug: a run's resume entries were decided one by one, so a run whose second
    entry names no held call was refused (404) after the first decision was
    recorded: the client's corrected run then got a 409 ("decided already") and
    the held call could no longer be answered as the interrupt asked."""
    async with running(tmp_path) as (server, url), client(url) as http:
        first = await run(url, run_input("r1", "guard"))
        call_id = first[1].tool_call_id
        approve = ResumeEntry(interrupt_id=call_id, status="resolved", payload={"approved": True})
        stray = ResumeEntry(interrupt_id="nosuch", status="resolved", payload={"approved": True})
        status, error = await post_stream(url, "/ag-ui", run_input("r2", resume=[approve, stray]))
        assert status == 404 and "nosuch" in error["error"]
        state = (await http.get("/sessions/t")).json()
        assert [c["id"] for c in state["pending_approvals"]] == [call_id]
        assert (state["decided_approvals"], state["turns"]) == ([], 1)
        second = await run(url, run_input("r3", resume=[approve]))
    assert (second[1].tool_call_id, second[1].content) == (call_id, "done n")
    assert second[-1].outcome.type == "success"


async def test_a_cancelled_interrupt_rejects_its_call_which_never_runs(tmp_path):
    """A resume entry ``cancelled`` (the person dismissed the question) is a no,
    never a yes: the call is answered with an error result and does not run; a
    resolved entry saying ``approved: false`` gives the person's reason."""
    async with running(tmp_path) as (server, url):
        first = await run(url, run_input("r1", "guard"))
        cancelled = ResumeEntry(interrupt_id=first[1].tool_call_id, status="cancelled")
        second = await run(url, run_input("r2", resume=[cancelled]))
        third = await run(url, run_input("r3", "guard"))
        no = {"approved": False, "reason": "not now"}
        refused = ResumeEntry(interrupt_id=third[1].tool_call_id, status="resolved", payload=no)
        fourth = await run(url, run_input("r4", resume=[refused]))
    for events, words in [(second, "the approval was cancelled"), (fourth, "not now")]:
        [result] = [e for e in events if e.type.value == "TOOL_CALL_RESULT"]
        assert result.content != "done n" and words in result.content, result.content
        assert events[-1].outcome.type == "success"
