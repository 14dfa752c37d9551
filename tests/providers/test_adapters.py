"""The provider adapters against a real loopback HTTP server speaking the documented
SSE wire formats (issue 6): text and tool calls, the transcript mapped, typed
errors, cancellation, the key, a full agent run and retries through each adapter,
and a tool result's text blocks on every wire (issue 32)."""

from __future__ import annotations

import json

import msgspec
import pytest
import trio
from helpers import add
from loopback import Reply, fixture
from sse_bodies import openai_model
from waiting import WAIT
from wire_builders import ChatWire, ResponsesWire, wires

from trio_agent import (
    REJECTED_ARGUMENTS,
    Agent,
    AssistantMessage,
    ContextOverflowError,
    ImageBlock,
    JsonlStore,
    ModelAuthenticationError,
    ModelRequest,
    ModelRequestError,
    RetryPolicy,
    TextBlock,
    TextDelta,
    ToolCall,
    ToolRegistry,
    ToolResultMessage,
    ToolSpec,
    TransientModelError,
    Usage,
    UserMessage,
)
from trio_agent.providers import AnthropicModel, OpenAIChatModel

KEY = "sk-test-SECRET-0123456789"
SPEC = ToolSpec("add", "Add two integers.", {"type": "object", "properties": {}})


def request(messages=None, system="Be brief.", tools=(SPEC,)) -> ModelRequest:
    return ModelRequest(
        id="request-001",
        messages=tuple(messages or (UserMessage("u1", "What is 20 + 22?"),)),
        tools=tools,
        system=system,
    )


def openai(loopback, **options):
    return OpenAIChatModel("gpt-4o-mini", api_key=KEY, base_url=f"{loopback.url}/v1", **options)


def anthropic(loopback, **options):
    return AnthropicModel("claude-sonnet-4-5", api_key=KEY, base_url=loopback.url, **options)


async def read(model, req=None):
    async with model.stream(req or request()) as stream:
        chunks = [chunk async for chunk in stream]
        return chunks, await stream.response()


async def test_openai_streams_text_with_usage(loopback):
    loopback.replies.append(Reply(body=fixture("openai_text.sse"), piece=97))
    chunks, response = await read(openai(loopback))
    assert chunks == [TextDelta(t) for t in ["The", " sum", " is", " 42", "."]]
    assert response.content == (TextBlock("The sum is 42."),)
    assert response.stop_reason == "stop" and response.request_id == "request-001"
    assert response.usage == Usage(input_tokens=82, output_tokens=17, cache_read_tokens=64)
    seen = loopback.requests[0]
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    body = seen.json()
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 20 + 22?"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "add",
                "description": "Add two integers.",
                "parameters": SPEC.parameters,
            },
        }
    ]


@pytest.mark.parametrize("name", ["openai_tools.sse", "openai_tools_interleaved.sse"])
async def test_openai_assembles_tool_calls_split_across_deltas(loopback, name):
    loopback.replies.append(Reply(body=fixture(name), piece=50))
    chunks, response = await read(openai(loopback))
    expected = [
        ToolCall("call_Ab12", "add", {"left": 20, "right": 22}),
        ToolCall("call_Cd34", "get_weather", {"city": "Hanoi", "units": "metric"}),
    ]
    assert chunks == expected
    assert response.content == tuple(expected) and response.stop_reason == "tool_call"


