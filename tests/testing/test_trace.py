"""trio_agent.testing.trace: an event stream as compact, stable text (issue 17, item 8)."""

from __future__ import annotations

import typing

import pytest
import trio

from trio_agent import (
    Agent,
    ApprovalDecided,
    ApprovalRequested,
    RetryPolicy,
    ToolCall,
    ToolRegistry,
    UserMessage,
    run_agent_loop,
    tool,
)
from trio_agent.events import (
    AttemptFailed,
    ContextCompacted,
    Event,
    Failed,
    MessageAccepted,
    ModelChunk,
    RunFinished,
    SessionEvent,
    ToolFinished,
    ToolStarted,
    ToolUpdated,
    TurnFailed,
    TurnFinished,
    TurnResult,
    TurnStarted,
)
from trio_agent.messages import (
    AssistantMessage,
    ImageBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultMessage,
)
from trio_agent.model import TextDelta, ThinkingDelta, Usage
from trio_agent.testing import CutStream, FaultyModel, ScriptedModel, scripted_response, trace


@tool
async def forecast(city: str) -> str:
    """Tomorrow's forecast for a city."""
    await trio.lowlevel.checkpoint()
    return "31 C, humid"


def script():
    return [
        scripted_response("r1", [ToolCall("c1", "forecast", {"city": "Hanoi"})]),
        scripted_response("r2", "Tomorrow in Hanoi: 31 C and humid.", text_chunks=2),
    ]


async def record(run):
    events = []
    async with run:
        async for event in run:
            events.append(event)
    return events


async def test_a_turn_with_a_retry_and_a_tool_call_traces_as_its_snapshot():
    model = FaultyModel(ScriptedModel(script()[:1] + script()), [CutStream(1, after=0)])
    agent = Agent(model=model, tools=ToolRegistry([forecast]), retry=RetryPolicy(jitter=0.5))
    events = await record(agent.turn("Hanoi?"))
    assert trace(events) == "\n".join(
        [
            "0 turn.started turn=1",
            '1 message.accepted user user-#1 "Hanoi?"',
            "2 attempt.failed request-001 attempt=1 chunks=0 retry "
            '"TransientModelError: connection dropped mid-stream"',
            '3 model.chunk request-001 attempt=2 tool_call forecast c1 {"city":"Hanoi"}',
            "4 tool.started forecast c1",
            '5 tool.finished forecast c1 ok "31 C, humid"',
            '6 model.chunk request-002 text "Tomorrow in Hanoi"',
            '7 model.chunk request-002 text ": 31 C and humid."',
            "8 turn.finished turn=1 completed steps=2 tokens=0+0 "
            '"Tomorrow in Hanoi: 31 C and humid."',
        ]
    )


async def test_the_random_ids_of_string_prompts_do_not_reach_the_trace():
    traces = []
    for _ in range(2):
        agent = Agent(
            model=ScriptedModel([scripted_response("a", "one"), scripted_response("b", "two")])
        )
        events = await record(agent.turn("first"))
        events += await record(agent.turn("second"))
        ids = [e.message.id for e in events if isinstance(e, MessageAccepted)]
        assert ids[0] != ids[1] and all(i.startswith("user-") and len(i) == 17 for i in ids)
        traces.append(trace(events))
    assert traces[0] == traces[1]
    assert '1 message.accepted user user-#1 "first"' in traces[0]
    assert '5 message.accepted user user-#2 "second"' in traces[0]


async def test_a_run_that_fails_shows_its_code_and_detail():
    model = ScriptedModel([RuntimeError("the model broke")])
    run = run_agent_loop(
        messages=[UserMessage("u1", "hi")], model=model, tools=ToolRegistry(), max_steps=2
    )
    text = trace(await record(run))
    lines = text.split("\n")
    assert lines[0] == '0 message.accepted user u1 "hi"'
    assert lines[-1].startswith(f"{len(lines) - 1} run.finished failed code=")
    assert "steps=1" in lines[-1] and "detail=" in lines[-1]


async def test_a_completed_run_shows_its_stop_reason_and_final_text():
    model = ScriptedModel([scripted_response("a", "done")])
    run = run_agent_loop(
        messages=[UserMessage("u1", "hi")], model=model, tools=ToolRegistry(), max_steps=2
    )
    assert trace(await record(run)) == "\n".join(
        [
            '0 message.accepted user u1 "hi"',
            '1 model.chunk request-001 text "done"',
            '2 run.finished completed stop_reason=stop steps=1 "done"',
        ]
    )


