"""The loopback server the documentation's ``openai`` blocks talk to.

One HTTP/1.1 server on 127.0.0.1 answers every model request with the text
``HELLO``, streamed the way each API streams it, chosen by the request's path:
Chat Completions (``.../chat/completions``), Responses (``.../responses``)
and Anthropic Messages (``.../messages``). Anything else gets a 404 with a
JSON error, as the real APIs answer. ``env()`` is the environment a block runs
with: ``OPENAI_BASE_URL`` and ``ANTHROPIC_BASE_URL`` point here, the keys are
dummies. Each connection serves one request and is closed (``connection:
close``), which a client's connection pool must take in its stride anyway.
"""

from __future__ import annotations

import json
from typing import Any

import trio
from wire_builders import pieces, sse

HELLO = "Hello from the loopback server."
KEY = "sk-docs-test"
USAGE_IN, USAGE_OUT = 12, 7


def chat_body() -> bytes:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {"id": "chatcmpl-docs", "model": "gpt-4o-mini", "choices": [choice]}

    usage = {
        "prompt_tokens": USAGE_IN,
        "completion_tokens": USAGE_OUT,
        "total_tokens": USAGE_IN + USAGE_OUT,
    }
    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in pieces(HELLO, 4)]
    events += [chunk({}, "stop"), {"id": "chatcmpl-docs", "choices": [], "usage": usage}]
    return sse(events) + b"data: [DONE]\n\n"


def responses_body() -> bytes:
    response = {"id": "resp_docs", "model": "gpt-4o-mini", "status": "in_progress"}
    usage = {
        "input_tokens": USAGE_IN,
        "output_tokens": USAGE_OUT,
        "total_tokens": USAGE_IN + USAGE_OUT,
    }
    events: list[dict[str, Any]] = [{"type": "response.created", "response": response}]
    events += [
        {"type": "response.output_text.delta", "output_index": 0, "delta": piece}
        for piece in pieces(HELLO, 4)
    ]
    done = {**response, "status": "completed", "usage": usage}
    events.append({"type": "response.completed", "response": done})
    return sse(events, named=True)


def anthropic_body() -> bytes:
    message = {"id": "msg_docs", "model": "claude-sonnet-4-5", "usage": {"input_tokens": USAGE_IN}}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ]
    events += [
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}
        for p in pieces(HELLO, 4)
    ]
    events += [
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": USAGE_OUT},
        },
        {"type": "message_stop"},
    ]
    return sse(events, named=True)


ANSWERS = {
    "/chat/completions": chat_body,
    "/responses": responses_body,
    "/messages": anthropic_body,
}
MAX_REQUEST = 8 * 1024 * 1024  # bytes: more is a runaway client, answered with a 413


class DocsServer:
    """``await nursery.start(server.serve)``; ``url`` once started; ``paths``: the
    path of every request answered, in order."""

    def __init__(self) -> None:
        self.port = 0
        self.paths: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {
            "OPENAI_BASE_URL": f"{self.url}/v1",
            "OPENAI_API_KEY": KEY,
            "ANTHROPIC_BASE_URL": self.url,
            "ANTHROPIC_API_KEY": KEY,
        }

    async def serve(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        await trio.serve_listeners(self._handle, listeners, task_status=task_status)

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            path = await _read_request(stream)
            if path is None:
                status, kind, body = 413, "application/json", b'{"error": "too large"}'
            else:
                self.paths.append(path)
                status, kind, body = _answer(path)
            head = (
                f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
                f"content-type: {kind}\r\ncontent-length: {len(body)}\r\n"
                "connection: close\r\n\r\n"
            )
            await stream.send_all(head.encode() + body)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ValueError):
            pass  # the client went away, or sent no HTTP: nothing to answer
        finally:
            await stream.aclose()


def _answer(path: str) -> tuple[int, str, bytes]:
    route = path.split("?", 1)[0]
    for suffix, body in ANSWERS.items():
        if route.endswith(suffix):
            return 200, "text/event-stream", body()
    error = {"error": {"type": "not_found", "message": f"no such endpoint: {route}"}}
    return 404, "application/json", json.dumps(error).encode()


async def _read_request(stream: trio.SocketStream) -> str | None:
    """The request's path, once its head and body are read (None: too large)."""
    data = b""
    while b"\r\n\r\n" not in data:
        part = await stream.receive_some(65536)
        if not part:
            raise ValueError("closed before a request")
        data += part
        if len(data) > MAX_REQUEST:
            return None
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    _, path, _ = lines[0].split(" ", 2)
    headers = dict(line.split(":", 1) for line in lines[1:] if ":" in line)
    length = int({k.strip().lower(): v for k, v in headers.items()}.get("content-length", "0"))
    if length > MAX_REQUEST:
        return None
    while len(body) < length:
        part = await stream.receive_some(65536)
        if not part:
            raise ValueError("closed mid-body")
        body += part
    return path
