"""The API key never leaves an adapter in an error, in any form a server may echo it in
(issue 12, item 12), and no error carries more than a capped amount of server text.
Each test plants the key, in every form at once, into the bytes one error
constructor quotes, and is named after the leak it pins."""

from __future__ import annotations

import json

import msgspec
import pytest
from key_forms import assert_scrubbed, every_form, find_key, unicode_escaped
from loopback import Reply
from sse_bodies import DONE, SECRET_KEY, choice, openai_model, read, sse
from sse_bodies import read as read_stream

from trio_agent import (
    REJECTED_ARGUMENTS,
    Agent,
    JsonlStore,
    ModelAuthenticationError,
    ModelError,
    ModelRequestError,
    ModelResponseError,
    TransientModelError,
)
from trio_agent.providers import AnthropicModel, OpenAIChatModel
from trio_agent.providers._arguments import MAX_ARGUMENT_BYTES
from trio_agent.providers.http._secrets import MAX_ERROR_TEXT

SLASHED = "sk-test/abc+def=ghi"  # a "/" for JSON's "\/", "+" and "=" for percent-encoding
PLAIN = "sk-plain-0123456789abcdef"
KEYS = pytest.mark.parametrize("key", [SLASHED, PLAIN], ids=["slashed", "plain"])


def openai(loopback, key):
    return OpenAIChatModel("m", api_key=key, base_url=f"{loopback.url}/v1")


def anthropic(loopback, key):
    return AnthropicModel("m", api_key=key, base_url=loopback.url)


PROVIDERS = pytest.mark.parametrize("make", [openai, anthropic], ids=["openai", "anthropic"])


async def failure(model, kind: type[ModelError] = ModelError) -> ModelError:
    with pytest.raises(kind) as caught:
        await read(model)
    return caught.value


@KEYS
@PROVIDERS
async def test_a_key_in_a_bad_content_length_header_is_redacted(loopback, make, key):
    head = f"HTTP/1.1 200 OK\r\ncontent-length: {every_form(key)}\r\n\r\n".encode()
    loopback.replies.append(Reply(head=head, body=b"data: x\n\n"))
    error = await failure(make(loopback, key), ModelResponseError)
    assert "bad content-length" in str(error)
    assert_scrubbed(error, key)


@KEYS
@pytest.mark.parametrize("where", ["size", "extension"])
async def test_a_key_in_a_bad_chunk_size_line_is_redacted(loopback, key, where):
    line = every_form(key) if where == "size" else f"zz;{every_form(key)}"
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    loopback.replies.append(Reply(head=head, body=line.encode() + b"\r\ndata: x\r\n"))
    error = await failure(openai(loopback, key), ModelResponseError)
    assert "bad chunk size" in str(error)
    assert_scrubbed(error, key)


@KEYS
async def test_a_key_as_the_status_code_is_dropped_with_the_parse_error(loopback, key):
    # "not an HTTP response" replaces int()'s ValueError, which quotes the status
    head = f"HTTP/1.1 {every_form(key)} OK\r\n\r\n".encode()
    loopback.replies.append(Reply(head=head))
    error = await failure(anthropic(loopback, key), ModelResponseError)
    assert "not an HTTP response" in str(error)
    assert_scrubbed(error, key)


@KEYS
@PROVIDERS
@pytest.mark.parametrize(
    ("status", "kind"),
    [(401, ModelAuthenticationError), (400, ModelRequestError), (500, TransientModelError)],
)
async def test_a_key_echoed_escaped_in_an_error_body_is_redacted(loopback, make, key, status, kind):
    message = f"Incorrect API key provided: {every_form(key)}"
    body = json.dumps({"error": {"message": message, "param": key}}).encode()
    loopback.replies.append(Reply(status=status, body=body, headers={"retry-after": "7"}))
    error = await failure(make(loopback, key), kind)
    assert f"HTTP {status}" in str(error) and "[redacted]" in str(error)
    if kind is TransientModelError:
        assert error.retry_after == 7  # scrubbed in place: type and attributes kept
    assert_scrubbed(error, key)


@KEYS
@pytest.mark.parametrize("at", range(1800, 2040, 7))
async def test_a_huge_error_body_is_capped_and_a_key_at_the_cut_goes_whole(loopback, key, at):
    # a key in any form straddling the cap (or the end of what is read) must not
    # leave a half of it behind: redacted first, cut after
    body = b"x" * at + unicode_escaped(key).encode() + b" " + b"y" * 100_000
    loopback.replies.append(Reply(status=401, body=body))
    error = await failure(openai(loopback, key), ModelAuthenticationError)
    assert len(str(error)) <= MAX_ERROR_TEXT
    assert_scrubbed(error, key)


def openai_error(key: str) -> bytes:
    fields = {"message": every_form(key), "type": key, "code": every_form(key)}
    return sse({"error": fields})


def anthropic_error(key: str) -> bytes:
    data = {"type": "error", "error": {"type": every_form(key), "message": every_form(key)}}
    return b"event: error\ndata: " + json.dumps(data).encode() + b"\n\n"


