"""Provider streams built by hand for the HTTP and adapter tests: SSE bodies of
Chat Completions chunks (``sse``, ``choice``, ``DONE``), an Anthropic hello,
``read``, which takes one stream whole, and ``openai_model``, an adapter on the
loopback server with a key (``SECRET_KEY``) that must never leak."""

from __future__ import annotations

import json

from trio_agent import ModelRequest, UserMessage
from trio_agent.providers import OpenAIChatModel

REQUEST = ModelRequest(id="request-001", messages=(UserMessage("u1", "hi"),), tools=())


async def read(model, request=REQUEST):
    async with model.stream(request) as stream:
        chunks = [c async for c in stream]
        return chunks, await stream.response()


def sse(*bodies) -> bytes:
    return b"".join(
        b"data: " + json.dumps(b, separators=(",", ":")).encode() + b"\n\n" for b in bodies
    )


def choice(delta, finish=None, index=0):
    return {"id": "c", "choices": [{"index": index, "delta": delta, "finish_reason": finish}]}


DONE = b"data: [DONE]\n\n"


def anthropic_hello() -> bytes:
    events = [
        {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 3}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
        {"type": "message_stop"},
    ]
    return b"".join(
        b"event: " + e["type"].encode() + b"\ndata: " + json.dumps(e).encode() + b"\n\n"
        for e in events
    )


SECRET_KEY = "sk-test-SECRET-0123456789"


def openai_model(loopback, **options):
    return OpenAIChatModel("m", api_key=SECRET_KEY, base_url=f"{loopback.url}/v1", **options)
