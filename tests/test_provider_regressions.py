"""Regression tests for the provider adapters, each named after the bug it pins."""

from __future__ import annotations

import json

import msgspec
import pytest
import trio
from loopback import Reply, fixture
from sse_bodies import DONE, choice, read, sse

from trio_agent import (
    Agent,
    JsonlStore,
    ModelAuthenticationError,
    ModelError,
    ModelRequest,
    ModelResponseError,
    RetryPolicy,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolCall,
    TransientModelError,
    Usage,
    UserMessage,
)
from trio_agent.providers import AnthropicModel, OpenAIChatModel
from trio_agent.providers.http._http import HTTPStream

KEY = "sk-test-SECRET-0123456789"
REQUEST = ModelRequest(id="request-001", messages=(UserMessage("u1", "hi"),), tools=())


def openai(loopback, **options):
    return OpenAIChatModel("m", api_key=KEY, base_url=f"{loopback.url}/v1", **options)


def anthropic(loopback, **options):
    return AnthropicModel("m", api_key=KEY, base_url=loopback.url, **options)


async def test_an_in_stream_error_is_typed_redacted_and_not_retried(loopback, tmp_path):
    error = {
        "error": {
            "message": f"Incorrect API key provided: {KEY}",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    loopback.replies += [Reply(body=sse(error))] * 3
    with pytest.raises(ModelAuthenticationError) as info:
        await read(openai(loopback))
    assert KEY not in str(info.value)
    agent = Agent(model=openai(loopback), store=JsonlStore(tmp_path), session_id="s1")
    events = []
    async with agent.turn(UserMessage("u1", "hi")) as run:
        async for event in run:
            events.append(event)
    await agent.aclose()
    assert len(loopback.requests) == 2  # not retried
    assert KEY not in msgspec.json.encode(events).decode()
    assert KEY.encode() not in JsonlStore(tmp_path).path("s1").read_bytes()


async def test_an_anthropic_in_stream_error_is_redacted(loopback):
    body = (
        b'event: error\ndata: {"type":"error","error":{"type":"authentication_error",'
        b'"message":"bad key ' + KEY.encode() + b'"}}\n\n'
    )
    loopback.replies.append(Reply(body=body))
    with pytest.raises(ModelAuthenticationError) as info:
        await read(anthropic(loopback))
    assert KEY not in str(info.value)


async def test_a_key_straddling_the_error_body_cut_is_redacted_whole(loopback):
    padding = b"x" * (2000 - 10)
    loopback.replies.append(Reply(status=401, body=padding + KEY.encode() + b" tail"))
    with pytest.raises(ModelAuthenticationError) as info:
        await read(openai(loopback))
    assert KEY[:5] not in str(info.value).replace("[redacted]", "")


async def test_tool_calls_finish_without_calls_is_a_plain_stop(loopback):
    loopback.replies.append(
        Reply(body=sse(choice({"content": "hi"}), choice({}, "tool_calls")) + DONE)
    )
    _, response = await read(openai(loopback))
    assert response.stop_reason == "stop" and response.content == (TextBlock("hi"),)


async def test_a_refusal_is_kept_as_text_and_never_sent_back_as_null(loopback):
    loopback.replies += [
        Reply(body=sse(choice({"refusal": "I can't help with that."}), choice({}, "stop")) + DONE),
        Reply(body=fixture("openai_text.sse")),
    ]
    agent = Agent(model=openai(loopback))
    first = await agent.prompt(UserMessage("u1", "something bad"))
    assert first.final_text == "I can't help with that."
    await agent.prompt(UserMessage("u2", "ok then"))
    sent = loopback.requests[1].json()["messages"][1]
    assert sent == {"role": "assistant", "content": "I can't help with that."}


async def test_only_the_first_choice_is_the_answer(loopback):
    loopback.replies.append(
        Reply(
            body=sse(
                choice({"content": "Hello"}, index=0),
                choice({"content": "Bonjour"}, index=1),
                choice({}, "stop", index=0),
                choice({}, "length", index=1),
            )
            + DONE
        )
    )
    chunks, response = await read(openai(loopback, extra_body={"n": 2}))
    assert chunks == [TextDelta("Hello")] and response.stop_reason == "stop"


async def test_tool_call_deltas_without_an_index_are_told_apart_by_id(loopback):
    loopback.replies.append(
        Reply(
            body=sse(
                choice(
                    {"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": '{"x":'}}]}
                ),
                choice({"tool_calls": [{"function": {"arguments": "1}"}}]}),
                choice(
                    {"tool_calls": [{"id": "b", "function": {"name": "g", "arguments": '{"y":2}'}}]}
                ),
                choice({}, "tool_calls"),
            )
            + DONE
        )
    )
    _, response = await read(openai(loopback))
    assert response.content == (ToolCall("a", "f", {"x": 1}), ToolCall("b", "g", {"y": 2}))


