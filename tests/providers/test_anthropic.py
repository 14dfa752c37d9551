"""``AnthropicModel`` against a real loopback HTTP server: richer content (issue 15):
images and documents in requests, thinking streamed, kept and sent back with its
signature, redacted thinking, refusals, with the recorded wire fixtures of
tests/support/fixtures/wire/ (see SOURCES.md there); and the adapter's regressions
(its two block-delta decoders, in-stream errors, usage), each named after the
behaviour it pins."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from helpers import settle
from loopback import Reply, fixture
from recorded_wire import served, wire
from sse_bodies import SECRET_KEY
from sse_bodies import read as read_stream

from trio_agent import (
    Agent,
    AssistantMessage,
    Completed,
    DocumentBlock,
    ImageBlock,
    JsonlStore,
    ModelAuthenticationError,
    ModelChunk,
    ModelRequest,
    ModelResponseError,
    RedactedThinkingBlock,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolCall,
    ToolRegistry,
    ToolResult,
    ToolResultMessage,
    Usage,
    UserMessage,
    run_agent_loop,
    tool,
)
from trio_agent.engine._step import StepCheck
from trio_agent.limits import MAX_STEP_CHUNKS
from trio_agent.providers import AnthropicModel

KEY = "sk-test-SECRET-0123456789"
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01"
PDF = b"%PDF-1.4\n1 0 obj << >> endobj\n%%EOF\n"


def wire_events(name: str) -> list[dict[str, Any]]:
    """The JSON data of each event of a recorded stream, in order."""
    return [
        json.loads(line[len(b"data:") :])
        for line in wire(name).splitlines()
        if line.startswith(b"data:")
    ]


def wire_deltas(name: str, kind: str, field: str) -> list[str]:
    return [
        e["delta"][field]
        for e in wire_events(name)
        if e["type"] == "content_block_delta" and e["delta"]["type"] == kind
    ]


def model(loopback) -> AnthropicModel:
    return AnthropicModel("claude-sonnet-4-5", api_key=KEY, base_url=loopback.url)


def request(*messages) -> ModelRequest:
    return ModelRequest(
        id="request-001",
        messages=tuple(messages or (UserMessage("u1", "hi"),)),
        tools=(),
    )


async def read(m, req=None):
    """The chunks and the response of one stream, checked against each other by
    the step's own rule (``StepCheck``) as a run would."""
    req = req or request()
    check = StepCheck(req.id)
    async with m.stream(req) as stream:
        chunks = [check.add_chunk(chunk) async for chunk in stream]
        response = await stream.response()
    check.finish(response, set(), set())
    return chunks, response


def sent_messages(loopback, number: int = 0) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = loopback.requests[number].json()["messages"]
    return messages


@tool
async def get_weather(location: str) -> str:
    """The weather at a place."""
    return f"18 C in {location}"


@pytest.mark.parametrize("piece", [0, 61])
async def test_thinking_streams_as_thinking_deltas_and_keeps_its_exact_signature(loopback, piece):
    name = "anthropic_thinking_text.sse"
    thinking = "".join(wire_deltas(name, "thinking_delta", "thinking"))
    (signature,) = wire_deltas(name, "signature_delta", "signature")
    text = "".join(wire_deltas(name, "text_delta", "text"))
    loopback.replies.append(Reply(body=served(name), piece=piece))
    chunks, response = await read(model(loopback))
    thinks = [c for c in chunks if type(c) is ThinkingDelta]
    assert thinks and chunks[: len(thinks)] == thinks  # thinking first, then text
    assert all(type(c) is TextDelta for c in chunks[len(thinks) :])
    assert "".join(c.thinking for c in thinks) == thinking
    assert "".join(c.signature for c in thinks) == signature
    assert response.content == (ThinkingBlock(thinking, signature), TextBlock(text))
    assert response.content[0].signature.encode() == signature.encode()
    assert response.stop_reason == "stop"


