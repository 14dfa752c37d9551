"""Keeping an MCP server's tool list current: which announced changes
(``notifications/tools/list_changed``) a listing has taken in, the task that
lists again, and how long a call waits for it.

``ListWatch`` notes each announcement as the session's read stream delivers
it (the SDK hands notifications to spawned tasks, so one sent before a
call's answer could reach its handler after the call returned). ``Listing``
is the state: ``changes`` announced, ``done`` taken in by a listing that
ended; ``run`` lists again after each announcement, one listing at a time;
``settle`` lets a call wait, bounded, for the changes announced before it
returned, never for later ones (a server that announces changes all the
time cannot hold a call).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Self, final

import anyio
import mcp.types as mcp_types
import trio
from mcp.shared.message import SessionMessage

__all__ = ["ListWatch", "Listing"]

_LIST_CHANGED = "notifications/tools/list_changed"


@final
class ListWatch:
    """The session's read stream, calling ``on_change`` for each
    ``tools/list_changed`` as it is read, in the order the server sent it."""

    def __init__(self, stream: Any, on_change: Callable[[], None]) -> None:
        self._stream = stream  # the transport's: a ReadStream of the SDK
        self._on_change = on_change

    @property
    def last_context(self) -> Any:
        return getattr(self._stream, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        item: SessionMessage | Exception = await self._stream.receive()
        if isinstance(item, SessionMessage):
            message = item.message
            if isinstance(message, mcp_types.JSONRPCNotification) and (
                message.method == _LIST_CHANGED
            ):
                self._on_change()
        return item

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


@final
class Listing:
    """Which announced changes of the tool list are listed (see the module)."""

    __slots__ = ("_ended", "_wanted", "changes", "done")

    def __init__(self) -> None:
        self.changes = 0  # tools/list_changed announcements received
        self.done = 0  # of those, the ones a listing that has ended took in
        self._wanted = trio.Event()  # set when a change waits to be listed
        self._ended = trio.Event()  # set (and replaced) each time a listing ends

    def changed(self) -> None:
        """An announcement arrived."""
        self.changes += 1
        self._wanted.set()

    def fresh(self) -> int:
        """A listing starts that takes in every change so far: what it covers."""
        return self.changes

    def ended(self, covered: int) -> None:
        """A listing that covered ``covered`` ended (listed, or failed: a failed one
        is not tried again until the server announces another change)."""
        self.done = max(self.done, covered)
        ended, self._ended = self._ended, trio.Event()
        ended.set()

    async def run(self, list_tools: Callable[[], Awaitable[object]]) -> None:
        """List again after each announcement, one listing at a time (changes that
        come while one runs are taken by the next). ``list_tools`` logs its own
        failures; a cancelled listing takes in nothing."""
        while True:
            await self._wanted.wait()
            self._wanted = trio.Event()
            covered = self.fresh()
            if self.done >= covered:
                continue
            await list_tools()
            self.ended(covered)

    async def settle(self, seconds: float) -> bool:
        """Wait until the changes announced by now are listed, at most ``seconds``;
        False if they were not (they are then not waited for again: the listing
        goes on in the background and takes effect when it ends)."""
        target = self.changes
        if self.done >= target:
            return True
        with trio.move_on_after(seconds):
            while self.done < target:
                self._wanted.set()  # in case it was taken by a listing already under way
                await self._ended.wait()
            return True
        self.done = max(self.done, target)
        return False
