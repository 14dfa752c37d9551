"""``EventStream``: a response of server-sent events over one session's ``Feed``;
``SessionFraming`` frames the session's own stream (``GET
/sessions/{id}/events``): each event ``id: <sequence>`` and ``data: <the
--json line>``.

A small state machine over the feed: it holds its ``cursor`` (the last
sequence framed) and moves between *sending* (the feed has events after the
cursor: frame them, move the cursor) and *waiting* (none: wait for the feed to
change), and *ends* when its framing is done (an AG-UI run finished), when
the feed is closed and everything was sent, or when the client goes away
(``http.disconnect``); while it waits it sends a ``: keep-alive`` comment
every ``keepalive_seconds`` of the hub. Either way it leaves the session's readers, saying
whether the client went away (``Watch.leave``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol, final

import trio
from starlette.responses import Response

from ._feed import Feed
from ._hub import Watch

__all__ = ["EventStream", "Framing", "SessionFraming", "client_gone", "frame", "pump"]

HEADERS: Final = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # a buffering proxy would hold events back
]


KEEPALIVE: Final = b": keep-alive\n\n"


class Framing(Protocol):
    """What a stream sends: its first bytes, each event's, and whether it is done."""

    def opening(self) -> bytes: ...

    def frame(self, sequence: int, line: bytes) -> bytes: ...

    @property
    def done(self) -> bool: ...


def frame(sequence: int, line: bytes) -> bytes:
    """One event: its id (the sequence) and its data (one JSON line, no line end)."""
    return b"id: %d\ndata: %s\n\n" % (sequence, line)


@final
class SessionFraming:
    """The session's stream: every event as it is logged; never done."""

    done = False

    def opening(self) -> bytes:
        return b": events\n\n"  # a comment: the headers go out at once

    def frame(self, sequence: int, line: bytes) -> bytes:
        return frame(sequence, line)


async def client_gone(receive: Callable[[], Awaitable[Any]]) -> None:
    """Return once the client has gone away (ASGI ``http.disconnect``); the request's
    body must have been read whole. Cancellation: it stops listening."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def pump(
    feed: Feed,
    framing: Framing,
    cursor: int,
    out: Callable[[bytes], Awaitable[None]],
    keepalive: float | None = None,
) -> int:
    """Frame the feed's events after ``cursor`` into ``out`` until the framing is
    done or the feed is closed and all was framed; the last sequence framed.
    ``keepalive``: after that many seconds without an event, ``out`` gets the
    comment ``: keep-alive`` (a proxy or a client that drops idle connections
    keeps this one). Cancellation: stops between events, nothing framed twice."""
    while not framing.done:
        changed = feed.changed  # taken first: a publication meanwhile sets it
        events = await feed.after(cursor)
        if events:  # sending
            parts = []
            for sequence, line in events:
                parts.append(framing.frame(sequence, line))
                cursor = sequence
                if framing.done:
                    break
            await out(b"".join(parts))
        elif feed.closed:  # ended
            break
        elif keepalive is None:  # waiting
            await changed.wait()
        else:
            with trio.move_on_after(keepalive) as idle:
                await changed.wait()
            if idle.cancelled_caught:
                await out(KEEPALIVE)
    return cursor


@final
class EventStream(Response):
    """Streams ``watch.feed`` from after ``cursor``, framed by ``framing``, until it
    is done, the feed closes or the client disconnects. Cancellation (the server
    stops): it leaves the readers as having not disconnected, so no turn is
    cancelled for it."""

    def __init__(self, watch: Watch, cursor: int, framing: Framing | None = None) -> None:
        super().__init__(status_code=200)
        self.watch = watch
        self.cursor = cursor
        self.framing: Framing = SessionFraming() if framing is None else framing
        self.disconnected = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._until_disconnect, receive, nursery.cancel_scope)
                opening = self.framing.opening()
                await send({"type": "http.response.body", "body": opening, "more_body": True})
                await self._stream(self.watch.feed, send)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                nursery.cancel_scope.cancel()
        finally:
            self.watch.leave(self.disconnected)

    async def _stream(self, feed: Feed, send: Any) -> None:
        async def out(body: bytes) -> None:
            await send({"type": "http.response.body", "body": body, "more_body": True})

        keepalive = self.watch.hub.keepalive_seconds
        self.cursor = await pump(feed, self.framing, self.cursor, out, keepalive)

    async def _until_disconnect(self, receive: Any, scope: trio.CancelScope) -> None:
        await client_gone(receive)
        self.disconnected = True
        scope.cancel()