async def test_long_thinking_stays_within_the_step_chunk_limit(loopback):
    # 3000 thinking deltas, more than a step may stream as chunks: they go out
    # merged per read, and the step (with its chunk limit) still completes.
    events = wire("anthropic_thinking_text.sse").split(b"\n\n")
    delta = next(e for e in events if b'"thinking_delta","thinking":" pedest"' in e)
    at = events.index(delta)
    body = b"\n\n".join(events[:at] + [delta] * 3000 + events[at + 1 :])
    assert 3000 > MAX_STEP_CHUNKS
    loopback.replies.append(Reply(body=body))
    run = run_agent_loop(
        messages=[UserMessage("u1", "hi")],
        model=model(loopback),
        tools=ToolRegistry([]),
        max_steps=1,
    )
    events_seen, result = await settle(run)
    assert type(result) is Completed, result
    thinking = result.messages[-1].content[0]
    assert type(thinking) is ThinkingBlock and thinking.thinking.count(" pedest") == 3000
    chunks = [e.chunk for e in events_seen if type(e) is ModelChunk]
    assert len(chunks) <= MAX_STEP_CHUNKS


async def test_redacted_thinking_arrives_whole_as_a_chunk_and_a_block(loopback):
    name = "anthropic_redacted_thinking.sse"
    datas = [
        e["content_block"]["data"]
        for e in wire_events(name)
        if e["type"] == "content_block_start" and e["content_block"]["type"] == "redacted_thinking"
    ]
    assert len(datas) == 2
    text = "".join(wire_deltas(name, "text_delta", "text"))
    loopback.replies.append(Reply(body=served(name), piece=50))
    chunks, response = await read(model(loopback))
    redacted = [RedactedThinkingBlock(d) for d in datas]
    assert chunks[:2] == redacted
    assert all(type(c) is TextDelta for c in chunks[2:])
    assert response.content == (*redacted, TextBlock(text))
    assert response.stop_reason == "stop"


async def test_server_tool_blocks_are_passed_over_and_thinking_and_text_kept(loopback):
    # a real web-search turn (pause_turn): server_tool_use blocks stream JSON
    # deltas too; they are not ours to run, and stream and response still agree
    name = "anthropic_pause_turn_web_search.sse"
    loopback.replies.append(Reply(body=served(name), piece=4096))
    chunks, response = await read(model(loopback))
    kinds = {type(b) for b in response.content}
    assert kinds == {ThinkingBlock, TextBlock} and response.stop_reason == "stop"
    assert response.content[0].thinking == "".join(wire_deltas(name, "thinking_delta", "thinking"))
    assert not any(type(c) is ToolCall for c in chunks)


async def test_a_delta_of_the_wrong_block_type_is_a_response_error(loopback):
    # a text delta sent to the thinking block: before, it streamed as text the
    # response then filed under no block
    body = wire("anthropic_thinking_text.sse").replace(
        b'"delta":{"type":"thinking_delta","thinking":"This"}',
        b'"delta":{"type":"text_delta","text":"This"}',
        1,
    )
    loopback.replies.append(Reply(body=body))
    with pytest.raises(ModelResponseError, match="text_delta for block 0, a thinking block"):
        await read(model(loopback))


async def test_a_refusal_is_the_refusal_stop_reason(loopback):
    loopback.replies.append(Reply(body=served("anthropic_refusal.sse")))
    chunks, response = await read(model(loopback))
    assert chunks == [] and response.content == ()
    assert response.stop_reason == "refusal"


async def test_a_refusal_after_thinking_and_text_keeps_them(loopback):
    name = "anthropic_thinking_refusal_synthetic.sse"
    thinking = "".join(wire_deltas(name, "thinking_delta", "thinking"))
    (signature,) = wire_deltas(name, "signature_delta", "signature")
    loopback.replies.append(Reply(body=served(name), piece=40))
    chunks, response = await read(model(loopback))
    assert chunks[-1] == TextDelta("Hi")
    assert response.content == (ThinkingBlock(thinking, signature), TextBlock("Hi"))
    assert response.stop_reason == "refusal"


