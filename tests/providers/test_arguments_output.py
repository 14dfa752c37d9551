"""The output tool's arguments on the wire (issue 18, DESIGN.md section 11.4): a
``final_result`` call's arguments are the typed answer, held to the output's
limits (``MAX_STEP_TEXT`` code points and entries, a byte cap of at least
``MAX_OUTPUT_BYTES``), never to the tool-argument limits that still refuse an
ordinary tool's. Over the real adapters against the loopback server."""

from __future__ import annotations

import json
from typing import Any

from loopback import Reply
from wire_builders import AnthropicWire, ChatWire, ResponsesWire, pieces, wires

from trio_agent import ModelRequest, ToolCall, ToolSpec, UserMessage
from trio_agent.limits import (
    MAX_ARGUMENT_CHARS,
    MAX_STEP_TEXT,
    OUTPUT_TOOL_NAME,
    REJECTED_ARGUMENTS,
)
from trio_agent.providers._arguments import (
    MAX_ARGUMENT_BYTES,
    MAX_OUTPUT_BYTES,
    CallParts,
    output_bytes,
    take_arguments,
    take_output,
    tool_call,
)

OBJECT: dict[str, Any] = {"type": "object", "properties": {"answer": {"type": "string"}}}
TOOLS = (
    ToolSpec(OUTPUT_TOOL_NAME, "Give the final answer.", OBJECT),
    ToolSpec("write_note", "Write a note.", OBJECT),
)
TOO_MANY_CHARACTERS = f"more than {MAX_ARGUMENT_CHARS} characters in keys and strings"


def arguments_of(size: int, char: str = "x") -> str:
    """JSON arguments ``{"answer": "..."}``, ``size`` characters long."""
    head = '{"answer": "'
    return head + char * (size - len(head) - 2) + '"}'


WIRES = wires(ChatWire, ResponsesWire, AnthropicWire)
# The Responses API repeats a call's whole arguments in one event (``.done``), so
# arguments past the SSE parser's 1 MiB event limit break its stream first.
STREAMED_WIRES = wires(ChatWire, AnthropicWire)


def request() -> ModelRequest:
    return ModelRequest(
        id="request-001",
        messages=(UserMessage("u1", "Answer, please."),),
        tools=TOOLS,
    )


async def streamed_call(loopback: Any, wire: Any, name: str, raw: str, **options: Any) -> Any:
    """The one call a streamed response carries: as it streamed, and in the response."""
    loopback.replies.append(Reply(body=wire.call("call-1", name, raw), piece=4096, chunked=True))
    async with wire.model(loopback, **options).stream(request()) as stream:
        chunks = [chunk async for chunk in stream]
        response = await stream.response()
    (call,) = [chunk for chunk in chunks if type(chunk) is ToolCall]
    assert response.content == (call,) and response.stop_reason == "tool_call"
    assert call.id == "call-1" and call.name == name
    return call


@WIRES
async def test_a_20000_character_final_result_arrives_whole(loopback, wire):
    raw = arguments_of(20_000)
    assert len(raw) == 20_000 > MAX_ARGUMENT_CHARS
    call = await streamed_call(loopback, wire, OUTPUT_TOOL_NAME, raw)
    assert call == ToolCall("call-1", OUTPUT_TOOL_NAME, json.loads(raw))
    assert REJECTED_ARGUMENTS not in call.arguments


@WIRES
async def test_an_ordinary_tool_with_the_same_arguments_is_still_rejected(loopback, wire):
    call = await streamed_call(loopback, wire, "write_note", arguments_of(20_000))
    assert call.arguments == {REJECTED_ARGUMENTS: f"{TOO_MANY_CHARACTERS} - at `$.answer`"}


@WIRES
async def test_a_final_result_past_max_argument_bytes_arrives_whole(loopback, wire):
    # 60,000 two-byte code points: within MAX_STEP_TEXT, but 120 KB, past the
    # default max_argument_bytes (64 KiB) that still refuses an ordinary tool
    raw = arguments_of(60_000, "é")
    assert MAX_ARGUMENT_BYTES < len(raw.encode()) < MAX_OUTPUT_BYTES
    call = await streamed_call(loopback, wire, OUTPUT_TOOL_NAME, raw)
    assert call.arguments == json.loads(raw)
    refused = await streamed_call(loopback, wire, "write_note", raw)
    size = len(raw.encode())
    assert refused.arguments == {
        REJECTED_ARGUMENTS: f"the arguments were {size:,} bytes, more than the 65,536 this "
        "model accepts (max_argument_bytes)"
    }


@WIRES
async def test_a_lowered_max_argument_bytes_does_not_cap_the_answer(loopback, wire):
    raw = arguments_of(20_000)
    call = await streamed_call(loopback, wire, OUTPUT_TOOL_NAME, raw, max_argument_bytes=1_000)
    assert call.arguments == json.loads(raw)
    refused = await streamed_call(loopback, wire, "write_note", raw, max_argument_bytes=1_000)
    assert "more than the 1,000 this model accepts" in refused.arguments[REJECTED_ARGUMENTS]


@WIRES
async def test_a_final_result_past_max_step_text_is_refused_by_the_output_limit(loopback, wire):
    raw = arguments_of(MAX_STEP_TEXT + 100)
    call = await streamed_call(loopback, wire, OUTPUT_TOOL_NAME, raw)
    assert call.arguments == {
        REJECTED_ARGUMENTS: f"more than {MAX_STEP_TEXT} characters in keys and strings "
        "- at `$.answer`"
    }