async def test_a_stream_that_ends_cleanly_after_its_finish_reason_without_done_is_whole(
    loopback,
):
    # Issue 16: llama.cpp before PR 9459, TGI before PR 2221, ik_llama.cpp and
    # mistral.rs send no [DONE]; this was retried as transient, then failed.
    for chunked in (False, True):
        body = sse(choice({"content": "hi"}), choice({}, "stop"))
        loopback.replies.append(Reply(body=body, chunked=chunked, piece=40))
        chunks, response = await read(openai(loopback))
        assert response.content == (TextBlock("hi"),) and response.stop_reason == "stop"


async def test_a_chunked_stream_cut_after_its_finish_reason_is_still_an_error(loopback):
    # the connection closes without the last chunk: a cut, not an end
    body = sse(choice({"content": "hi"}), choice({}, "stop"))
    loopback.replies.append(Reply(body=body, chunked=True, end_chunked=False, piece=40))
    with pytest.raises(TransientModelError):
        await read(openai(loopback))


async def test_a_stream_that_ends_before_its_finish_reason_is_not_complete(loopback):
    loopback.replies.append(Reply(body=sse(choice({"content": "hi"}))))
    with pytest.raises(TransientModelError, match="before a finish reason"):
        await read(openai(loopback))


async def test_max_completion_tokens_is_sent_for_newer_models(loopback):
    loopback.replies.append(Reply(body=fixture("openai_text.sse")))
    await read(openai(loopback, max_completion_tokens=300))
    assert loopback.requests[0].json()["max_completion_tokens"] == 300


async def test_a_tool_use_block_that_never_ends_is_a_response_error(loopback):
    body = fixture("anthropic_tools.sse")
    last_stop = body.rindex(b"event: content_block_stop")
    body = body[:last_stop] + body[body.index(b"event: message_delta", last_stop) :]
    loopback.replies.append(Reply(body=body))
    with pytest.raises(ModelResponseError, match="never ended"):
        await read(anthropic(loopback))


async def test_anthropic_message_delta_usage_counts(loopback):
    body = fixture("anthropic_text.sse").replace(
        b'"usage":{"output_tokens":89}',
        b'"usage":{"input_tokens":500,"output_tokens":89,"cache_read_input_tokens":7}',
    )
    loopback.replies.append(Reply(body=body))
    _, response = await read(anthropic(loopback))
    assert response.usage == Usage(input_tokens=500, output_tokens=89, cache_read_tokens=7)