async def test_a_refusal_drops_its_tool_calls(loopback):
    body = served("anthropic_tool_use.sse").replace(
        b'"stop_reason":"tool_use"', b'"stop_reason":"refusal"'
    )
    assert body != served("anthropic_tool_use.sse")
    loopback.replies.append(Reply(body=body))
    chunks, response = await read(model(loopback))
    assert chunks and all(type(c) is TextDelta for c in chunks)
    assert all(type(b) is TextBlock for b in response.content)
    assert response.stop_reason == "refusal"


async def test_a_run_ends_completed_with_the_refusal_stop_reason(loopback):
    loopback.replies.append(Reply(body=served("anthropic_thinking_refusal_synthetic.sse")))
    run = run_agent_loop(
        messages=[UserMessage("u1", "hi")],
        model=model(loopback),
        tools=ToolRegistry([]),
        max_steps=3,
    )
    _, result = await settle(run)
    assert type(result) is Completed
    assert result.stop_reason == "refusal" and result.final_text == "Hi"


async def test_a_tool_run_sends_the_thinking_back_with_its_exact_signature(loopback):
    first = "anthropic_thinking_tool_use.sse"
    thinking = "".join(wire_deltas(first, "thinking_delta", "thinking"))
    (signature,) = wire_deltas(first, "signature_delta", "signature")
    arguments = json.loads("".join(wire_deltas(first, "input_json_delta", "partial_json")))
    loopback.replies += [
        Reply(body=served(first), piece=57),
        Reply(body=served("anthropic_text.sse"), piece=57),
    ]
    run = run_agent_loop(
        messages=[UserMessage("u1", "Weather in Paris?")],
        model=model(loopback),
        tools=ToolRegistry([get_weather]),
        max_steps=3,
    )
    events, result = await settle(run)
    assert type(result) is Completed and result.stop_reason == "stop"
    assert result.final_text == "Hello there!"
    chunks = [e.chunk for e in events if type(e) is ModelChunk]
    assert any(type(c) is ThinkingDelta for c in chunks)
    assert len(loopback.requests) == 2
    call_id = "toolu_01NRLabsLyVHZPKxbKvkfSMn"
    second = sent_messages(loopback, 1)
    assert second == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": thinking, "signature": signature},
                {"type": "tool_use", "id": call_id, "name": "get_weather", "input": arguments},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": "18 C in Paris",
                    "is_error": False,
                }
            ],
        },
    ]
    # the signature's bytes, exactly as the server sent them in signature_delta
    raw = loopback.requests[1].body
    assert b'"signature":"' + signature.encode() + b'"' in raw
    assert raw.index(b'"type":"thinking"') < raw.index(b'"type":"tool_use"')


async def test_thinking_goes_back_in_order_and_foreign_reasoning_does_not(loopback):
    loopback.replies.append(Reply(body=served("anthropic_text.sse")))
    responses_item = '{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"}'
    history = (
        UserMessage("u1", "hi"),
        AssistantMessage(
            "a1",
            (
                ThinkingBlock("from DeepSeek", ""),  # no signature: not Anthropic's
                RedactedThinkingBlock(responses_item),  # a Responses item: OpenAI's
                RedactedThinkingBlock("EqkECkYIBxgCKkA8"),
                ThinkingBlock("", "sig-only"),  # display "omitted": the signature alone
                TextBlock("Hello."),
            ),
        ),
        UserMessage("u2", "and?"),
    )
    await read(model(loopback), request(*history))
    assert sent_messages(loopback)[1] == {
        "role": "assistant",
        "content": [
            {"type": "redacted_thinking", "data": "EqkECkYIBxgCKkA8"},
            {"type": "thinking", "thinking": "", "signature": "sig-only"},
            {"type": "text", "text": "Hello."},
        ],
    }