CALL = ToolCall("c7", "lookup", {"q": "x"})
TURN_RESULT = TurnResult(
    turn=2,
    end=TurnFailed(code="MODEL_ERROR", detail="503"),
    steps=1,
    final_text="",
    usage=Usage(10, 3),
    messages=(),
)
ONE_OF_EACH = {
    MessageAccepted: (
        MessageAccepted(
            sequence=0,
            message=AssistantMessage("m1", (TextBlock("hi"), ThinkingBlock("hmm"), CALL)),
        ),
        '0 message.accepted assistant m1 [text "hi", thinking "hmm", '
        'tool_call lookup c7 {"q":"x"}]',
    ),
    ModelChunk: (
        ModelChunk(sequence=1, request_id="request-004", chunk=ThinkingDelta("so", "sig")),
        '1 model.chunk request-004 thinking "so" signature (3 chars)',
    ),
    ToolStarted: (ToolStarted(sequence=2, call=CALL), "2 tool.started lookup c7"),
    ToolUpdated: (
        ToolUpdated(sequence=3, call=CALL, message="half", fraction=0.5),
        '3 tool.updated lookup c7 "half" fraction=0.5',
    ),
    ToolFinished: (
        ToolFinished(
            sequence=4,
            call=CALL,
            result=ToolResultMessage(
                "tool-result-c7",
                "c7",
                "lookup",
                (TextBlock("no"), ImageBlock("image/png", data=b"\x89PNG")),
                is_error=True,
            ),
        ),
        '4 tool.finished lookup c7 error [text "no", image image/png (4 bytes)]',
    ),
    RunFinished: (
        RunFinished(sequence=5, result=Failed(messages=(), steps=0, code="X", detail="why")),
        '5 run.finished failed code=X detail="why" steps=0',
    ),
    AttemptFailed: (
        AttemptFailed(
            sequence=6, request_id="request-004", attempt=3, error="boom", chunks=2, retry_in=None
        ),
        '6 attempt.failed request-004 attempt=3 chunks=2 give_up "boom"',
    ),
    TurnStarted: (TurnStarted(sequence=7, turn=2), "7 turn.started turn=2"),
    TurnFinished: (
        TurnFinished(sequence=8, turn=2, result=TURN_RESULT),
        '8 turn.finished turn=2 failed code=MODEL_ERROR detail="503" steps=1 tokens=10+3',
    ),
    ContextCompacted: (
        ContextCompacted(
            sequence=9, request_id="request-005", messages=(UserMessage("u", "x"),) * 2
        ),
        "9 context.compacted request-005 messages=2",
    ),
    ApprovalRequested: (
        ApprovalRequested(sequence=10, call=CALL),
        "10 approval.requested lookup c7",
    ),
    ApprovalDecided: (
        ApprovalDecided(sequence=11, call=CALL, approved=False, reason="no", by="ann"),
        '11 approval.decided lookup c7 rejected by="ann" "no"',
    ),
}


def test_every_event_class_has_its_own_line():
    classes = set(typing.get_args(Event)) | set(typing.get_args(SessionEvent))
    assert set(ONE_OF_EACH) == classes  # a new event class needs a line here and in trace()
    for cls, (event, expected) in ONE_OF_EACH.items():
        assert type(event) is cls
        assert trace([event]) == expected


def test_chunks_of_every_kind():
    chunks = [
        TextDelta(""),
        RedactedThinkingBlock("x" * 300),
        ToolCall("c1", "f", {}),
        ThinkingDelta(thinking="t"),
    ]
    events = [
        ModelChunk(sequence=i, request_id="request-001", chunk=c) for i, c in enumerate(chunks)
    ]
    assert trace(events) == "\n".join(
        [
            '0 model.chunk request-001 text ""',
            "1 model.chunk request-001 redacted_thinking (300 chars)",
            "2 model.chunk request-001 tool_call f c1 {}",
            '3 model.chunk request-001 thinking "t"',
        ]
    )


def test_long_texts_and_arguments_are_cut_and_their_length_said():
    long = "é" * 100
    events = [
        MessageAccepted(sequence=0, message=UserMessage("u1", long)),
        ModelChunk(
            sequence=1, request_id="request-001", chunk=ToolCall("c1", "f", {"k": "v" * 50})
        ),
    ]
    lines = trace(events, width=10).split("\n")
    assert lines[0] == '0 message.accepted user u1 "ééééééééé…" (100 chars)'
    assert lines[1] == '1 model.chunk request-001 tool_call f c1 {"k":"vvv… (58 chars)'
    assert trace(events[:1], width=100) == f'0 message.accepted user u1 "{long}"'


def test_a_lone_surrogate_is_shown_escaped():
    event = ModelChunk(sequence=0, request_id="request-001", chunk=TextDelta("a\ud800b"))
    text = trace([event])
    assert text == '0 model.chunk request-001 text "a\\ud800b"'
    text.encode("utf-8")  # printable, writable to a snapshot file


def test_what_is_not_an_event_is_refused():
    with pytest.raises(TypeError, match="not an event"):
        trace([UserMessage("u1", "hi")])
    with pytest.raises(ValueError, match="width"):
        trace([], width=3)
    assert trace([]) == ""
