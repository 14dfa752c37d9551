"""The adapters against servers that bend the wire format, on a real loopback
server (the review of 2026-12-07: providers, against a hostile server). Each
test is named after the bug it pins; its docstring says what went wrong before."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

from loopback import Reply
from sse_bodies import DONE, choice, openai_model, read, sse

from trio_agent import TextBlock, ToolCall
from trio_agent.providers import AnthropicModel
from trio_agent.providers.http._sse import MAX_EVENT_BYTES, SSEParser

KEY = "sk-test-SECRET-0123456789"


def call_delta(call_id: str, arguments: str, index: int = 0) -> dict[str, Any]:
    function = {"name": "echo", "arguments": arguments}
    return {"index": index, "id": call_id, "type": "function", "function": function}


async def test_parallel_calls_sent_at_one_index_are_not_merged(loopback):
    """Ollama (ollama#15457), LiteLLM's Responses bridge and others send every
    parallel call at index 0, each with its own id: the calls were merged into
    one, with the last id and the arguments run together (``{}{"x": 1}``, not
    JSON), and the first call was lost. A new id at an index starts a new call."""
    body = sse(
        choice({"tool_calls": [call_delta("call_a", '{"x": ')]}),
        choice({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        choice({"tool_calls": [call_delta("call_b", '{"y": 2}')]}),
        choice({"tool_calls": [call_delta("call_c", "{}", index=1)]}),
        choice({}, "tool_calls"),
    )
    loopback.replies.append(Reply(body=body + DONE))
    chunks, response = await read(openai_model(loopback))
    assert response.content == (
        ToolCall("call_a", "echo", {"x": 1}),
        ToolCall("call_b", "echo", {"y": 2}),
        ToolCall("call_c", "echo", {}),
    )
    assert chunks == list(response.content)


async def test_a_call_whose_id_changes_after_its_first_delta_stays_one_call(loopback):
    """Poolside sends a call's later deltas with another id, and no name: they
    are still that call's (a new call names its function)."""
    later = {"index": 0, "id": "call_other", "function": {"arguments": "1}"}}
    body = sse(
        choice({"tool_calls": [call_delta("call_a", '{"x": ')]}),
        choice({"tool_calls": [later]}),
        choice({}, "tool_calls"),
    )
    loopback.replies.append(Reply(body=body + DONE))
    _, response = await read(openai_model(loopback))
    assert response.content == (ToolCall("call_other", "echo", {"x": 1}),)


def events(*payloads: dict[str, Any]) -> bytes:
    return b"".join(
        b"event: %s\ndata: %s\n\n" % (p["type"].encode(), json.dumps(p).encode()) for p in payloads
    )


def tool_stream(start_input: Any, *pieces: str) -> bytes:
    """An Anthropic message of one tool call: its start's ``input``, then ``pieces``."""
    block = {"type": "tool_use", "id": "toolu_1", "name": "echo", "input": start_input}
    deltas = [
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": piece},
        }
        for piece in pieces
    ]
    return events(
        {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 3}}},
        {"type": "content_block_start", "index": 0, "content_block": block},
        *deltas,
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}},
        {"type": "message_stop"},
    )


async def test_anthropic_call_arguments_sent_whole_at_its_start_are_kept(loopback):
    """Some Anthropic-compatible servers (Ollama's) send a call's arguments whole in
    its ``content_block_start`` and no ``input_json_delta``: the start's input was
    ignored, and the tool ran with ``{}`` instead of the model's arguments."""
    loopback.replies.append(Reply(body=tool_stream({"path": "a.txt"})))
    model = AnthropicModel("m", api_key=KEY, base_url=loopback.url)
    _, response = await read(model)
    assert response.content == (ToolCall("toolu_1", "echo", {"path": "a.txt"}),)


async def test_anthropic_call_deltas_replace_the_arguments_at_its_start(loopback):
    loopback.replies.append(Reply(body=tool_stream({"path": "a"}, "", '{"path":', ' "b"}')))
    model = AnthropicModel("m", api_key=KEY, base_url=loopback.url)
    _, response = await read(model)
    assert response.content == (ToolCall("toolu_1", "echo", {"path": "b"}),)


async def test_an_empty_data_line_kept_alive_is_not_an_event(loopback):
    """Proxies send a bare ``data:`` line as a keep-alive: it was handed out as an
    event of no data, which does not decode, and the whole answer failed. The
    SSE rules dispatch no event for an empty data buffer."""
    keep_alive = b"data:\n\ndata: \n\n"
    body = keep_alive + sse(choice({"content": "Hi"})) + keep_alive + sse(choice({}, "stop"))
    loopback.replies.append(Reply(body=body + DONE))
    _, response = await read(openai_model(loopback))
    assert response.content == (TextBlock("Hi"),)


def test_an_event_sent_a_few_bytes_a_read_is_not_copied_at_every_read():
    """Each read was added to the event so far and the whole scanned again: a
    megabyte event sent 64 bytes a read cost about 20 s of CPU on the trio
    thread (16,000 copies of half a megabyte on average). A read that ends no
    event is kept as it is, and the event joined once, when it ends."""
    parser = SSEParser()
    assert parser.feed(b"data: " + b"a" * (MAX_EVENT_BYTES // 2)) == []
    tracemalloc.start()
    try:
        for _ in range(16):
            assert parser.feed(b"b" * 64) == []
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MAX_EVENT_BYTES // 8  # no copy of the event so far
    assert parser.feed(b"\n\n") == [b"a" * (MAX_EVENT_BYTES // 2) + b"b" * 1024]