@STREAMED_WIRES
async def test_a_final_result_past_the_output_byte_cap_is_refused_for_its_size(loopback, wire):
    raw = arguments_of(MAX_OUTPUT_BYTES + 10)
    call = await streamed_call(loopback, wire, OUTPUT_TOOL_NAME, raw)
    assert call.arguments == {
        REJECTED_ARGUMENTS: f"the final answer's arguments were {len(raw):,} bytes, more than "
        f"the {MAX_OUTPUT_BYTES:,} an answer may have"
    }


@WIRES
async def test_bad_json_in_a_final_result_is_refused_as_for_a_tool(loopback, wire):
    call = await streamed_call(loopback, wire, OUTPUT_TOOL_NAME, '{"answer": ')
    reason = call.arguments[REJECTED_ARGUMENTS]
    assert reason.startswith("the arguments are not JSON: ")


def test_take_output_holds_an_answer_to_the_output_limits_not_the_tools():
    raw = arguments_of(20_000).encode()
    assert take_output(raw) == json.loads(raw)
    assert take_arguments(raw) == {REJECTED_ARGUMENTS: f"{TOO_MANY_CHARACTERS} - at `$.answer`"}
    assert tool_call("c", OUTPUT_TOOL_NAME, raw, MAX_ARGUMENT_BYTES).arguments == json.loads(raw)
    assert REJECTED_ARGUMENTS in tool_call("c", "write_note", raw, MAX_ARGUMENT_BYTES).arguments
    # entries: a tool takes 256, an answer MAX_STEP_TEXT
    many = json.dumps({"items": list(range(1_000))}).encode()
    assert take_output(many) == json.loads(many)
    assert REJECTED_ARGUMENTS in take_arguments(many)
    assert take_output(b"") == {}
    assert take_output(b"[1, 2]") == {
        REJECTED_ARGUMENTS: "the arguments are JSON but not an object: an array"
    }
    deep = b'{"a": ' + b"[" * 40 + b"]" * 40 + b"}"
    assert "nesting deeper than 32 containers" in take_output(deep)[REJECTED_ARGUMENTS]


def test_the_output_byte_cap_is_at_least_max_output_bytes():
    assert MAX_OUTPUT_BYTES == 16 * MAX_STEP_TEXT  # 4 bytes a code point, and room for JSON
    assert output_bytes(MAX_ARGUMENT_BYTES) == MAX_OUTPUT_BYTES
    assert output_bytes(1_000) == MAX_OUTPUT_BYTES
    assert output_bytes(4 * MAX_OUTPUT_BYTES) == 4 * MAX_OUTPUT_BYTES  # raised: it follows
    # MAX_STEP_TEXT code points of 4 bytes each (the key's one among them) fit
    widest = json.dumps({"a": "\U0001f600" * (MAX_STEP_TEXT - 1)}, ensure_ascii=False)
    assert len(widest.encode()) == 4 * MAX_STEP_TEXT - 4 + len('{"a": ""}') > 4 * MAX_STEP_TEXT
    assert take_output(widest.encode()) == json.loads(widest)
    # and so do they escaped, as \\uXXXX pairs (12 bytes a code point)
    escaped = json.dumps({"a": "\U0001f600" * (MAX_STEP_TEXT - 1)}).encode()
    assert len(escaped) > 12 * (MAX_STEP_TEXT - 1) and take_output(escaped) == json.loads(escaped)
    wider = json.dumps({"a": "\U0001f600" * MAX_STEP_TEXT}, ensure_ascii=False).encode()
    assert "more than 65536 characters" in take_output(wider)[REJECTED_ARGUMENTS]


def test_call_parts_keep_an_answer_a_tool_call_would_drop():
    piece = "x" * 10_000
    answer = CallParts(MAX_ARGUMENT_BYTES, "c", OUTPUT_TOOL_NAME)
    ordinary = CallParts(MAX_ARGUMENT_BYTES, "c", "write_note")
    for parts in (answer, ordinary):
        parts.add('{"answer": "')
        for _ in range(20):  # 200,000 characters: past 64 KiB, within 1 MiB
            parts.add(piece)
        parts.add('"}')
    assert not answer.over and ordinary.over and ordinary.parts == []
    assert REJECTED_ARGUMENTS in answer.call().arguments  # past MAX_STEP_TEXT, by the limit
    assert "characters in keys and strings" in answer.call().arguments[REJECTED_ARGUMENTS]
    assert "max_argument_bytes" in ordinary.call().arguments[REJECTED_ARGUMENTS]
    # a runaway answer is counted, not held, once past its own cap
    runaway = CallParts(MAX_ARGUMENT_BYTES, "c", OUTPUT_TOOL_NAME)
    for _ in range(120):
        runaway.add(piece)
    assert runaway.over and runaway.parts == [] and runaway.size == 1_200_000
    assert runaway.call().arguments == {
        REJECTED_ARGUMENTS: "the final answer's arguments were 1,200,000 bytes, more than "
        f"the {MAX_OUTPUT_BYTES:,} an answer may have"
    }


def test_call_parts_take_the_name_as_it_streams_in():
    # chat completions: the call's slot is made before its name is read
    parts = CallParts(MAX_ARGUMENT_BYTES)
    parts.name = OUTPUT_TOOL_NAME
    raw = arguments_of(60_000, "é")
    for piece in pieces(raw, 30):
        parts.add(piece)
    assert parts.call().arguments == json.loads(raw)
