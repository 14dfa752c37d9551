"""Every event and result round-trips through msgspec.json (DESIGN 7)."""

from __future__ import annotations

import msgspec
import pytest
from helpers import call, settle, start, user
from hypothesis import given
from hypothesis import strategies as st

import trio_agent
from trio_agent import (
    AssistantMessage,
    Cancelled,
    Completed,
    Event,
    Failed,
    MaxSteps,
    Message,
    MessageAccepted,
    ModelChunk,
    RunFinished,
    RunResult,
    TextBlock,
    TextDelta,
    ToolFinished,
    ToolResultMessage,
    ToolStarted,
)
from trio_agent.testing import scripted_response

CALL = call("add", "c1", {"left": 1, "right": [2.5, None, True, {"x": "é😀"}]})
RESULT_MESSAGE = ToolResultMessage("tool-result-c1", "c1", "add", "3", False)
MESSAGES = (user(), AssistantMessage("a1", (TextBlock("hm"), CALL)), RESULT_MESSAGE)

RESULTS = [
    Completed(messages=MESSAGES, steps=2, final_text="done", stop_reason="stop"),
    Completed(messages=(), steps=1, final_text="cut", stop_reason="length"),
    Cancelled(messages=MESSAGES[:2], steps=1),
    MaxSteps(messages=MESSAGES, steps=1, max_steps=1),
    Failed(messages=(), steps=0, code="INVALID_TRANSCRIPT", detail="bad"),
]
EVENTS = [
    MessageAccepted(sequence=0, message=user()),
    ModelChunk(sequence=1, request_id="request-001", chunk=TextDelta("hm")),
    ModelChunk(sequence=2, request_id="request-001", chunk=CALL),
    ToolStarted(sequence=3, call=CALL),
    ToolFinished(sequence=4, call=CALL, result=RESULT_MESSAGE),
    *[RunFinished(sequence=5 + i, result=r) for i, r in enumerate(RESULTS)],
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.type)
def test_events_round_trip(event):
    data = msgspec.json.encode(event)
    assert msgspec.json.decode(data, type=Event) == event
    assert msgspec.json.decode(data)["type"] == event.type


@pytest.mark.parametrize("result", RESULTS, ids=lambda r: r.status)
def test_results_round_trip(result):
    data = msgspec.json.encode(result)
    assert msgspec.json.decode(data, type=RunResult) == result
    assert msgspec.json.decode(data)["status"] == result.status


def test_tags_equal_class_attributes():
    for cls, tag in [
        (MessageAccepted, "message.accepted"),
        (ModelChunk, "model.chunk"),
        (ToolStarted, "tool.started"),
        (ToolFinished, "tool.finished"),
        (RunFinished, "run.finished"),
    ]:
        assert cls.type == tag == cls.__struct_config__.tag
    for cls, tag in [
        (Completed, "completed"),
        (Cancelled, "cancelled"),
        (MaxSteps, "max_steps"),
        (Failed, "failed"),
    ]:
        assert cls.status == tag == cls.__struct_config__.tag


def test_wire_format_is_snake_case_and_tagged():
    assert msgspec.json.decode(msgspec.json.encode(RESULT_MESSAGE)) == {
        "role": "tool_result",
        "id": "tool-result-c1",
        "tool_call_id": "c1",
        "tool_name": "add",
        "content": "3",
        "is_error": False,
    }
    assert msgspec.json.decode(msgspec.json.encode(CALL))["type"] == "tool_call"
    assert msgspec.json.decode(msgspec.json.encode(TextDelta("x"))) == {
        "type": "text_delta",
        "text": "x",
    }


def test_messages_are_frozen():
    with pytest.raises(AttributeError):
        user().content = "changed"  # type: ignore[misc]


async def test_every_event_of_a_real_run_round_trips():
    run, _ = start(
        [
            scripted_response(
                "r1",
                [
                    TextBlock("thinking"),
                    call("add", "c1", {"left": 1, "right": 2}),
                    call("nope", "c2"),
                ],
                text_chunks=3,
            ),
            scripted_response("r2", "3", usage=trio_agent.Usage(input_tokens=5, output_tokens=1)),
        ]
    )
    events, result = await settle(run)
    for event in events:
        assert msgspec.json.decode(msgspec.json.encode(event), type=Event) == event
    assert msgspec.json.decode(msgspec.json.encode(result), type=RunResult) == result


text = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)
calls = st.builds(trio_agent.ToolCall, text, text, st.dictionaries(text, json_values, max_size=4))
blocks = st.one_of(st.builds(TextBlock, text), calls)
messages = st.one_of(
    st.builds(trio_agent.UserMessage, text, text),
    st.builds(AssistantMessage, text, st.lists(blocks, max_size=4).map(tuple)),
    st.builds(ToolResultMessage, text, text, text, text, st.booleans()),
)


@given(st.lists(messages, max_size=6).map(tuple))
def test_any_messages_round_trip(ms):
    data = msgspec.json.encode(ms)
    assert msgspec.json.decode(data, type=tuple[Message, ...]) == ms


def test_wire_structs_stay_out_of_the_cyclic_collector():
    # gc=False: a transcript of many thousand messages costs the collector nothing
    import gc

    from trio_agent import AssistantMessage, TextBlock, ToolCall, ToolResultMessage, UserMessage
    from trio_agent.events import MessageAccepted

    call = ToolCall("c1", "add", {"left": 1})
    objects = [
        call,
        TextBlock("t"),
        UserMessage("u1", "hi"),
        AssistantMessage("m1", (call,)),
        ToolResultMessage("tool-result-c1", "c1", "add", "2"),
        MessageAccepted(sequence=0, message=UserMessage("u1", "hi")),
    ]
    assert [gc.is_tracked(o) for o in objects] == [False] * len(objects)