async def test_openai_maps_the_whole_transcript(loopback):
    loopback.replies.append(Reply(body=fixture("openai_text.sse")))
    the_call = ToolCall("call_1", "add", {"left": 1, "right": 2})
    history = [
        UserMessage("u1", "1+2?"),
        AssistantMessage("a1", (TextBlock("Let me add."), the_call)),
        ToolResultMessage("r1", "call_1", "add", '{"sum":3}'),
        UserMessage("u2", "thanks"),
    ]
    await read(openai(loopback), request(history, system=""))
    assert loopback.requests[0].json()["messages"] == [
        {"role": "user", "content": "1+2?"},
        {
            "role": "assistant",
            "content": "Let me add.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"left":1,"right":2}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"sum":3}'},
        {"role": "user", "content": "thanks"},
    ]


async def test_openai_a_call_cut_by_a_length_stop_never_becomes_a_tool_call(loopback):
    loopback.replies.append(Reply(body=fixture("openai_length_cut_call.sse")))
    chunks, response = await read(openai(loopback))
    assert not any(isinstance(c, ToolCall) for c in chunks)
    assert response.stop_reason == "length" and response.content == ()


async def test_openai_a_stream_cut_before_its_end_is_transient(loopback):
    loopback.replies.append(Reply(body=fixture("openai_no_finish.sse")))
    with pytest.raises(TransientModelError, match="before a finish reason"):
        await read(openai(loopback))


async def test_anthropic_streams_text_and_tool_calls_with_usage(loopback):
    loopback.replies.append(Reply(body=fixture("anthropic_tools.sse"), piece=64))
    chunks, response = await read(anthropic(loopback))
    calls = [
        ToolCall("toolu_01A09q90qw90lq917835lq9", "add", {"left": 20, "right": 22}),
        ToolCall("toolu_01B1", "get_weather", {"city": "Hanoi", "units": "metric"}),
    ]
    assert chunks == [TextDelta("Let me"), TextDelta(" check."), *calls]
    assert response.content == (TextBlock("Let me check."), *calls)
    assert response.stop_reason == "tool_call"
    assert response.id == "request-001.msg_01XFDUDYJgAACzvnptvVoYEL"
    assert response.usage == Usage(input_tokens=472, output_tokens=89, cache_read_tokens=128)
    seen = loopback.requests[0]
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == KEY and seen.headers["anthropic-version"] == "2023-06-01"
    body = seen.json()
    assert body["system"] == "Be brief." and body["max_tokens"] == 4096 and body["stream"]
    assert body["tools"] == [
        {"name": "add", "description": "Add two integers.", "input_schema": SPEC.parameters}
    ]


async def test_anthropic_maps_tool_results_into_alternating_turns(loopback):
    loopback.replies.append(Reply(body=fixture("anthropic_text.sse")))
    calls = (ToolCall("t1", "add", {"left": 1}), ToolCall("t2", "add", {"left": 2}))
    history = [
        UserMessage("u1", "sums"),
        AssistantMessage("a1", (TextBlock(""), *calls)),
        ToolResultMessage("r1", "t1", "add", "1"),
        ToolResultMessage("r2", "t2", "add", "oops", is_error=True),
        UserMessage("u2", "and?"),
    ]
    _, response = await read(anthropic(loopback), request(history))
    assert response.content == (TextBlock("The sum is 42."),)
    assert loopback.requests[0].json()["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "sums"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t1", "name": "add", "input": {"left": 1}},
                {"type": "tool_use", "id": "t2", "name": "add", "input": {"left": 2}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "1", "is_error": False},
                {"type": "tool_result", "tool_use_id": "t2", "content": "oops", "is_error": True},
                {"type": "text", "text": "and?"},
            ],
        },
    ]


async def test_anthropic_a_call_cut_by_max_tokens_never_becomes_a_tool_call(loopback):
    loopback.replies.append(Reply(body=fixture("anthropic_max_tokens_cut_call.sse")))
    chunks, response = await read(anthropic(loopback))
    assert chunks == [TextDelta("Let me"), TextDelta(" check.")]
    assert response.stop_reason == "length" and response.content == (TextBlock("Let me check."),)


async def test_anthropic_an_overloaded_error_in_the_stream_is_transient(loopback):
    loopback.replies.append(Reply(body=fixture("anthropic_overloaded.sse")))
    with pytest.raises(TransientModelError, match="overloaded_error"):
        await read(anthropic(loopback))