async def test_user_images_as_bytes_and_by_url_in_the_documented_form(loopback):
    loopback.replies.append(Reply(body=served("anthropic_text.sse")))
    content = (
        TextBlock("What is in these?"),
        ImageBlock("image/png", data=PNG),
        TextBlock(""),  # the API refuses empty text blocks
        ImageBlock("image/jpeg", url="https://example.com/cat.jpg"),
    )
    await read(model(loopback), request(UserMessage("u1", content)))
    assert sent_messages(loopback) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in these?"},
                {
                    "type": "image",
                    "source": {
                        "type": "base64",
                        "media_type": "image/png",
                        "data": base64.b64encode(PNG).decode(),
                    },
                },
                {
                    "type": "image",
                    "source": {"type": "url", "url": "https://example.com/cat.jpg"},
                },
            ],
        }
    ]


async def test_documents_pdf_as_base64_or_url_and_plain_text_as_text(loopback):
    loopback.replies.append(Reply(body=served("anthropic_text.sse")))
    content = (
        DocumentBlock("application/pdf", data=PDF, title="Q3 report"),
        DocumentBlock("application/pdf", url="https://example.com/report.pdf"),
        DocumentBlock("text/plain", data="plain text, café".encode(), title="notes.txt"),
        TextBlock("Summarise."),
    )
    await read(model(loopback), request(UserMessage("u1", content)))
    assert sent_messages(loopback)[0]["content"] == [
        {
            "type": "document",
            "title": "Q3 report",
            "source": {
                "type": "base64",
                "media_type": "application/pdf",
                "data": base64.b64encode(PDF).decode(),
            },
        },
        {"type": "document", "source": {"type": "url", "url": "https://example.com/report.pdf"}},
        {
            "type": "document",
            "title": "notes.txt",
            "source": {"type": "text", "media_type": "text/plain", "data": "plain text, café"},
        },
        {"type": "text", "text": "Summarise."},
    ]


@pytest.mark.parametrize(
    ("block", "note"),
    [
        (
            DocumentBlock("text/plain", data=b"\xff\xfe bad", title="t.txt"),
            "[text/plain document 't.txt' not attached: its bytes are not UTF-8 (invalid "
            "start byte at byte 0)]",
        ),
        (
            DocumentBlock("text/plain", url="https://example.com/a.txt"),
            "[text/plain document at https://example.com/a.txt not attached: Anthropic takes a "
            "text/plain document's text, not its URL]",
        ),
    ],
)
async def test_a_plain_text_document_it_cannot_send_goes_as_a_note(loopback, block, note):
    # An error would fail every later request too (the document stays in the
    # transcript): the request goes, and the model reads why it has no document.
    loopback.replies.append(Reply(body=served("anthropic_text.sse")))
    await read(model(loopback), request(UserMessage("u1", (block,))))
    (sent,) = sent_messages(loopback)[0]["content"]
    text = sent["text"] if sent["type"] == "text" else sent["source"]["data"]
    assert text == note  # as a text block, or as the document's own text


async def test_an_image_a_tool_returns_reaches_the_tool_result(loopback):
    @tool
    async def get_weather(location: str) -> ToolResult:
        """A weather map."""
        return ToolResult(
            (
                TextBlock("map attached"),
                ImageBlock("image/png", data=PNG),
                DocumentBlock("application/pdf", data=PDF, title="forecast"),
            )
        )

    loopback.replies += [
        Reply(body=served("anthropic_tool_use.sse")),
        Reply(body=served("anthropic_text.sse")),
    ]
    run = run_agent_loop(
        messages=[UserMessage("u1", "Weather map of Paris?")],
        model=model(loopback),
        tools=ToolRegistry([get_weather]),
        max_steps=3,
    )
    _, result = await settle(run)
    assert type(result) is Completed
    results = [m for m in result.messages if type(m) is ToolResultMessage]
    assert type(results[0].content) is tuple
    last = sent_messages(loopback, 1)[-1]
    assert last == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01NRLabsLyVHZPKxbKvkfSMn",
                "content": [
                    {"type": "text", "text": "map attached"},
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/png",
                            "data": base64.b64encode(PNG).decode(),
                        },
                    },
                    {
                        "type": "document",
                        "title": "forecast",
                        "source": {
                            "type": "base64",
                            "media_type": "application/pdf",
                            "data": base64.b64encode(PDF).decode(),
                        },
                    },
                ],
                "is_error": False,
            }
        ],
    }


