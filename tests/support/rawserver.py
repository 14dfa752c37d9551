"""A raw scripted HTTP server for transport tests: each connection is handed to a
handler the test writes (it reads requests and sends whatever bytes it likes),
over TLS or a wrapped transport if asked. Written for the review of issue 16."""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import trio


def sse(*bodies: Any) -> bytes:
    return b"".join(b"data: " + json.dumps(body).encode() + b"\n\n" for body in bodies)


def choice(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def hello_body(text: str = "Hello") -> bytes:
    """An OpenAI chat stream saying ``text``."""
    return sse(choice({"content": text}), choice({}, "stop")) + b"data: [DONE]\n\n"


def sized(
    body: bytes, extra: str = "", status: str = "200 OK", kind: str = "text/event-stream"
) -> bytes:
    """A whole response with a ``content-length`` (``extra``: more header lines)."""
    head = f"HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {len(body)}\r\n"
    return f"{head}{extra}\r\n".encode() + body


def chunked(body: bytes, extra: str = "") -> bytes:
    """A whole 200 response, ``body`` as one chunk."""
    head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
    return f"{head}{extra}\r\n".encode() + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


Handler = Callable[["Raw", Any, int], Awaitable[None]]


class Raw:
    """The server: ``handler(raw, stream, index)`` serves the ``index``-th
    connection; ``wrap`` may replace the accepted stream (a TLS stream over a
    transport the test controls)."""

    def __init__(
        self,
        handler: Handler,
        tls: ssl.SSLContext | None = None,
        wrap: Callable[[Any], Awaitable[Any]] | None = None,
    ) -> None:
        self.handler = handler
        self.tls = tls
        self.wrap = wrap
        self.port = 0
        self.connections = 0
        self.open = 0
        self.requests: list[bytes] = []

    @property
    def url(self) -> str:
        return f"https://localhost:{self.port}" if self.tls else f"http://127.0.0.1:{self.port}"

    async def read_request(self, stream: Any, buf: bytes = b"") -> tuple[bytes, bytes] | None:
        """One request (head and body) and the bytes read after it; None at the end."""
        while b"\r\n\r\n" not in buf:
            data = await stream.receive_some(65536)
            if not data:
                return None
            buf += data
        head, _, rest = buf.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            data = await stream.receive_some(65536)
            if not data:
                return None
            rest += data
        self.requests.append(head)
        return head + b"\r\n\r\n" + rest[:length], rest[length:]

    async def _handle(self, stream: Any) -> None:
        index = self.connections
        self.connections += 1
        self.open += 1
        try:
            if self.wrap is not None:
                stream = await self.wrap(stream)
            await self.handler(self, stream, index)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            self.open -= 1
            with trio.CancelScope(shield=True), contextlib.suppress(Exception):
                await stream.aclose()

    async def serve(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners: list[Any] = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        if self.tls is not None:
            listeners = [trio.SSLListener(ln, self.tls, https_compatible=True) for ln in listeners]
        await trio.serve_listeners(self._handle, listeners, task_status=task_status)