@pytest.mark.parametrize("make", [openai, anthropic])
@pytest.mark.parametrize(
    ("status", "body", "headers", "error", "retry_after"),
    [
        (
            429,
            b'{"error":{"type":"rate_limit_error"}}',
            {"retry-after": "7"},
            TransientModelError,
            7.0,
        ),
        (500, b'{"error":"boom"}', {}, TransientModelError, None),
        (503, b"{}", {}, TransientModelError, None),
        (
            529,
            b'{"type":"error","error":{"type":"overloaded_error"}}',
            {},
            TransientModelError,
            None,
        ),
        (401, b'{"error":{"message":"Incorrect API key"}}', {}, ModelAuthenticationError, None),
        (
            400,
            b'{"error":{"code":"context_length_exceeded","message":"maximum context length"}}',
            {},
            ContextOverflowError,
            None,
        ),
        (
            400,
            b'{"type":"error","error":{"message":"prompt is too long: 210000 tokens"}}',
            {},
            ContextOverflowError,
            None,
        ),
        (400, b'{"error":{"message":"messages: field required"}}', {}, ModelRequestError, None),
    ],
)
async def test_http_errors_map_to_typed_errors(
    loopback, make, status, body, headers, error, retry_after
):
    loopback.replies.append(Reply(status=status, body=body, headers=headers))
    with pytest.raises(error) as info:
        await read(make(loopback))
    assert str(status) in str(info.value)
    if retry_after is not None:
        assert info.value.retry_after == retry_after


@pytest.mark.parametrize("make", [openai, anthropic])
async def test_a_refused_connection_is_transient(make):
    model = make(type("L", (), {"url": "http://127.0.0.1:9"})())
    with pytest.raises(TransientModelError):
        await read(model)


@pytest.mark.parametrize("make", [openai, anthropic])
async def test_bad_argument_json_and_oversized_arguments_become_refused_calls(loopback, make):
    # issue 16: no longer a broken stream; the call goes on, its arguments
    # replaced by the reason, and the next call of the message is intact
    name = "openai_tools.sse" if make is openai else "anthropic_tools.sse"
    # the first piece of the first call's arguments, made invalid JSON
    first_piece = b'"{\\"le"' if make is openai else b'"partial_json":"{\\"lef"'
    bad_piece = first_piece.replace(b"{", b"{{", 1)
    broken = fixture(name).replace(first_piece, bad_piece, 1)
    assert broken != fixture(name)
    big = fixture(name).replace(first_piece, first_piece[:-1] + b"x" * 70000 + b'"', 1)
    loopback.replies += [Reply(body=broken), Reply(body=big)]
    for why in ("the arguments are not JSON: ", "more than the 65,536 this model accepts"):
        chunks, response = await read(make(loopback))
        first, second = calls = [c for c in chunks if type(c) is ToolCall]
        assert first.name == "add" and list(first.arguments) == [REJECTED_ARGUMENTS]
        assert why in first.arguments[REJECTED_ARGUMENTS]
        assert second.name == "get_weather" and REJECTED_ARGUMENTS not in second.arguments
        assert [b for b in response.content if type(b) is ToolCall] == calls
        assert response.stop_reason == "tool_call"


@pytest.mark.parametrize("make", [openai, anthropic])
async def test_cancellation_mid_stream_closes_the_connection(loopback, make):
    name = "openai_text.sse" if make is openai else "anthropic_text.sse"
    body = fixture(name)
    cut = body.index(b"\n\n", body.index(b" sum")) + 2  # after a few text events
    loopback.replies.append(Reply(body=body, hang_after=cut))
    seen = []
    with trio.CancelScope() as scope:
        async with make(loopback).stream(request()) as stream:
            async for chunk in stream:
                seen.append(chunk)
                # cancelled once the stream has been silent half a second: it hung
                scope.deadline = trio.current_time() + 0.5
    assert scope.cancelled_caught and seen  # it streamed, then hung
    with trio.fail_after(WAIT):
        await loopback.client_closed.wait()  # the server saw the connection close


async def test_the_key_comes_from_the_environment_and_never_leaks(loopback, monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", f"{loopback.url}/v1")
    model = OpenAIChatModel("gpt-4o-mini")
    assert KEY not in repr(model)
    echo = b'{"error":{"message":"Incorrect API key provided: ' + KEY.encode() + b'"}}'
    loopback.replies += [Reply(status=401, body=echo), Reply(body=fixture("openai_text.sse"))]
    with pytest.raises(ModelAuthenticationError) as info:
        await read(model)
    assert KEY not in str(info.value) and "[redacted]" in str(info.value)
    store = JsonlStore(tmp_path)
    agent = Agent(model=model, store=store, session_id="s1")
    events = []
    async with agent.turn(UserMessage("u1", "hi")) as run:
        async for event in run:
            events.append(event)
    await agent.aclose()
    assert KEY not in msgspec.json.encode(events, enc_hook=tuple).decode()
    assert KEY.encode() not in store.path("s1").read_bytes()


def test_a_missing_key_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ValueError, match="ANTHROPIC_API_KEY"):
        AnthropicModel("claude-sonnet-4-5")