async def test_a_tool_result_of_blocks_and_a_plain_one_side_by_side(loopback):
    loopback.replies.append(Reply(body=served("anthropic_text.sse")))
    calls = (ToolCall("t1", "look", {}), ToolCall("t2", "look", {}))
    history = (
        UserMessage("u1", "look twice"),
        AssistantMessage("a1", calls),
        ToolResultMessage("r1", "t1", "look", (ImageBlock("image/gif", url="https://e.x/a.gif"),)),
        ToolResultMessage("r2", "t2", "look", (TextBlock(""),), is_error=True),
    )
    await read(model(loopback), request(*history))
    assert sent_messages(loopback)[2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "t1",
                "content": [
                    {"type": "image", "source": {"type": "url", "url": "https://e.x/a.gif"}}
                ],
                "is_error": False,
            },
            {"type": "tool_result", "tool_use_id": "t2", "content": "", "is_error": True},
        ],
    }


async def test_the_thinking_survives_the_session_ledger_and_goes_back_after_resume(
    loopback, tmp_path
):
    first = "anthropic_thinking_tool_use.sse"
    (signature,) = wire_deltas(first, "signature_delta", "signature")
    loopback.replies += [
        Reply(body=served(first)),
        Reply(body=served("anthropic_text.sse")),
        Reply(body=served("anthropic_text.sse")),
    ]
    store = JsonlStore(tmp_path)
    agent = Agent(
        model=model(loopback), tools=ToolRegistry([get_weather]), store=store, session_id="s1"
    )
    result = await agent.prompt(UserMessage("u1", "Weather in Paris?"))
    assert result.end.reason == "completed"
    await agent.aclose()
    again = await Agent.resume(
        store, "s1", model=model(loopback), tools=ToolRegistry([get_weather])
    )
    await again.prompt(UserMessage("u2", "And tomorrow?"))
    await again.aclose()
    assistant = sent_messages(loopback, 2)[1]
    assert assistant["role"] == "assistant"
    assert assistant["content"][0]["type"] == "thinking"
    assert assistant["content"][0]["signature"] == signature
    assert assistant["content"][1]["type"] == "tool_use"


def _event(body: dict[str, Any]) -> str:
    return f"event: {body['type']}\ndata: {json.dumps(body)}\n\n"


def _interleaved(stop: str) -> bytes:
    """thinking, a call, thinking again, a second call (and text): interleaved
    thinking, as Claude 4 streams it with tools."""
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "msg_i", "usage": {"input_tokens": 5}}}
    ]
    blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = [
        (
            {"type": "thinking", "thinking": ""},
            [
                {"type": "thinking_delta", "thinking": "T1"},
                {"type": "signature_delta", "signature": "S1"},
            ],
        ),
        (
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
            [{"type": "input_json_delta", "partial_json": '{"location": "Paris"}'}],
        ),
        (
            {"type": "thinking", "thinking": ""},
            [
                {"type": "thinking_delta", "thinking": "T2"},
                {"type": "signature_delta", "signature": "S2"},
            ],
        ),
        (
            {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}},
            [{"type": "input_json_delta", "partial_json": '{"location": "Rome"}'}],
        ),
        ({"type": "text", "text": ""}, [{"type": "text_delta", "text": "Checking both."}]),
    ]
    for index, (start, deltas) in enumerate(blocks):
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 9}}
    )
    events.append({"type": "message_stop"})
    return "".join(_event(e) for e in events).encode()


