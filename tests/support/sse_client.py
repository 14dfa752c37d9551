"""A hand-written server-sent-events reader over httpx, for the serving tests:
each event as (id, data decoded as JSON), comments skipped."""

from __future__ import annotations

import json
from typing import Any

import h11
import trio
from waiting import WAIT


class SseParser:
    """Lines in, events out, as the SSE format frames them."""

    def __init__(self) -> None:
        self.event_id: str | None = None
        self.data: list[str] = []

    def line(self, line: str) -> tuple[int, dict[str, Any]] | None:
        if line == "":
            event_id, data = self.event_id, self.data
            self.event_id, self.data = None, []
            if not data:
                return None
            assert event_id is not None, "every event carries an id"
            return int(event_id), json.loads("\n".join(data))
        if not line.startswith(":"):
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "id":
                self.event_id = value
            elif field == "data":
                self.data.append(value)
        return None


async def read_until(
    base_url: str,
    path: str,
    done,
    *,
    headers: dict[str, str] | None = None,
    got: list | None = None,
) -> list[tuple[int, dict[str, Any]]]:
    """GET the stream over a socket of its own (h11 frames the HTTP; httpx's
    streamed responses leave async generators unfinished when cut short under
    trio), read events until ``done(event)`` is true for one (kept), then close
    the connection; or until the server ends the stream. Each event is appended
    to ``got`` as it comes. Bounded by ``WAIT``."""
    got = [] if got is None else got
    with trio.fail_after(WAIT):
        async with await _connect(base_url) as stream:
            connection = h11.Connection(h11.CLIENT)
            sent = [
                ("host", _host(base_url)),
                ("accept", "text/event-stream"),
                *(headers or {}).items(),
            ]
            request = h11.Request(method="GET", target=path, headers=sent)
            await stream.send_all(connection.send(request) + connection.send(h11.EndOfMessage()))
            parser, buffer = SseParser(), b""
            while True:
                item = connection.next_event()
                if item is h11.NEED_DATA:
                    connection.receive_data(await stream.receive_some(65536))
                elif isinstance(item, h11.Response):
                    assert item.status_code == 200, item
                elif isinstance(item, h11.Data):
                    *lines, buffer = (buffer + bytes(item.data)).split(b"\n")
                    for line in lines:
                        event = parser.line(line.decode())
                        if event is not None:
                            got.append(event)
                            if done(event[1]["event"]):
                                return got
                elif isinstance(item, h11.EndOfMessage | h11.ConnectionClosed):
                    return got


def _host(base_url: str) -> str:
    """The Host header for the server: its own address (a server without a token
    answers only requests to a loopback name)."""
    return base_url.removeprefix("http://")


async def _connect(base_url: str) -> trio.SocketStream:
    host, _, port = base_url.removeprefix("http://").rpartition(":")
    return await trio.open_tcp_stream(host.strip("[]"), int(port))


def finished(turn: int):
    """``done`` for ``read_until``: the turn.finished of turn ``turn``."""
    return lambda event: event["type"] == "turn.finished" and event["turn"] == turn


def never(event: dict[str, Any]) -> bool:
    return False


async def post_stream(base_url: str, path: str, body: bytes, headers: dict[str, str] | None = None):
    """POST ``body`` and read the SSE answer to its end: (status, the ``data:``
    values decoded as JSON, or the body as JSON when it is no stream)."""
    values: list[Any] = []
    status = 0
    with trio.fail_after(WAIT):
        async with await _connect(base_url) as stream:
            connection = h11.Connection(h11.CLIENT)
            sent = [
                ("host", _host(base_url)),
                ("content-type", "application/json"),
                ("content-length", str(len(body))),
                *(headers or {}).items(),
            ]
            request = h11.Request(method="POST", target=path, headers=sent)
            await stream.send_all(
                connection.send(request)
                + connection.send(h11.Data(data=body))
                + connection.send(h11.EndOfMessage())
            )
            whole = b""
            while True:
                item = connection.next_event()
                if item is h11.NEED_DATA:
                    connection.receive_data(await stream.receive_some(65536))
                elif isinstance(item, h11.Response):
                    status = item.status_code
                elif isinstance(item, h11.Data):
                    whole += bytes(item.data)
                elif isinstance(item, h11.EndOfMessage | h11.ConnectionClosed):
                    break
    if status != 200:
        return status, json.loads(whole)
    for line in whole.split(b"\n"):
        if line.startswith(b"data: "):
            values.append(json.loads(line.removeprefix(b"data: ")))
    return status, values