@pytest.mark.parametrize("make", [openai, anthropic])
async def test_a_full_agent_run_through_each_adapter(loopback, make):
    if make is openai:
        first = fixture("openai_tools.sse")
        second = fixture("openai_text.sse")
    else:
        first, second = fixture("anthropic_tools.sse"), fixture("anthropic_text.sse")

    from trio_agent import tool

    @tool
    async def get_weather(city: str, units: str) -> str:
        """Weather."""
        return f"31 C in {city}"

    loopback.replies += [Reply(body=first, piece=33), Reply(body=second, piece=33)]
    agent = Agent(model=make(loopback), tools=ToolRegistry([add, get_weather]), system="Be brief.")
    result = await agent.prompt(UserMessage("u1", "What is 20 + 22, and the weather?"))
    assert result.end.reason == "completed" and result.final_text == "The sum is 42."
    contents = [m.content for m in result.messages if isinstance(m, ToolResultMessage)]
    assert contents == ['{"sum":42}', "31 C in Hanoi"]
    second_request = loopback.requests[1].json()
    dumped = json.dumps(second_request)
    assert '{\\"sum\\":42}' in dumped or '{"sum":42}' in dumped
    assert len(loopback.requests) == 2


PNG = b"\x89PNG\r\n\x1a\n"


@wires()
async def test_a_tool_results_text_blocks_stay_apart_on_every_wire(loopback, wire):
    """issue 32: the chat adapter joined a tool result's text blocks with nothing
    between them ("...you requested:The image above..."). Each block now goes
    on a line of its own, images and documents noted in their place; the
    Responses and Anthropic wires send each block as a part of its own."""
    loopback.replies.append(Reply(body=wire.text("ok")))
    blocks = (
        TextBlock("The screenshot you requested:"),
        ImageBlock("image/png", PNG),
        TextBlock(""),
        TextBlock("The image above shows the page."),
    )
    history = request(
        [
            UserMessage("u1", "Look."),
            AssistantMessage("a1", (ToolCall("call_1", "shot", {}),)),
            ToolResultMessage("r1", "call_1", "shot", blocks),
        ]
    )
    await read(wire.model(loopback), history)
    body = loopback.requests[0].json()
    if wire is ChatWire:
        (tool,) = [m for m in body["messages"] if m["role"] == "tool"]
        assert tool["content"] == (
            "The screenshot you requested:\n"
            "[image 1 of this result follows in the next user message]\n"
            "The image above shows the page."
        )
    elif wire is ResponsesWire:
        (item,) = [i for i in body["input"] if i.get("type") == "function_call_output"]
        assert [(p["type"], p.get("text")) for p in item["output"]] == [
            ("input_text", "The screenshot you requested:"),
            ("input_image", None),
            ("input_text", ""),
            ("input_text", "The image above shows the page."),
        ]
    else:
        (result,) = [
            b
            for m in body["messages"]
            if m["role"] == "user" and type(m["content"]) is list
            for b in m["content"]
            if b["type"] == "tool_result"
        ]
        assert [(p["type"], p.get("text")) for p in result["content"]] == [
            ("text", "The screenshot you requested:"),
            ("image", None),
            ("text", "The image above shows the page."),
        ]


async def test_retries_work_through_an_adapter(loopback, autojump_clock):
    """A session's retry of a 503 goes through a real adapter: the request is sent again and
    answered."""
    loopback.replies += [Reply(status=503, body=b"{}"), Reply(body=fixture("openai_text.sse"))]
    agent = Agent(model=openai_model(loopback), retry=RetryPolicy(jitter=0))
    result = await agent.prompt(UserMessage("u1", "hi"))
    assert result.final_text == "The sum is 42." and len(loopback.requests) == 2