@pytest.mark.parametrize("piece", [0, 7])
async def test_interleaved_thinking_goes_back_in_the_order_it_came(loopback, piece):
    # The review found calls moved last: thinking, thinking, call, call went back
    # for thinking, call, thinking, call, which Anthropic answers with a 400.
    loopback.replies += [
        Reply(body=_interleaved("tool_use"), piece=piece),
        Reply(body=served("anthropic_text.sse")),
    ]
    chunks, response = await read(model(loopback))
    kinds = [type(b).__name__ for b in response.content]
    assert kinds == ["ThinkingBlock", "ToolCall", "ThinkingBlock", "ToolCall", "TextBlock"]
    assert [type(c).__name__ for c in chunks][-4:] == [
        "ToolCall",
        "ThinkingDelta",
        "ToolCall",
        "TextDelta",
    ]
    answered = request(
        UserMessage("u1", "weather?"),
        AssistantMessage("message-1", response.content),
        *(
            ToolResultMessage(f"tool-result-{c.id}", c.id, c.name, "18 C")
            for c in response.content
            if type(c) is ToolCall
        ),
    )
    await read(model(loopback), answered)
    sent = sent_messages(loopback, 1)[1]["content"]
    assert [(b["type"], b.get("thinking") or b.get("id") or b.get("text")) for b in sent] == [
        ("thinking", "T1"),
        ("tool_use", "toolu_1"),
        ("thinking", "T2"),
        ("tool_use", "toolu_2"),
        ("text", "Checking both."),
    ]
    assert sent[0]["signature"] == "S1" and sent[2]["signature"] == "S2"


async def test_a_cut_interleaved_message_drops_its_calls_and_keeps_the_rest_in_order(loopback):
    loopback.replies.append(Reply(body=_interleaved("max_tokens")))
    chunks, response = await read(model(loopback))
    assert response.stop_reason == "length"
    assert response.content == (
        ThinkingBlock("T1", "S1"),
        ThinkingBlock("T2", "S2"),
        TextBlock("Checking both."),
    )
    assert not any(type(c) is ToolCall for c in chunks)


async def test_a_message_cut_by_the_context_window_is_a_length_stop(loopback):
    body = _interleaved("model_context_window_exceeded")
    loopback.replies.append(Reply(body=body))
    chunks, response = await read(model(loopback))
    assert response.stop_reason == "length"
    assert not any(type(c) is ToolCall for c in response.content)


def anthropic_model(loopback, **options):
    return AnthropicModel("m", api_key=SECRET_KEY, base_url=loopback.url, **options)


async def test_an_anthropic_in_stream_error_is_redacted(loopback):
    """An Anthropic in-stream error quoted the key; it is redacted."""
    body = (
        b'event: error\ndata: {"type":"error","error":{"type":"authentication_error",'
        b'"message":"bad key ' + SECRET_KEY.encode() + b'"}}\n\n'
    )
    loopback.replies.append(Reply(body=body))
    with pytest.raises(ModelAuthenticationError) as info:
        await read_stream(anthropic_model(loopback))
    assert SECRET_KEY not in str(info.value)


async def test_a_tool_use_block_that_never_ends_is_a_response_error(loopback):
    """A tool_use block that never ended was taken as a call with what arguments it had; it is a
    response error."""
    body = fixture("anthropic_tools.sse")
    last_stop = body.rindex(b"event: content_block_stop")
    body = body[:last_stop] + body[body.index(b"event: message_delta", last_stop) :]
    loopback.replies.append(Reply(body=body))
    with pytest.raises(ModelResponseError, match="never ended"):
        await read_stream(anthropic_model(loopback))


async def test_anthropic_message_delta_usage_counts(loopback):
    """The input and cache tokens that ``message_delta`` may carry were not counted."""
    body = fixture("anthropic_text.sse").replace(
        b'"usage":{"output_tokens":89}',
        b'"usage":{"input_tokens":500,"output_tokens":89,"cache_read_input_tokens":7}',
    )
    loopback.replies.append(Reply(body=body))
    _, response = await read_stream(anthropic_model(loopback))
    assert response.usage == Usage(input_tokens=500, output_tokens=89, cache_read_tokens=7)


