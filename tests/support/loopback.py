"""A real HTTP/1.1 server on 127.0.0.1 for the provider tests.

Each connection reads one request, records it, and answers with the next
scripted ``Reply``: a status, headers, and a body sent in pieces (with an
optional pause between them, or a hang until the client closes). It notes
when a client closed the connection early.
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

FIXTURES = Path(__file__).parent / "fixtures" / "providers"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    piece: int = 0  # send the body in pieces of this many bytes (0: whole)
    pause: float = 0.0  # between pieces
    hang_after: int | None = None  # bytes after which to stop and wait for the client
    chunked: bool = False  # send each piece as one HTTP chunk (as the real APIs do)
    end_chunked: bool = True  # send the final zero-size chunk
    head: bytes | None = None  # a raw response head, instead of the usual one
    drop: bool = False  # read the request, then close the connection without answering
    close: bool = False  # keep-alive server: close the connection after this reply


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Loopback:
    """With ``keep_alive``, a connection serves request after request (bodies sized
    or chunked, no ``connection: close``); ``connections`` counts the connections
    accepted, ``open`` those open now."""

    def __init__(self, tls: ssl.SSLContext | None = None, keep_alive: bool = False) -> None:
        self.replies: list[Reply] = []
        self.requests: list[Seen] = []
        self.client_closed = trio.Event()
        self.port = 0
        self._tls = tls
        self.keep_alive = keep_alive
        self.connections = 0
        self.open = 0

    @property
    def url(self) -> str:
        if self._tls is not None:  # the test certificate is for "localhost"
            return f"https://localhost:{self.port}"
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, stream: Any) -> None:
        self.connections += 1
        self.open += 1
        try:
            data = b""
            while (data := await self._serve_one(stream, data)) is not None:
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.client_closed.set()
        finally:
            self.open -= 1
            await stream.aclose()

    async def _serve_one(self, stream: Any, data: bytes) -> bytes | None:
        """Serve one request (``data``: bytes of it read already); what was read of
        the next one if the connection stays open, else None."""
        while b"\r\n\r\n" not in data:
            part = await stream.receive_some(65536)
            if not part:
                return None
            data += part
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {
            k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])
        }
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            body += await stream.receive_some(65536)
        body, rest = body[:length], body[length:]
        self.requests.append(Seen(method, path, headers, body))
        reply = self.replies.pop(0) if self.replies else Reply(500, b'{"error":"no reply"}')
        if reply.drop:
            return None
        keep = self.keep_alive and not reply.close and reply.hang_after is None
        kind = "text/event-stream" if reply.status == 200 else "application/json"
        head_out = [f"HTTP/1.1 {reply.status} X", f"content-type: {kind}"]
        if not self.keep_alive:
            head_out.append("connection: close")
        if reply.chunked:
            head_out.append("transfer-encoding: chunked")
        elif self.keep_alive:
            head_out.append(f"content-length: {len(reply.body)}")
        head_out += [f"{k}: {v}" for k, v in reply.headers.items()]
        head = reply.head or ("\r\n".join(head_out) + "\r\n\r\n").encode()
        await stream.send_all(head)
        payload = reply.body
        if reply.hang_after is not None:
            await stream.send_all(payload[: reply.hang_after])
            while await stream.receive_some(65536):
                pass
            self.client_closed.set()
            return None
        size = reply.piece or len(payload) or 1
        for start in range(0, len(payload), size):
            piece = payload[start : start + size]
            if reply.chunked:
                piece = b"%x\r\n%s\r\n" % (len(piece), piece)
            await stream.send_all(piece)
            if reply.pause:
                await trio.sleep(reply.pause)
        if reply.chunked and reply.end_chunked:
            await stream.send_all(b"0\r\n\r\n")
        return rest if keep else None

    async def serve(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners: list[Any] = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        if self._tls is not None:
            listeners = [trio.SSLListener(ln, self._tls, https_compatible=True) for ln in listeners]
        await trio.serve_listeners(self._handle, listeners, task_status=task_status)
