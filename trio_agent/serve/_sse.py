"""``EventStream``: the response of ``GET /sessions/{id}/events``, one session's
events as server-sent events, each ``id: <sequence>`` and ``data: <the --json
line>``.

A small state machine over the session's ``Feed``: it holds its ``cursor`` (the
last sequence sent) and moves between *sending* (the feed has events after the
cursor: send them, move the cursor) and *waiting* (none: wait for the feed to
change), and *ends* when the feed is closed and everything was sent, or when the
client goes away (``http.disconnect``). Either way it leaves the session's
readers, saying whether the client went away (``Watch.leave``).
"""

from __future__ import annotations

from typing import Any, Final, final

import trio
from starlette.responses import Response

from ._feed import Feed
from ._hub import Watch

__all__ = ["EventStream", "frame"]

HEADERS: Final = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # a buffering proxy would hold events back
]


def frame(sequence: int, line: bytes) -> bytes:
    """One event: its id (the sequence) and its data (one JSON line, no line end)."""
    return b"id: %d\ndata: %s\n\n" % (sequence, line)


@final
class EventStream(Response):
    """Streams ``watch.feed`` from after ``cursor`` until the feed closes or the
    client disconnects. Cancellation (the server stops): it leaves the readers
    as having not disconnected, so no turn is cancelled for it."""

    def __init__(self, watch: Watch, cursor: int) -> None:
        super().__init__(status_code=200)
        self.watch = watch
        self.cursor = cursor
        self.disconnected = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._until_disconnect, receive, nursery.cancel_scope)
                await send(
                    {"type": "http.response.body", "body": b": events\n\n", "more_body": True}
                )
                await self._stream(self.watch.feed, send)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                nursery.cancel_scope.cancel()
        finally:
            self.watch.leave(self.disconnected)

    async def _stream(self, feed: Feed, send: Any) -> None:
        while True:
            changed = feed.changed  # taken first: a publication meanwhile sets it
            events = await feed.after(self.cursor)
            if events:  # sending
                body = b"".join(frame(sequence, line) for sequence, line in events)
                await send({"type": "http.response.body", "body": body, "more_body": True})
                self.cursor = events[-1][0]
            elif feed.closed:  # ended
                return
            else:  # waiting
                await changed.wait()

    async def _until_disconnect(self, receive: Any, scope: trio.CancelScope) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.disconnected = True
        scope.cancel()