async def test_anthropic_skips_empty_user_text(loopback):
    """An empty user text went out as an empty text block, which the API refuses; it is left out."""
    loopback.replies.append(Reply(body=fixture("anthropic_text.sse")))
    request = ModelRequest(
        id="request-001", messages=(UserMessage("u0", ""), UserMessage("u1", "hi")), tools=()
    )
    await read_stream(anthropic_model(loopback), request)
    assert loopback.requests[0].json()["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    ]


def _anthropic_sse(*events: dict) -> bytes:
    return b"".join(
        b"event: " + e["type"].encode() + b"\ndata: " + json.dumps(e).encode() + b"\n\n"
        for e in events
    )


_START = (
    {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 3}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking"}},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
)
_END = (
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_stop", "index": 1},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}},
    {"type": "message_stop"},
)


async def test_anthropic_deltas_the_fast_decoder_refuses_are_taken_as_before(loopback):
    """A delta the fast block decoder refuses falls back to the full decoder and is skipped there,
    and what is around it still streams in order."""
    # Block deltas go through a decoder that knows text, thinking, signature and
    # JSON deltas; any other delta (a null text) falls back to the full decoder and
    # is skipped there, and what is around it still streams in order. (Before issue
    # 15 thinking was skipped too; now it streams as ThinkingDelta, a read's
    # pieces merged, so the pieces are compared joined.)
    body = _anthropic_sse(
        *_START,
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "hm"},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "s"},
        },
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "He"}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": None}},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "llo"}},
        *_END,
    )
    loopback.replies.append(Reply(body=body, piece=40))
    chunks, response = await read_stream(anthropic_model(loopback))
    thinking = [c for c in chunks if type(c) is ThinkingDelta]
    assert "".join(c.thinking for c in thinking) == "hm"
    assert "".join(c.signature for c in thinking) == "s"
    assert [c for c in chunks if type(c) is TextDelta] == [TextDelta("He"), TextDelta("llo")]
    assert response.content == (ThinkingBlock("hm", "s"), TextBlock("Hello"))
    assert response.stop_reason == "stop"


@pytest.mark.parametrize(
    "delta",
    [
        {"type": "content_block_delta", "index": 7, "delta": {"type": "text_delta", "text": "x"}},
        {"type": "content_block_delta", "index": 7, "delta": {"type": "thinking_delta"}},
    ],
)
async def test_anthropic_a_delta_for_an_unknown_block_is_refused_on_both_paths(loopback, delta):
    """A delta for a block never started was taken on one decoding path; both paths refuse it."""
    loopback.replies.append(Reply(body=_anthropic_sse(*_START, delta, *_END)))
    with pytest.raises(ModelResponseError, match="unknown block 7"):
        await read_stream(anthropic_model(loopback))


async def test_anthropic_a_text_delta_of_the_wrong_type_does_not_decode(loopback):
    """A text delta whose text is not a string passed the fast decoder; it does not decode."""
    bad = {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": 5}}
    loopback.replies.append(Reply(body=_anthropic_sse(*_START, bad, *_END)))
    with pytest.raises(ModelResponseError, match="does not decode"):
        await read_stream(anthropic_model(loopback))


async def test_a_null_stop_reason_before_message_stop_is_a_clear_response_error(loopback):
    """A ``message_delta`` with ``stop_reason: null`` and then ``message_stop`` was
    reported as a stream that "ended before message_stop" (it had not), and retried as
    transient. Anthropic's stop_reason is null in message_start only: it says so."""
    null_stop = {"type": "message_delta", "delta": {"stop_reason": None}, "usage": {}}
    body = _anthropic_sse(*_START, *_END[:2], null_stop, {"type": "message_stop"})
    loopback.replies.append(Reply(body=body))
    with pytest.raises(ModelResponseError, match="without a stop reason") as info:
        await read_stream(anthropic_model(loopback))
    assert "before message_stop" not in str(info.value)
