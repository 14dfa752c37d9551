"""The OpenAI Responses adapter against a real loopback HTTP server, on recorded
streams (tests/support/fixtures/wire, see SOURCES.md) and, where no recording exists,
streams built from the event shapes FORMATS.md section c documents."""

from __future__ import annotations

import json

import msgspec
import pytest
from loopback import Reply
from paths import WIRE

from trio_agent import (
    REJECTED_ARGUMENTS,
    Agent,
    AssistantMessage,
    DocumentBlock,
    ImageBlock,
    ModelError,
    ModelRequest,
    ModelResponseError,
    RedactedThinkingBlock,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolCall,
    ToolRegistry,
    ToolResultMessage,
    ToolSpec,
    TransientModelError,
    Usage,
    UserMessage,
    tool,
)
from trio_agent.engine._step import StepCheck
from trio_agent.providers import OpenAIResponsesModel

KEY = "sk-test-SECRET-0123456789"
SPEC = ToolSpec("get_capital", "The capital of a country.", {"type": "object", "properties": {}})
PNG = b"\x89PNG\r\n\x1a\nfake"
PDF = b"%PDF-1.4 fake"


def wire(name: str) -> bytes:
    return (WIRE / name).read_bytes()


def events(name: str) -> list[dict]:
    """The JSON data of each event of a recording."""
    return [
        json.loads(line[6:]) for line in wire(name).decode().splitlines() if line[:6] == "data: "
    ]


def sse(*payloads: dict) -> bytes:
    return b"".join(
        b"event: %s\ndata: %s\n\n" % (p["type"].encode(), json.dumps(p).encode()) for p in payloads
    )


def request(messages=None, system="Be brief.", tools=(SPEC,)) -> ModelRequest:
    return ModelRequest(
        id="request-001",
        messages=tuple(messages or (UserMessage("u1", "What is the capital of France?"),)),
        tools=tools,
        system=system,
    )


def model(loopback, **options) -> OpenAIResponsesModel:
    return OpenAIResponsesModel("gpt-5", api_key=KEY, base_url=f"{loopback.url}/v1", **options)


async def read(loopback, body: bytes, req=None, piece=0, **options):
    """The chunks and response of one stream, which must pass the step's checks."""
    loopback.replies.append(Reply(body=body, piece=piece, chunked=bool(piece)))
    async with model(loopback, **options).stream(req or request()) as stream:
        chunks = [chunk async for chunk in stream]
        response = await stream.response()
    check = StepCheck("request-001")
    for chunk in chunks:
        check.add_chunk(chunk)
    check.finish(response, set(), set())
    return chunks, response


def item_done(name: str, kind: str) -> dict:
    return next(
        e["item"]
        for e in events(name)
        if e["type"] == "response.output_item.done" and e["item"]["type"] == kind
    )


async def test_text_streams_and_the_request_is_the_documented_shape(loopback):
    chunks, response = await read(loopback, wire("responses_text.sse"), piece=61)
    assert "".join(c.text for c in chunks) == "The capital of France is Paris."
    assert all(type(c) is TextDelta for c in chunks) and len(chunks) > 1  # as it arrived
    assert response.content == (TextBlock("The capital of France is Paris."),)
    assert response.stop_reason == "stop"
    assert response.id == "request-001.resp_67e554a21aa88191b65876ac5e5bbe0406c52f0e511c76ed"
    assert response.usage == Usage(input_tokens=278, output_tokens=9)
    seen = loopback.requests[0]
    assert seen.path == "/v1/responses" and seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.json() == {
        "model": "gpt-5",
        "instructions": "Be brief.",
        "input": [{"role": "user", "content": "What is the capital of France?"}],
        "tools": [
            {
                "type": "function",
                "name": "get_capital",
                "description": "The capital of a country.",
                "parameters": {"type": "object", "properties": {}},
                "strict": False,
            }
        ],
        "stream": True,
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }


