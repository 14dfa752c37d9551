"""Deltas per second parsed by each provider adapter from a recorded stream of
10,000 deltas served over loopback, against the official SDK consuming the same
stream, in one run. Needs the SDKs: ``pip install -r benchmarks/requirements-peers.txt``.
Run: ``python benchmarks/providers.py``.

The HTTP server runs in a separate process (this script with ``--serve``),
so that only the clients' work is timed: both clients run in this process,
one after the other, on the same recorded bytes (checked by digest).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from functools import partial

import trio
from _figures import add_json_option, json_output, record

from trio_agent import ModelRequest, UserMessage
from trio_agent.providers import AnthropicModel, OpenAIChatModel

DELTAS = 10_000
PIECE = 16384  # the server writes the body in pieces of this many bytes


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


def one_chunk_per_event(body: bytes) -> bytes:
    """The body as the real APIs send it: chunked transfer, one chunk per event."""
    events = [e + b"\n\n" for e in body.split(b"\n\n") if e]
    return b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


def replies() -> dict[str, bytes]:
    """Each route's whole response (head and body), built the same way in both
    processes; the server serves these bytes, the driver checks their digest."""
    close_head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    chunked_head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    )
    out = {}
    for provider, body in (("openai", openai_stream()), ("anthropic", anthropic_stream())):
        out[f"/{provider}/close"] = close_head + body
        out[f"/{provider}/chunked"] = chunked_head + one_chunk_per_event(body)
    return out


def digest(routes: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for route in sorted(routes):
        h.update(route.encode() + b"\0" + routes[route])
    return h.hexdigest()


# --- the server (its own process) -----------------------------------------------


def _answer(conn: socket.socket, routes: dict[str, bytes]) -> None:
    with conn:
        data = b""
        while b"\r\n\r\n" not in data:
            part = conn.recv(65536)
            if not part:
                return
            data += part
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        path = lines[0].split(" ")[1]
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        while len(body) < length:
            part = conn.recv(65536)
            if not part:
                return
            body += part
        route = "/".join(path.split("/")[:3])
        reply = routes.get(
            route, b"HTTP/1.1 404 X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        )
        try:
            for start in range(0, len(reply), PIECE):
                conn.sendall(reply[start : start + PIECE])
        except OSError:
            pass


def serve() -> None:
    """Answer every request with its route's recorded response, until stdin closes."""
    routes = replies()
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    print(listener.getsockname()[1], digest(routes), flush=True)

    def accept() -> None:  # one connection at a time: the clients take turns
        while True:
            conn, _ = listener.accept()
            _answer(conn, routes)

    threading.Thread(target=accept, daemon=True).start()
    sys.stdin.read()  # the driver closes our stdin when it is done


# --- the clients (this process) ---------------------------------------------------


EXPECTED_TEXT = "".join(f"w{i % 97} " for i in range(DELTAS))


async def ours(model) -> int:
    """The deltas read, once the text they carried is checked whole (past 768
    chunks an adapter hands out merged deltas, so chunks are fewer than deltas)."""
    texts = []
    async with model.stream(REQUEST) as stream:
        async for chunk in stream:
            texts.append(chunk.text)
        await stream.response()
    assert "".join(texts) == EXPECTED_TEXT
    return DELTAS


async def openai_sdk(client) -> int:
    count = 0
    stream = await client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "go"}], stream=True
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            count += 1
    return count


async def anthropic_sdk(client) -> int:
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
    return count


def make_openai_sdk(url: str):
    import openai

    return openai.AsyncOpenAI(api_key="k", base_url=f"{url}/v1", max_retries=0)


def make_anthropic_sdk(url: str):
    import anthropic

    return anthropic.AsyncAnthropic(api_key="k", base_url=url, max_retries=0)


async def timed(make, consume, close=None) -> float:
    """Seconds from sending the request to the end of the stream (the client is
    made before and closed after: only the request and its stream are timed)."""
    client = make()
    start = time.perf_counter()
    count = await consume(client)
    elapsed = time.perf_counter() - start
    if close is not None:
        await close(client)
    assert count == DELTAS, count
    return elapsed


async def measure(url: str, rounds: int) -> None:
    print(
        f"{DELTAS} deltas served over loopback by a separate process; "
        f"medians of {rounds} rounds (after one warm-up each)"
    )

    async def aclose(client) -> None:
        await client.close()

    for name, provider, adapter, make_sdk, sdk in (
        (
            "OpenAI",
            "openai",
            lambda base: OpenAIChatModel("m", api_key="k", base_url=f"{base}/v1"),
            make_openai_sdk,
            openai_sdk,
        ),
        (
            "Anthropic",
            "anthropic",
            lambda base: AnthropicModel("m", api_key="k", base_url=base),
            make_anthropic_sdk,
            anthropic_sdk,
        ),
    ):
        for framing in ("close", "chunked"):
            base = f"{url}/{provider}/{framing}"
            mine_args = (partial(adapter, base), ours)
            theirs_args = (partial(make_sdk, base), sdk, aclose)
            await timed(*mine_args)  # warm-up: imports, first-call caches
            await timed(*theirs_args)
            mine, theirs = [], []
            for _ in range(rounds):  # alternating, in one process
                mine.append(await timed(*mine_args))
                theirs.append(await timed(*theirs_args))
            a, b = statistics.median(mine), statistics.median(theirs)
            label = "chunked, one per event" if framing == "chunked" else "close-delimited"
            record(
                **{
                    f"{provider}_{framing}": {
                        "us_per_chunk": a / DELTAS * 1e6,
                        "sdk_us_per_chunk": b / DELTAS * 1e6,
                        "ratio": b / a,
                    }
                }
            )
            print(
                f"  {name:9} {label:22} trio-agent: {DELTAS / a:9,.0f} deltas/s "
                f"({a / DELTAS * 1e6:4.2f} us)   SDK: {DELTAS / b:8,.0f} deltas/s "
                f"({b / DELTAS * 1e6:5.1f} us)   ratio {b / a:5.1f}x",
                flush=True,
            )


@contextlib.contextmanager
def served() -> Iterator[str]:
    """The server process (this script with ``--serve``), checked to serve the
    bytes this process would build; its URL while the block runs."""
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert server.stdout is not None
        port, digested = server.stdout.readline().split()
        if digested.decode() != digest(replies()):
            raise SystemExit("the server process serves other bytes than this one would")
        yield f"http://127.0.0.1:{int(port)}"
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def main(rounds: int) -> None:
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # the SDK on the model name
    with served() as url:
        trio.run(measure, url, rounds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    add_json_option(parser)
    args = parser.parse_args()
    if args.serve:
        serve()
    else:
        with json_output(args.json):
            main(args.rounds)