@KEYS
@pytest.mark.parametrize(
    ("make", "stream"),
    [(openai, openai_error), (anthropic, anthropic_error)],
    ids=["openai", "anthropic"],
)
async def test_a_key_in_an_in_stream_error_event_is_redacted(loopback, make, stream, key):
    loopback.replies.append(Reply(body=stream(key), chunked=True))
    error = await failure(make(loopback, key))
    assert "stream error" in str(error)
    assert_scrubbed(error, key)


@KEYS
@PROVIDERS
async def test_a_huge_in_stream_error_is_capped(loopback, make, key):
    padding = "z" * 200_000 + every_form(key)
    if make is openai:
        body = sse({"error": {"message": padding, "type": "server_error"}})
    else:
        data = {"type": "error", "error": {"type": "api_error", "message": padding}}
        body = b"data: " + json.dumps(data).encode() + b"\n\n"
    loopback.replies.append(Reply(body=body))
    error = await failure(make(loopback, key), TransientModelError)
    assert str(error).endswith(" [cut]")
    assert_scrubbed(error, key)


@KEYS
@pytest.mark.parametrize("where", ["$.type", "$.delta.type"])
async def test_a_key_in_an_event_that_fails_validation_is_dropped_with_its_context(
    loopback, key, where
):
    # msgspec quotes a tag it does not know ("Invalid value 'sk-...'"); the fast
    # decoder's error was the hidden context of the error raised in its place
    if where == "$.type":
        event = {"type": every_form(key), "index": "not an int"}
    else:
        delta = {"type": every_form(key), "text": 5}
        event = {"type": "content_block_delta", "index": 0, "delta": delta}
    loopback.replies.append(Reply(body=b"data: " + json.dumps(event).encode() + b"\n\n"))
    error = await failure(anthropic(loopback, key), ModelResponseError)
    assert "does not decode" in str(error)
    assert_scrubbed(error, key)


def openai_call(call_id: str, arguments: str) -> bytes:
    call = {"index": 0, "id": call_id, "function": {"name": "f", "arguments": arguments}}
    return sse(choice({"tool_calls": [call]}), choice({}, "tool_calls")) + DONE


def anthropic_call(call_id: str, arguments: str) -> bytes:
    events = [
        {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 1}}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": call_id, "name": "f"},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": arguments},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}},
        {"type": "message_stop"},
    ]
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


@KEYS
@pytest.mark.parametrize(
    ("make", "stream"),
    [(openai, openai_call), (anthropic, anthropic_call)],
    ids=["openai", "anthropic"],
)
@pytest.mark.parametrize("arguments", ["not json", "too long", "past a limit"])
async def test_a_key_in_bad_tool_call_arguments_is_not_quoted_in_the_reason(
    loopback, make, stream, key, arguments
):
    # issue 16: bad arguments are no longer an error (which quoted the call's id):
    # the call goes on with a reason as its arguments, which quotes none of their
    # text (a limit's JSON path names keys, as the arguments would have)
    text, why = f"{{{every_form(key)}", "are not JSON"
    if arguments == "too long":
        text = "[" + f'"{every_form(key)}",' * (MAX_ARGUMENT_BYTES // 64) + '"x"]'
        why = "more than the 65,536"
    elif arguments == "past a limit":
        text = json.dumps({"a": [every_form(key)] * 2 + [0] * 300})
        why = "more than 256 object fields and array elements"
    loopback.replies.append(Reply(body=stream("call-1", text)))
    (call,), _ = await read(make(loopback, key))
    reason = call.arguments[REJECTED_ARGUMENTS]
    assert list(call.arguments) == [REJECTED_ARGUMENTS] and why in reason
    assert not find_key(reason, key), reason


@KEYS
async def test_a_key_in_a_bad_content_length_reaches_no_ledger_record_or_event(
    loopback, tmp_path, key
):
    head = f"HTTP/1.1 200 OK\r\ncontent-length: {every_form(key)}\r\n\r\n".encode()
    loopback.replies += [Reply(head=head, body=b"data: x\n\n")] * 2
    agent = Agent(model=openai(loopback, key), store=JsonlStore(tmp_path), session_id="s")
    result = await agent.prompt("hi")
    events = []
    async with agent.turn("again") as run:
        async for event in run:
            events.append(event)
    await agent.aclose()
    assert len(loopback.requests) == 2  # a response error: not retried
    assert result.end.code == "MODEL_ERROR" and "bad content-length" in result.end.detail
    texts = [repr(result), msgspec.json.encode(result, enc_hook=tuple).decode(), repr(events)]
    texts.append(msgspec.json.encode(events, enc_hook=tuple).decode())
    ledger = [p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()]
    assert ledger and b"bad content-length" in b"".join(ledger)
    texts += [data.decode("utf-8", "replace") for data in ledger]
    assert any("[redacted]" in text for text in texts[:2])
    for text in texts:
        assert not find_key(text, key), find_key(text, key)


async def test_a_key_straddling_the_error_body_cut_is_redacted_whole(loopback):
    """A key straddling the cut of a long error body was quoted in part; it is redacted whole."""
    padding = b"x" * (2000 - 10)
    loopback.replies.append(Reply(status=401, body=padding + SECRET_KEY.encode() + b" tail"))
    with pytest.raises(ModelAuthenticationError) as info:
        await read_stream(openai_model(loopback))
    assert SECRET_KEY[:5] not in str(info.value).replace("[redacted]", "")
