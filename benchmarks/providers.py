"""Chunks per second parsed by each provider adapter from a recorded stream of
10,000 deltas served over loopback, against the official SDK consuming the same
stream, in one run. Needs the SDKs: ``pip install -r benchmarks/requirements-peers.txt``.
Run: ``python benchmarks/providers.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from loopback import Loopback, Reply

from trio_agent import ModelRequest, UserMessage
from trio_agent.providers import AnthropicModel, OpenAIChatModel

DELTAS = 10_000


def openai_stream() -> bytes:
    head = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1764400000,
        "model": "gpt-4o-mini",
        "system_fingerprint": "fp_bench",
    }
    out = []
    for i in range(DELTAS):
        body = {
            **head,
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": f"w{i % 97} "},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ],
        }
        out.append("data: " + json.dumps(body, separators=(",", ":")) + "\n\n")
    done = {
        **head,
        "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}],
    }
    out.append("data: " + json.dumps(done, separators=(",", ":")) + "\n\n")
    out.append("data: [DONE]\n\n")
    return "".join(out).encode()


def anthropic_stream() -> bytes:
    def event(name: str, body: dict) -> str:
        return f"event: {name}\ndata: {json.dumps(body, separators=(',', ':'))}\n\n"

    out = [
        event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_bench",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "claude-sonnet-4-5",
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                },
            },
        ),
        event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
    ]
    for i in range(DELTAS):
        out.append(
            event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": f"w{i % 97} "},
                },
            )
        )
    out.append(event("content_block_stop", {"type": "content_block_stop", "index": 0}))
    out.append(
        event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": DELTAS},
            },
        )
    )
    out.append(event("message_stop", {"type": "message_stop"}))
    return "".join(out).encode()


REQUEST = ModelRequest(id="request-001", messages=(UserMessage("u", "go"),), tools=())


async def ours(model) -> int:
    count = 0
    async with model.stream(REQUEST) as stream:
        async for _ in stream:
            count += 1
        await stream.response()
    return count


async def openai_sdk(url: str) -> int:
    import openai

    client = openai.AsyncOpenAI(api_key="k", base_url=f"{url}/v1", max_retries=0)
    count = 0
    stream = await client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "go"}], stream=True
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            count += 1
    await client.close()
    return count


async def anthropic_sdk(url: str) -> int:
    import anthropic

    client = anthropic.AsyncAnthropic(api_key="k", base_url=url, max_retries=0)
    count = 0
    stream = await client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=100,
        messages=[{"role": "user", "content": "go"}],
        stream=True,
    )
    async for event in stream:
        if event.type == "content_block_delta":
            count += 1
    await client.close()
    return count


def one_chunk_per_event(body: bytes) -> bytes:
    """The body as the real APIs send it: chunked transfer, one chunk per event."""
    events = [e + b"\n\n" for e in body.split(b"\n\n") if e]
    return b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


CHUNKED_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
)


async def timed(server: Loopback, body: bytes, consume, chunked: bool = False) -> float:
    if chunked:
        server.replies.append(Reply(body=one_chunk_per_event(body), head=CHUNKED_HEAD, piece=16384))
    else:
        server.replies.append(Reply(body=body, piece=16384))
    start = time.perf_counter()
    count = await consume()
    elapsed = time.perf_counter() - start
    assert count == DELTAS, count
    return elapsed


async def main(rounds: int) -> None:
    server = Loopback()
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        print(f"{DELTAS} deltas served over loopback; medians of {rounds} rounds")
        for name, body, adapter, sdk in (
            (
                "OpenAI",
                openai_stream(),
                lambda: ours(OpenAIChatModel("m", api_key="k", base_url=f"{server.url}/v1")),
                lambda: openai_sdk(server.url),
            ),
            (
                "Anthropic",
                anthropic_stream(),
                lambda: ours(AnthropicModel("m", api_key="k", base_url=server.url)),
                lambda: anthropic_sdk(server.url),
            ),
        ):
            for chunked in (False, True):
                mine, theirs = [], []
                for _ in range(rounds):  # alternating, in one process
                    mine.append(await timed(server, body, adapter, chunked))
                    theirs.append(await timed(server, body, sdk, chunked))
                a, b = statistics.median(mine), statistics.median(theirs)
                framing = "chunked, one per event" if chunked else "close-delimited"
                print(
                    f"  {name:9} {framing:22} trio-agent: {DELTAS / a:9,.0f} chunks/s "
                    f"({a / DELTAS * 1e6:4.1f} us)   SDK: {DELTAS / b:8,.0f} chunks/s "
                    f"({b / DELTAS * 1e6:5.1f} us)   ratio {b / a:5.1f}x"
                )
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    trio.run(main, parser.parse_args().rounds)