async def test_anthropic_skips_empty_user_text(loopback):
    loopback.replies.append(Reply(body=fixture("anthropic_text.sse")))
    request = ModelRequest(
        id="request-001", messages=(UserMessage("u0", ""), UserMessage("u1", "hi")), tools=()
    )
    await read(anthropic(loopback), request)
    assert loopback.requests[0].json()["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    ]


# ------------------------------------------------------------------- HTTP


@pytest.mark.parametrize("piece", [37, 200, 100000])
async def test_a_chunked_body_one_chunk_per_event(loopback, piece):
    loopback.replies.append(Reply(body=fixture("openai_tools.sse"), chunked=True, piece=piece))
    _, response = await read(openai(loopback))
    assert response.stop_reason == "tool_call" and len(response.content) == 2


async def test_a_chunked_body_cut_before_its_last_chunk_is_transient(loopback):
    body = fixture("openai_text.sse")
    loopback.replies.append(Reply(body=body[: len(body) // 2], chunked=True, end_chunked=False))
    with pytest.raises(TransientModelError):
        await read(openai(loopback))


async def test_a_sized_body_cut_short_is_transient(loopback):
    body = fixture("openai_text.sse")
    loopback.replies.append(Reply(body=body[:300], headers={"content-length": str(len(body))}))
    with pytest.raises(TransientModelError, match="early"):
        await read(openai(loopback))


async def test_an_interim_103_response_is_skipped(loopback):
    head = (
        b"HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n"
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    )
    loopback.replies.append(Reply(body=fixture("openai_text.sse"), head=head))
    _, response = await read(openai(loopback))
    assert response.content == (TextBlock("The sum is 42."),)


async def test_a_bad_content_length_is_a_response_error(loopback):
    head = b"HTTP/1.1 200 OK\r\ncontent-length: lots\r\n\r\n"
    loopback.replies.append(Reply(body=b"data: x\n\n", head=head))
    with pytest.raises(ModelResponseError, match="content-length"):
        await read(openai(loopback))


def test_an_ipv6_host_header_keeps_its_brackets():
    stream = HTTPStream("http://[::1]:8080/v1/x", {}, b"", "P", None, 1.0, 1.0)
    assert b"host: [::1]:8080\r\n" in stream._head


async def test_retries_work_through_an_adapter(loopback, autojump_clock):
    loopback.replies += [Reply(status=503, body=b"{}"), Reply(body=fixture("openai_text.sse"))]
    agent = Agent(model=openai(loopback), retry=RetryPolicy(jitter=0))
    result = await agent.prompt(UserMessage("u1", "hi"))
    assert result.final_text == "The sum is 42." and len(loopback.requests) == 2


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
    chunks, response = await read(anthropic(loopback))
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
    loopback.replies.append(Reply(body=_anthropic_sse(*_START, delta, *_END)))
    with pytest.raises(ModelResponseError, match="unknown block 7"):
        await read(anthropic(loopback))


async def test_anthropic_a_text_delta_of_the_wrong_type_does_not_decode(loopback):
    bad = {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": 5}}
    loopback.replies.append(Reply(body=_anthropic_sse(*_START, bad, *_END)))
    with pytest.raises(ModelResponseError, match="does not decode"):
        await read(anthropic(loopback))


async def test_https_to_a_private_ca_with_its_context_and_one_shared_default_context():
    # https is tested for real: a throwaway CA (trustme), the loopback server behind
    # TLS, and the adapter trusting that CA through ssl_context=. Without it, the
    # system's store refuses the certificate (a clear error, the key redacted).

    from helpers import tls_contexts
    from loopback import Loopback

    from trio_agent.providers.http import _connection as _http

    server_context, client_context = tls_contexts()
    server = Loopback(tls=server_context)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        server.replies.append(Reply(body=fixture("anthropic_text.sse")))
        model = AnthropicModel("m", api_key=KEY, base_url=server.url, ssl_context=client_context)
        chunks, response = await read(model)
        assert response.content == (TextBlock("The sum is 42."),)
        assert server.requests[0].headers["x-api-key"] == KEY
        untrusting = AnthropicModel("m", api_key=KEY, base_url=server.url)
        with pytest.raises(ModelError, match="CERTIFICATE_VERIFY_FAILED") as caught:
            await read(untrusting)
        assert not isinstance(caught.value, TransientModelError)  # a retry cannot help
        assert KEY not in str(caught.value)
        first = _http._default_tls
        assert first is not None and first is await _http.default_tls_context()
        nursery.cancel_scope.cancel()
    with pytest.raises(TypeError, match="ssl_context"):
        AnthropicModel("m", api_key=KEY, ssl_context="yes")
