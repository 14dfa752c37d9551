"""validate_transcript, repair_transcript and invalid initial transcripts (DESIGN 3, 7)."""

from __future__ import annotations

import msgspec
import pytest
from helpers import assert_stream_shape, call, settle, start, user

from trio_agent import (
    MAX_INITIAL_MESSAGES,
    AssistantMessage,
    Failed,
    Message,
    RunFinished,
    TextBlock,
    ToolResultMessage,
    TranscriptError,
    UserMessage,
    repair_transcript,
    text_from_assistant,
    validate_transcript,
)
from trio_agent.testing import scripted_response


def assistant(id: str, *blocks) -> AssistantMessage:
    return AssistantMessage(id, tuple(blocks))


def result(call_id: str, name: str = "add", id: str | None = None) -> ToolResultMessage:
    return ToolResultMessage(id or f"tool-result-{call_id}", call_id, name, "ok")


GOOD: list[Message] = [
    user(),
    assistant("a1", TextBlock("let me"), call("add", "c1"), call("echo", "c2")),
    result("c2", "echo"),  # results may answer in any order
    result("c1", "add"),
    UserMessage("u2", "thanks"),
    assistant("a2", TextBlock("done")),
]

INVALID = {
    "duplicate message id": ([user(), UserMessage("user-001", "again")], "DUPLICATE_MESSAGE_ID"),
    "duplicate call id": (
        [
            user(),
            assistant("a1", call("add", "c1")),
            result("c1"),
            assistant("a2", call("add", "c1")),
            result("c1", id="r2"),
        ],
        "DUPLICATE_CALL_ID",
    ),
    "duplicate call id in one message": (
        [user(), assistant("a1", call("add", "c1"), call("add", "c1")), result("c1")],
        "DUPLICATE_CALL_ID",
    ),
    "call without result": ([user(), assistant("a1", call("add", "c1"))], "MISSING_RESULT"),
    "call answered after the next user message": (
        [user(), assistant("a1", call("add", "c1")), UserMessage("u2", "hm"), result("c1")],
        "MISSING_RESULT",
    ),
    "result without call": ([user(), result("nope")], "UNEXPECTED_RESULT"),
    "two results for one call": (
        [user(), assistant("a1", call("add", "c1")), result("c1"), result("c1", id="again")],
        "UNEXPECTED_RESULT",
    ),
    "result answering an older assistant message": (
        [
            user(),
            assistant("a1", call("add", "c1")),
            result("c1"),
            assistant("a2", call("add", "c2")),
            result("c2"),
            result("c1", id="late"),
        ],
        "UNEXPECTED_RESULT",
    ),
    "wrong tool name": (
        [user(), assistant("a1", call("add", "c1")), result("c1", "sub")],
        "WRONG_TOOL_NAME",
    ),
    "result before its call": (
        [user(), result("c1"), assistant("a1", call("add", "c1"))],
        "UNEXPECTED_RESULT",
    ),
    "not a message": ([user(), {"role": "user", "id": "x", "content": "y"}], "NOT_A_MESSAGE"),
    "block that is not a block": ([assistant("a1", "text")], "INVALID_FIELD"),
    "field of the wrong type": ([UserMessage("u", 42)], "INVALID_FIELD"),
    "is_error not a bool": (
        [
            user(),
            assistant("a1", call("add", "c1")),
            ToolResultMessage("r", "c1", "add", "x", is_error="yes"),
        ],
        "INVALID_FIELD",
    ),
    "lone surrogate": ([UserMessage("u", "bad \udc00")], "INVALID_UNICODE"),
    "lone surrogate in a message id": ([UserMessage("u\udc00", "x")], "INVALID_UNICODE"),
    "lone surrogate in a text block": ([assistant("a1", TextBlock("\udc00"))], "INVALID_UNICODE"),
    "lone surrogate in a call id": (
        [user(), assistant("a1", call("add", "c\udc00")), result("c\udc00", id="r1")],
        "INVALID_UNICODE",
    ),
    "lone surrogate in a tool name": (
        [user(), assistant("a1", call("a\udc00", "c1")), result("c1", "a\udc00")],
        "INVALID_UNICODE",
    ),
    "lone surrogate in a result": (
        [
            user(),
            assistant("a1", call("add", "c1")),
            ToolResultMessage("r1", "c1", "add", "bad \udc00"),
        ],
        "INVALID_UNICODE",
    ),
    "non-JSON arguments": (
        [user(), assistant("a1", call("add", "c1", {"x": float("nan")})), result("c1")],
        "INVALID_ARGUMENTS",
    ),
}


