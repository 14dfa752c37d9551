"""AG-UI 1.0 at POST /ag-ui: a run is a turn of the thread's session; its events,
approvals as interrupts and a resume that decides them, checked against the
ag-ui-protocol package's own models."""

from __future__ import annotations

import json

import serve_agents
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

import trio_agent
from trio_agent.fleet import agent_maker
from trio_agent.messages._ir import content_text
from trio_agent.serve._frontend import MAX_ANSWER_CHARS
from trio_agent.testing import CallableModel, CutStream, FaultyModel, scripted_response

EVENTS = TypeAdapter(Event)


def run_input(
    run_id: str, text: str | None = None, resume=None, messages=None, tools=(), thread="t"
) -> bytes:
    if messages is None:
        messages = [] if text is None else [UserMessage(id=f"u-{run_id}", content=text)]
    value = RunAgentInput(
        thread_id=thread, run_id=run_id, messages=messages, resume=resume, tools=list(tools)
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


def two_frontend_calls(request):
    """``"use two"``: two calls of pick_color in one step, then the answers
    joined; ``"refuse"``: a refusal; else as serve_agents."""
    asked = [m for m in request.messages if isinstance(m, trio_agent.UserMessage)][-1].content
    last = request.messages[-1]
    if asked.startswith("use ") and isinstance(last, trio_agent.ToolResultMessage):
        got = [content_text(m.content) for m in request.messages[-2:]]
        return scripted_response(f"r-{request.id}", f"the client said {' and '.join(got)}")
    if asked in ("use two", "use three"):
        calls = [trio_agent.ToolCall(f"c-{request.id}-{n}", "pick_color", {}) for n in (1, 2)]
        if asked == "use three":  # and a call held for approval
            calls.append(trio_agent.ToolCall(f"c-{request.id}-3", "guarded", {"note": "n"}))
        return scripted_response(f"r-{request.id}", calls)
    if asked == "refuse":
        return scripted_response(f"r-{request.id}", "I will not", stop_reason="refusal")
    if asked == "loop":  # calls ping for ever
        return scripted_response(
            f"r-{request.id}", [trio_agent.ToolCall(f"c-{request.id}", "ping", {})]
        )
    return serve_agents.answers(request)


@trio_agent.tool
async def ping() -> str:
    """Answer pong."""
    return "pong"


make_two = agent_maker(model=CallableModel(two_frontend_calls), tools=[serve_agents.guarded])


async def test_a_refused_turn_is_a_run_error_not_a_success(tmp_path):
    """Bug: a turn that ended in the model's refusal (or a limit, a hook's stop)
    was framed as RUN_FINISHED with outcome success, its reason only in
    ``result``: CopilotKit and every AG-UI client showed it as a completed run.
    It is a RUN_ERROR whose code names the end; a normal end is unchanged."""
    async with running(tmp_path, factory=make_two) as (server, url):
        events = await run(url, run_input("r1", "refuse"))
        normal = await run(url, run_input("r2", "hi"))
    assert types(events)[-2:] == ["TEXT_MESSAGE_END", "RUN_ERROR"]
    assert (events[-1].code, events[-1].message) == ("REFUSAL", "the model refused to answer")
    assert normal[-1].type.value == "RUN_FINISHED" and normal[-1].outcome.type == "success"


async def test_a_run_stopped_by_a_limit_names_the_limit_in_its_run_error(tmp_path):
    maker = agent_maker(model=CallableModel(two_frontend_calls), max_steps=1, tools=[ping])
    async with running(tmp_path, factory=maker) as (server, url):
        events = await run(url, run_input("r1", "loop"))
    assert events[-1].type.value == "RUN_ERROR" and events[-1].code == "MAX_STEPS"
    assert events[-1].message == "the turn spent its 1 steps"


def answer(call_id: str, text: str, n: int = 0) -> ToolMessage:
    return ToolMessage(id=f"t-{call_id}-{n}", content=text, tool_call_id=call_id)


async def two_calls(url: str, text: str = "use two") -> tuple[list, list[str]]:
    """A run whose turn calls pick_color twice (and ``"use three"``: guarded);
    its history and the calls' ids."""
    asked = UserMessage(id="u-r1", content=text)
    first = await run(url, run_input("r1", messages=[asked], tools=[PICK]))
    starts = [e for e in first if e.type.value == "TOOL_CALL_START"]
    ids = [e.tool_call_id for e in starts]
    reasons = ["frontend_tool"] * 2 + ["tool_approval"] * (len(ids) - 2)
    assert [i.reason for i in first[-1].outcome.interrupts] == reasons
    calls = [
        ToolCall(
            id=e.tool_call_id,
            type="function",
            function=FunctionCall(name=e.tool_call_name, arguments="{}"),
        )
        for e in starts
    ]
    return [asked, AssistantMessage(id="a-r1", tool_calls=calls)], ids


async def test_a_run_with_one_bad_answer_records_none_of_its_answers(tmp_path):
    """Bug: a run's tool messages were recorded one by one (each call approved in
    turn), so a run refused for its second answer had recorded the first: the
    corrected run then found that call decided and the turn could not go on
    as the client meant. Now every answer is checked first; one bad answer (a
    call answered twice, an answer too long, an answer to a call held for
    approval, with a bad resume entry) refuses the run with a JSON error and
    records none; the good batch is then recorded whole."""
    async with running(tmp_path, factory=make_two) as (server, url), client(url) as http:
        history, (one, two, held) = await two_calls(url, "use three")
        stray = ResumeEntry(interrupt_id="nosuch", status="resolved", payload={"approved": True})
        long = "x" * (MAX_ANSWER_CHARS + 1)
        for answers, resume, status, words in [
            ([answer(one, "teal"), answer(two, "red"), answer(two, "blue", 1)], None, 400, "twice"),
            ([answer(one, "teal"), answer(two, long)], None, 400, "characters"),
            ([answer(one, "teal"), answer(held, "yes")], None, 400, "resume entry"),
            ([answer(one, "teal"), answer(two, "red")], [stray], 404, "nosuch"),
        ]:
            body = run_input("r2", messages=[*history, *answers], tools=[PICK], resume=resume)
            got, error = await post_stream(url, "/ag-ui", body)
            assert got == status and words in error["error"], (got, error)
            state = (await http.get("/sessions/t")).json()
            assert [c["id"] for c in state["pending_approvals"]] == [one, two, held]
            assert (state["decided_approvals"], state["turns"]) == ([], 1)
        resume = [ResumeEntry(interrupt_id=held, status="resolved", payload={"approved": True})]
        both = [*history, answer(one, "teal"), answer(two, "red")]
        done = await run(url, run_input("r3", messages=both, tools=[PICK], resume=resume))
    results = {e.tool_call_id: e.content for e in done if e.type.value == "TOOL_CALL_RESULT"}
    assert results == {one: "teal", two: "red", held: "done n"}
    assert done[-1].outcome.type == "success"


async def test_answers_recorded_before_a_restart_are_the_calls_results_after_it(tmp_path):
    """Bug: the client's answers were kept in memory only (the calls' approvals
    alone reached the ledger): a server that stopped before the turn ran them
    gave each call "the client gave no answer" once it came back. Each answer
    is recorded in the ledger with its call's approval, and found again."""
    async with running(tmp_path, factory=make_two) as (server, url):
        history, (one, two) = await two_calls(url)
        assert await server.hub.answer_calls("t", [(one, "teal"), (two, "red")])
    async with running(tmp_path, factory=make_two) as (server, url):
        asked = UserMessage(id="u-2", content="hi")
        events = await run(url, run_input("r2", messages=[*history, asked], tools=[PICK]))
    results = {e.tool_call_id: e.content for e in events if e.type.value == "TOOL_CALL_RESULT"}
    assert results == {one: "teal", two: "red"}


async def test_answers_sent_again_or_for_calls_not_open_here_record_nothing(tmp_path):
    """A hostile or confused client: an answer to another thread's open call, or
    one sent again with different text after the call was answered, decides
    nothing; the same answer sent again (a retried request) goes on as one."""
    async with running(tmp_path, factory=make_two) as (server, url), client(url) as http:
        history, (one, two) = await two_calls(url)
        hostile = [UserMessage(id="u", content="hi"), answer(one, "x")]
        other = run_input("o1", messages=hostile, tools=[PICK], thread="other")
        status, error = await post_stream(url, "/ag-ui", other)
        assert status == 400 and "user message" in error["error"]
        state = (await http.get("/sessions/t")).json()
        assert [c["id"] for c in state["pending_approvals"]] == [one, two]
        assert await server.hub.answer_calls("t", [(one, "teal")])
        again = run_input("r2", messages=[*history, answer(one, "blue")], tools=[PICK])
        status, error = await post_stream(url, "/ag-ui", again)
        assert status == 409 and "decided already" in error["error"]
        same = [*history, answer(one, "teal"), answer(two, "red")]
        done = await run(url, run_input("r3", messages=same, tools=[PICK]))
    results = {e.tool_call_id: e.content for e in done if e.type.value == "TOOL_CALL_RESULT"}
    assert results == {one: "teal", two: "red"}


async def test_a_thread_is_offered_a_bounded_number_of_tools_and_none_named_final_result(
    tmp_path,
):
    """Hostile client: the tools offered are kept for the thread, each run's
    added to the last's, so runs of 128 new names each grew them (and every
    model request) without end; and a tool named like the output tool
    (final_result) was taken. Both are a 400 now, the same tools again fine."""
    user = [UserMessage(id="u", content="hi")]

    def tools(first: int, count: int = 128) -> list[Tool]:
        return [
            Tool(name=f"t{n}", description="", parameters={}) for n in range(first, first + count)
        ]

    async with running(tmp_path) as (server, url):
        assert (await run(url, run_input("r1", messages=user, tools=tools(0))))[-1].outcome
        assert (await run(url, run_input("r2", messages=user, tools=tools(0))))[-1].outcome
        for offered in [tools(128, 1), [Tool(name="final_result", description="", parameters={})]]:
            body = run_input("r3", messages=user, tools=offered)
            status, error = await post_stream(url, "/ag-ui", body)
            assert status == 400 and "tool" in error["error"], (status, error)


async def test_regression_a_threads_tools_are_bounded_in_bytes_not_only_in_number(tmp_path):
    """Hostile client: each run may offer tools of up to the body's 1 MiB, and a
    thread keeps them across runs (and sends them with every model request):
    128 tools of 1 MiB each held 128 MiB for one thread. A thread's tools hold at
    most ``MAX_TOOLS_BYTES`` in all; offering the same tools again is fine."""
    from trio_agent.serve._frontend import MAX_TOOLS_BYTES

    user = [UserMessage(id="u", content="hi")]
    big = "d" * (MAX_TOOLS_BYTES // 3)

    def tools(*names: str) -> list[Tool]:
        return [Tool(name=name, description=big, parameters={}) for name in names]

    async with running(tmp_path) as (server, url):
        assert (await run(url, run_input("r1", messages=user, tools=tools("a", "b"))))[-1].outcome
        assert (await run(url, run_input("r2", messages=user, tools=tools("a", "b"))))[-1].outcome
        status, error = await post_stream(
            url, "/ag-ui", run_input("r3", messages=user, tools=tools("c"))
        )
        assert status == 400 and "bytes" in error["error"], (status, error)
        assert (await run(url, run_input("r4", messages=user, tools=tools("b"))))[-1].outcome


async def test_a_resume_entry_cannot_approve_a_frontend_call_without_its_answer(tmp_path):
    """Hostile client: a resume entry approving a frontend_tool interrupt (it
    asks for a tool message) approved the call with no answer, and the model
    was told "the client gave no answer". It is a 400 and decides nothing; a
    cancelled entry still rejects the call."""
    async with running(tmp_path) as (server, url), client(url) as http:
        asked = UserMessage(id="u-1", content="use frontend")
        first = await run(url, run_input("r1", messages=[asked], tools=[PICK]))
        call_id = first[1].tool_call_id
        yes = ResumeEntry(interrupt_id=call_id, status="resolved", payload={"approved": True})
        status, error = await post_stream(url, "/ag-ui", run_input("r2", resume=[yes]))
        assert status == 400 and "tool message" in error["error"]
        state = (await http.get("/sessions/t")).json()
        assert [c["id"] for c in state["pending_approvals"]] == [call_id]
        no = ResumeEntry(interrupt_id=call_id, status="cancelled")
        second = await run(url, run_input("r3", resume=[no], tools=[PICK]))
    [result] = [e for e in second if e.type.value == "TOOL_CALL_RESULT"]
    assert "the approval was cancelled" in result.content


async def test_tool_messages_of_the_history_are_passed_over_whatever_they_hold(tmp_path):
    """The checks of answers hold for open calls only: a client sends its whole
    history again, where an earlier result may be long or repeated."""
    async with running(tmp_path, factory=make_two) as (server, url):
        history, (one, two) = await two_calls(url)
        old = [answer("old", "x" * (MAX_ANSWER_CHARS + 1)), answer("old", "y", 1)]
        both = [*old, *history, answer(one, "teal"), answer(two, "red")]
        done = await run(url, run_input("r2", messages=both, tools=[PICK]))
    results = {e.tool_call_id: e.content for e in done if e.type.value == "TOOL_CALL_RESULT"}
    assert results == {one: "teal", two: "red"}


def look_twice(request):
    """``"look"``: the text ``looking``, a ping call (its id the request's, the same
    on a retry), the text `` now``; then ``found``."""
    if isinstance(request.messages[-1], trio_agent.ToolResultMessage):
        return scripted_response(f"r-{request.id}", "found")
    call = trio_agent.ToolCall(f"c-{request.id}", "ping", {})
    blocks = [trio_agent.TextBlock("looking"), call, trio_agent.TextBlock(" now")]
    return scripted_response(f"r-{request.id}", blocks)


def verified(events) -> None:
    """The checks of @ag-ui/client's ``verifyEvents`` (the Python package has no
    verifier), and a call or message id is started once only."""
    assert types(events)[0] == "RUN_STARTED" and types(events)[-1] == "RUN_FINISHED"
    texts: set[str] = set()
    calls: set[str] = set()
    text: str | None = None
    call: str | None = None
    for event in events[1:-1]:
        kind = event.type.value
        if kind == "TEXT_MESSAGE_START":
            assert text is None and event.message_id not in texts, event
            text = event.message_id
            texts.add(text)
        elif kind in ("TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"):
            assert event.message_id == text, event
            text = None if kind == "TEXT_MESSAGE_END" else text
        elif kind == "TOOL_CALL_START":
            assert call is None and event.tool_call_id not in calls, event
            call = event.tool_call_id
            calls.add(call)
        elif kind in ("TOOL_CALL_ARGS", "TOOL_CALL_END"):
            assert event.tool_call_id == call, event
            call = None if kind == "TOOL_CALL_END" else call
        elif kind == "TOOL_CALL_RESULT":
            assert event.tool_call_id in calls and call is None, event
    assert text is None and call is None


async def test_a_retried_attempt_frames_its_calls_never_and_ends_its_text(tmp_path):
    """Bug: the chunks of an attempt that failed (``attempt.failed``: void, the
    request retried) were framed as if they stood: its tool call was framed,
    then the retry's with the same id (the client saw the call twice), and its
    text message was left open. Now an attempt's calls are framed once it goes
    on, never once it fails, and its text is ended at the failure."""
    model = FaultyModel(CallableModel(look_twice), faults=[CutStream(call=1, after=3)])
    maker = agent_maker(model=model, tools=[ping])
    async with running(tmp_path, factory=maker) as (server, url):
        events = await run(url, run_input("r1", "look"))
    assert model.injected == [CutStream(call=1, after=3)]
    starts = [e for e in events if e.type.value == "TOOL_CALL_START"]
    [result] = [e for e in events if e.type.value == "TOOL_CALL_RESULT"]
    assert [e.tool_call_id for e in starts] == [result.tool_call_id]
    verified(events)
    assert (starts[0].tool_call_name, result.content) == ("ping", "pong")
    messages: dict[str, str] = {}
    for event in events:
        if event.type.value == "TEXT_MESSAGE_CONTENT":
            messages[event.message_id] = messages.get(event.message_id, "") + event.delta
    assert list(messages.values()) == ["looking now", "looking now", "found"]
    assert events[-1].outcome.type == "success"