async def test_key_and_base_url_come_from_the_openai_variables(loopback, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", f"{loopback.url}/v1")
    env_model = OpenAIResponsesModel("gpt-5")
    assert env_model.base_url == f"{loopback.url}/v1" and KEY not in repr(env_model)
    loopback.replies.append(Reply(body=wire("responses_text.sse")))
    async with env_model.stream(request()) as stream:
        await stream.response()
    assert loopback.requests[0].headers["authorization"] == f"Bearer {KEY}"
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert OpenAIResponsesModel("gpt-5").base_url == "https://api.openai.com/v1"


async def test_deltas_of_one_read_are_merged_into_one_chunk(loopback):
    chunks, _ = await read(loopback, wire("responses_text.sse"))  # one read
    assert chunks == [TextDelta("The capital of France is Paris.")]


async def test_options_and_extra_body_reach_the_body(loopback):
    await read(
        loopback,
        wire("responses_text.sse"),
        max_output_tokens=333,
        reasoning_effort="low",
        reasoning_summary="auto",
        extra_body={"store": True, "parallel_tool_calls": False},
    )
    body = loopback.requests[0].json()
    assert body["max_output_tokens"] == 333
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert body["store"] is True and body["parallel_tool_calls"] is False


async def test_a_function_call_is_assembled_from_its_argument_deltas(loopback):
    chunks, response = await read(loopback, wire("responses_function_call.sse"), piece=50)
    call = ToolCall("call_kL0PCQV7M2WMoVX8V8OtYSAL", "get_capital", {"country": "France"})
    assert chunks == [call] and response.content == (call,)
    assert response.stop_reason == "tool_call"
    assert response.usage == Usage(input_tokens=255, output_tokens=16)

    # only the deltas: no arguments.done event, no arguments in output_item.done
    kept = [
        e
        for e in events("responses_function_call.sse")
        if e["type"] != "response.function_call_arguments.done"
    ]
    for e in kept:
        if e["type"] == "response.output_item.done":
            del e["item"]["arguments"]
    loopback.requests.clear()
    chunks, response = await read(loopback, sse(*kept))
    assert chunks == [call] and response.stop_reason == "tool_call"


async def test_bad_argument_json_is_a_refused_call(loopback):
    # issue 16: the call goes on with the reason as its arguments (and passes the step check)
    broken = wire("responses_function_call.sse").replace(b'"{\\"country', b'"{{\\"country')
    assert broken != wire("responses_function_call.sse")
    chunks, response = await read(loopback, broken)
    (call,) = chunks
    assert list(call.arguments) == [REJECTED_ARGUMENTS]
    assert call.arguments[REJECTED_ARGUMENTS].startswith("the arguments are not JSON: ")
    assert response.content == (call,) and response.stop_reason == "tool_call"


async def test_summary_deltas_stream_as_thinking_and_the_item_as_redacted(loopback):
    name = "responses_reasoning_summary_encrypted.sse"
    chunks, response = await read(loopback, wire(name), piece=700)
    summary = item_done(name, "reasoning")["summary"][0]["text"]
    thinking = [c for c in chunks if type(c) is ThinkingDelta]
    assert len(thinking) > 1 and "".join(c.thinking for c in thinking) == summary
    item = item_done(name, "reasoning")
    kept = RedactedThinkingBlock(
        msgspec.json.encode(
            {
                "type": "reasoning",
                "id": item["id"],
                "summary": item["summary"],
                "encrypted_content": item["encrypted_content"],
            }
        ).decode()
    )
    call = ToolCall("call_AB6AaRZ1FYZB2RwS6A5vbdqn", "calculator", {"a": 12, "b": 7, "op": "add"})
    assert chunks[len(thinking) :] == [kept, call]
    assert response.content == (ThinkingBlock(summary), kept, call)
    assert response.usage == Usage(input_tokens=134, output_tokens=28)

    _, whole = await read(loopback, wire(name))  # one read: one thinking chunk
    assert whole.content == response.content


async def test_summary_parts_are_kept_apart(loopback):
    # No recording has two summary parts: event shapes from FORMATS.md section c.
    delta = {"type": "response.reasoning_summary_text.delta", "item_id": "rs_1"}
    stream = sse(
        {"type": "response.created", "response": {"id": "resp_1"}},
        {**delta, "output_index": 0, "summary_index": 0, "delta": "**Plan**"},
        {**delta, "output_index": 0, "summary_index": 1, "delta": "**Check**"},
        {"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}},
    )
    _, response = await read(loopback, stream)
    assert response.content == (ThinkingBlock("**Plan**\n\n**Check**"),)


async def test_a_reasoning_item_goes_back_exactly_in_a_multi_step_run(loopback):
    """The done criterion: the encrypted reasoning item of step 1 is sent back, as
    output_item.done gave it, before its function call, in step 2's request."""
    name = "responses_reasoning_encrypted_function_call.sse"
    done = item_done(name, "reasoning")
    added = next(e["item"] for e in events(name) if e["type"] == "response.output_item.added")
    assert added["encrypted_content"] != done["encrypted_content"]  # .added is incomplete

    @tool
    async def final_result(result: int) -> str:
        """Report the result."""
        return f"got {result}"

    loopback.replies += [Reply(body=wire(name), piece=333), Reply(body=wire("responses_text.sse"))]
    agent = Agent(model=model(loopback), tools=ToolRegistry([final_result]), system="Be brief.")
    result = await agent.prompt(UserMessage("u1", "What is 6666?"))
    assert result.end.reason == "completed"
    assert result.final_text == "The capital of France is Paris."
    first = next(m for m in result.messages if type(m) is AssistantMessage)
    assert [type(b) for b in first.content] == [RedactedThinkingBlock, ToolCall]
    assert result.messages[-1].content == (TextBlock("The capital of France is Paris."),)

    second = loopback.requests[1].json()
    assert second["input"] == [
        {"role": "user", "content": "What is 6666?"},
        {
            "type": "reasoning",
            "id": done["id"],
            "summary": [],
            "encrypted_content": done["encrypted_content"],
        },
        {
            "type": "function_call",
            "call_id": "call_CWXgs68YprAjp6t0371hiPOI",
            "name": "final_result",
            "arguments": '{"result":6666}',
        },
        {
            "type": "function_call_output",
            "call_id": "call_CWXgs68YprAjp6t0371hiPOI",
            "output": "got 6666",
        },
    ]
    sent = second["input"][1]["encrypted_content"].encode()
    assert sent == done["encrypted_content"].encode()  # bytes-equal
    assert second["instructions"] == "Be brief." and second["store"] is False


async def test_usage_reports_cached_and_reasoning_tokens(loopback):
    _, response = await read(loopback, wire("responses_reasoning_encrypted_function_call.sse"))
    assert response.usage == Usage(input_tokens=53, output_tokens=469)  # 448 reasoning in it
    # cached_tokens is 0 in every recording: the same stream, with 40 of them
    cached = wire("responses_text.sse").replace(b'"cached_tokens":0', b'"cached_tokens":40')
    _, response = await read(loopback, cached)
    assert response.usage == Usage(input_tokens=278, output_tokens=9, cache_read_tokens=40)


# No recording has a refusal or an incomplete response (SOURCES.md): these
# streams are built from the event shapes FORMATS.md section c takes from the
# openai-python types.
MESSAGE = {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant"}


def message_added() -> dict:
    return {"type": "response.output_item.added", "output_index": 0, "item": {**MESSAGE}}


async def test_a_refusal_is_text_with_the_refusal_stop(loopback):
    part = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    stream = sse(
        {"type": "response.created", "response": {"id": "resp_r", "status": "in_progress"}},
        message_added(),
        {"type": "response.content_part.added", **part, "part": {"type": "refusal", "refusal": ""}},
        {"type": "response.refusal.delta", **part, "delta": "I can't "},
        {"type": "response.refusal.delta", **part, "delta": "help with that."},
        {"type": "response.refusal.done", **part, "refusal": "I can't help with that."},
        {"type": "response.completed", "response": {"id": "resp_r", "status": "completed"}},
    )
    chunks, response = await read(loopback, stream)
    assert chunks == [TextDelta("I can't help with that.")]
    assert response.content == (TextBlock("I can't help with that."),)
    assert response.stop_reason == "refusal"


def _cut_call_stream(reason: str, *, call_done: bool) -> bytes:
    call = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "get_capital"}
    args = {"item_id": "fc_1", "output_index": 1}
    payloads = [
        {"type": "response.created", "response": {"id": "resp_i", "status": "in_progress"}},
        message_added(),
        {
            "type": "response.output_text.delta",
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": "Let me look",
        },
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {**call, "status": "in_progress", "arguments": ""},
        },
        {"type": "response.function_call_arguments.delta", **args, "delta": '{"coun'},
    ]
    if call_done:
        payloads += [
            {"type": "response.function_call_arguments.delta", **args, "delta": 'try":"FR"}'},
            {
                "type": "response.output_item.done",
                "output_index": 1,
                "item": {**call, "status": "completed", "arguments": '{"country":"FR"}'},
            },
        ]
    usage = {"input_tokens": 10, "output_tokens": 5, "input_tokens_details": {"cached_tokens": 0}}
    payloads.append(
        {
            "type": "response.incomplete",
            "response": {
                "id": "resp_i",
                "status": "incomplete",
                "incomplete_details": {"reason": reason},
                "usage": usage,
            },
        }
    )
    return sse(*payloads)


@pytest.mark.parametrize(
    ("reason", "stop"), [("max_output_tokens", "length"), ("content_filter", "content_filter")]
)
@pytest.mark.parametrize("call_done", [False, True])
async def test_an_incomplete_response_stops_and_drops_its_calls(loopback, reason, stop, call_done):
    chunks, response = await read(loopback, _cut_call_stream(reason, call_done=call_done))
    assert chunks == [TextDelta("Let me look")]  # no call is ever streamed
    assert response.content == (TextBlock("Let me look"),)
    assert response.stop_reason == stop
    assert response.usage == Usage(input_tokens=10, output_tokens=5)


async def test_the_recorded_error_and_failed_events_raise_the_chat_adapters_error(loopback):
    with pytest.raises(ModelError, match="insufficient_quota") as info:
        await read(loopback, wire("responses_error_failed.sse"))
    assert type(info.value) is ModelError  # not transient: retrying cannot help
    assert "You exceeded your current quota" in str(info.value)


@pytest.mark.parametrize(
    "payload",
    [
        {"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": None},
        {"type": "error", "error": {"type": "server_error", "code": None, "message": "oops"}},
        {
            "type": "response.failed",
            "response": {
                "id": "resp_f",
                "status": "failed",
                "error": {"code": "server_error", "message": "The server had an error"},
            },
        },
    ],
)
async def test_rate_limit_and_server_errors_in_the_stream_are_transient(loopback, payload):
    stream = wire("responses_text.sse").split(b"event: response.output_text.delta")[0]
    with pytest.raises(TransientModelError):
        await read(loopback, stream + sse(payload))


@pytest.mark.parametrize(
    ("status", "headers", "retry_after"), [(429, {"retry-after": "7"}, 7.0), (500, {}, None)]
)
async def test_http_429_and_500_are_transient(loopback, status, headers, retry_after):
    loopback.replies.append(Reply(status, b'{"error":{"message":"busy"}}', headers=headers))
    with pytest.raises(TransientModelError, match=str(status)) as info:
        async with model(loopback).stream(request()) as stream:
            await stream.response()
    assert info.value.retry_after == retry_after


async def test_a_stream_cut_before_its_terminal_event_is_transient(loopback):
    body = wire("responses_text.sse")
    cut = body[: body.index(b"event: response.completed")]
    with pytest.raises(TransientModelError, match=r"ended before response\.completed"):
        await read(loopback, cut)


async def test_unknown_events_are_ignored_and_a_malformed_known_one_is_not(loopback):
    body = wire("responses_text.sse")
    odd = sse({"type": "response.web_search_call.searching", "delta": {"odd": 1}, "item": 5})
    _, response = await read(loopback, odd + body)
    assert response.content == (TextBlock("The capital of France is Paris."),)
    bad = sse({"type": "response.output_text.delta", "delta": 42})
    with pytest.raises(ModelResponseError, match=r"malformed response\.output_text\.delta"):
        await read(loopback, bad + body)


async def test_images_and_documents_reach_the_body_in_the_documented_form(loopback):
    call = ToolCall("call_1", "get_capital", {"country": "FR"})
    messages = [
        UserMessage(
            "u1",
            (
                TextBlock("Look:"),
                ImageBlock("image/png", data=PNG),
                ImageBlock("image/jpeg", url="https://example.com/cat.jpg"),
                DocumentBlock("application/pdf", data=PDF, title="report.pdf"),
                DocumentBlock("application/pdf", data=PDF),
                DocumentBlock("application/pdf", url="https://example.com/r.pdf"),
                DocumentBlock("text/plain", data="notes ✓".encode(), title="notes.txt"),
            ),
        ),
        AssistantMessage(
            "a1",
            (
                ThinkingBlock("hmm", "sig"),  # not sent: the summary is in its item
                RedactedThinkingBlock("EqkE-anthropic-data"),  # another provider's: not sent
                TextBlock("Calling."),
                call,
            ),
        ),
        ToolResultMessage(
            "r1",
            "call_1",
            "get_capital",
            (TextBlock("screenshot:"), ImageBlock("image/gif", data=b"GIF89a")),
        ),
    ]
    await read(loopback, wire("responses_text.sse"), req=request(messages))
    png = "data:image/png;base64,iVBORw0KGgpmYWtl"
    pdf = "data:application/pdf;base64,JVBERi0xLjQgZmFrZQ=="
    assert loopback.requests[0].json()["input"] == [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Look:"},
                {"type": "input_image", "image_url": png, "detail": "auto"},
                {
                    "type": "input_image",
                    "image_url": "https://example.com/cat.jpg",
                    "detail": "auto",
                },
                {"type": "input_file", "filename": "report.pdf", "file_data": pdf},
                {"type": "input_file", "filename": "document.pdf", "file_data": pdf},
                {"type": "input_file", "file_url": "https://example.com/r.pdf"},
                {
                    "type": "input_text",
                    "text": "notes.txt\nnotes ✓",
                },  # its title first, as chat does
            ],
        },
        {"role": "assistant", "content": "Calling."},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_capital",
            "arguments": '{"country":"FR"}',
        },
        {
            "type": "function_call_output",
            "call_id": "call_1",
            "output": [
                {"type": "input_text", "text": "screenshot:"},
                {
                    "type": "input_image",
                    "image_url": "data:image/gif;base64,R0lGODlh",
                    "detail": "auto",
                },
            ],
        },
    ]