def test_a_valid_transcript_passes():
    validate_transcript(GOOD)
    validate_transcript(tuple(GOOD))
    validate_transcript([])


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_transcripts_raise_with_a_code(case):
    messages, code = INVALID[case]
    with pytest.raises(TranscriptError) as info:
        validate_transcript(messages)
    assert info.value.code == code
    assert str(info.value)


def test_validate_transcript_needs_a_sequence():
    with pytest.raises(TypeError, match="list or tuple"):
        validate_transcript(user())  # type: ignore[arg-type]


def test_text_from_assistant_concatenates_text_blocks_only():
    message = assistant("a", TextBlock("a"), call("x", "c"), TextBlock(""), TextBlock("b c"))
    assert text_from_assistant(message) == "ab c"


def test_repair_answers_each_unanswered_call_after_the_existing_results():
    cut = [
        user(),
        assistant("a1", call("add", "c1"), call("echo", "c2"), call("add", "c3")),
        result("c2", "echo"),
        UserMessage("u2", "next"),
        assistant("a2", call("add", "c4")),
    ]
    repaired = repair_transcript(cut)
    assert repaired == (
        cut[0],
        cut[1],
        cut[2],
        ToolResultMessage(
            "tool-result-c1", "c1", "add", "interrupted: no result was recorded", True
        ),
        ToolResultMessage(
            "tool-result-c3", "c3", "add", "interrupted: no result was recorded", True
        ),
        cut[3],
        cut[4],
        ToolResultMessage(
            "tool-result-c4", "c4", "add", "interrupted: no result was recorded", True
        ),
    )
    validate_transcript(repaired)


def test_repair_leaves_a_valid_transcript_unchanged():
    assert repair_transcript(GOOD) == tuple(GOOD)


@pytest.mark.parametrize("case", [c for c in INVALID if INVALID[c][1] != "MISSING_RESULT"])
def test_repair_does_not_hide_other_defects(case):
    messages, code = INVALID[case]
    with pytest.raises(TranscriptError) as info:
        repair_transcript(messages)
    assert info.value.code == code


def test_repair_refuses_an_id_it_cannot_use():
    cut = [UserMessage("tool-result-c1", "x"), assistant("a1", call("add", "c1"))]
    with pytest.raises(TranscriptError, match="already used"):
        repair_transcript(cut)


@pytest.mark.parametrize("case", list(INVALID))
async def test_an_invalid_initial_transcript_gives_one_failed_event_and_no_model_call(case):
    messages, code = INVALID[case]
    run, model = start([scripted_response("r1", "never")], messages=messages)
    events, outcome = await settle(run)
    assert isinstance(outcome, Failed)
    assert outcome.code == "INVALID_TRANSCRIPT"
    assert code in outcome.detail
    assert outcome.messages == () and outcome.steps == 0
    assert events == [RunFinished(sequence=0, result=outcome)]
    assert model.call_count == 0
    msgspec.json.encode(events[0])


async def test_4097_initial_messages_are_invalid():
    messages = [UserMessage(f"u{i}", "x") for i in range(MAX_INITIAL_MESSAGES + 1)]
    run, model = start([scripted_response("r1", "never")], messages=messages)
    events, outcome = await settle(run)
    assert outcome.code == "INVALID_TRANSCRIPT" and "4097" in outcome.detail
    assert len(events) == 1 and model.call_count == 0


async def test_4096_initial_messages_are_accepted():
    messages = [UserMessage(f"u{i}", "x") for i in range(MAX_INITIAL_MESSAGES)]
    run, model = start([scripted_response("r1", "ok")], messages=messages)
    events, outcome = await settle(run)
    assert outcome.status == "completed"
    assert len(model.requests[0].messages) == MAX_INITIAL_MESSAGES
    assert [e.type for e in events[:MAX_INITIAL_MESSAGES]] == ["message.accepted"] * 4096
    assert_stream_shape(events, outcome)


async def test_an_invalid_transcript_is_reported_by_wait_too():
    run, model = start([], messages=INVALID["call without result"][0])
    outcome = await run.wait()
    assert outcome.code == "INVALID_TRANSCRIPT" and model.call_count == 0
