"""Watching an MCP session's streams: keeping the server's tool list current
(which announced changes, ``notifications/tools/list_changed``, a listing
has taken in, the task that lists again, how long a call waits for it), and
bounding the server's requests that wait for an answer.

``ListWatch`` notes each announcement as the session's read stream delivers
it (the SDK hands notifications to spawned tasks, so one sent before a
call's answer could reach its handler after the call returned). ``Listing``
is the state: ``changes`` announced, ``done`` taken in by a listing that
ended; ``run`` lists again after each announcement, one listing at a time;
``settle`` lets a call wait, bounded, for the changes announced before it
returned, never for later ones (a server that announces changes all the
time cannot hold a call).

A server may send requests (``ping``, ``sampling/createMessage``,
``roots/list``, ...). The SDK runs a task for each, and that task waits
until its answer is written; a server that sends requests and never reads
the answers makes such tasks without end (100,000 pings: 930 MB, and
growing). ``RequestGate`` keeps the ids of the server's requests taken and
not yet answered, at most ``MAX_SERVER_REQUESTS``: a request past the bound,
or with the id of one still open, is dropped unanswered (logged once per
connection), so memory stays bounded and the rest of the connection (the
answer to a call, say) still flows. An answer written, or the server's
``notifications/cancelled`` for its request, frees its place. A request the
session refuses whatever it holds (sampling, elicitation) reaches it with
stand-in params (``ListWatch``): the SDK validates a request's params on the
trio thread before refusing it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, Self, final

import anyio
import mcp.types as mcp_types
import trio
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params
from mcp.shared.message import SessionMessage

from .._log import MCP as logger
from ._tools import taken_in

__all__ = ["MAX_SERVER_REQUESTS", "AnswerWatch", "ListWatch", "Listing", "RequestGate"]

_LIST_CHANGED = "notifications/tools/list_changed"
_REFUSED: Final[dict[str, Callable[[], dict[str, Any]]]] = {
    "sampling/createMessage": lambda: {"messages": [], "maxTokens": 1},
    "elicitation/create": lambda: {
        "message": "",
        "requestedSchema": {"type": "object", "properties": {}},
    },
}
"""The server's requests refused whatever they hold (the session has no sampling
nor elicitation callback), and the params the SDK is handed instead of the
server's: it validated those on the trio thread before refusing (a sampling
request of 500,000 messages held the loop 98 s)."""


@final
class ListWatch:
    """The session's read stream, calling ``on_change`` for each
    ``tools/list_changed`` as it is read, in the order the server sent it;
    what ``admit`` refuses is dropped."""

    def __init__(
        self,
        stream: Any,
        on_change: Callable[[], None],
        admit: Callable[[SessionMessage | Exception], bool],
    ) -> None:
        self._stream = stream  # the transport's: a ReadStream of the SDK
        self._on_change = on_change
        self._admit = admit

    @property
    def last_context(self) -> Any:
        return getattr(self._stream, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        item: SessionMessage | Exception = await self._stream.receive()
        while not self._admit(item):
            item = await self._stream.receive()
        if isinstance(item, SessionMessage):
            message = item.message
            if isinstance(message, mcp_types.JSONRPCNotification) and (
                message.method == _LIST_CHANGED
            ):
                self._on_change()
            elif isinstance(message, mcp_types.JSONRPCRequest) and message.method in _REFUSED:
                stand_in = _REFUSED[message.method]()
                request = mcp_types.JSONRPCRequest(
                    jsonrpc="2.0", id=message.id, method=message.method, params=stand_in
                )
                item = SessionMessage(request, metadata=item.metadata)
            elif isinstance(message, mcp_types.JSONRPCResponse):  # over HTTP: not taken in yet
                refused = taken_in(message.result)
                if refused is not None:
                    error = mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=refused)
                    answer = mcp_types.JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
                    item = SessionMessage(answer, metadata=item.metadata)
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


MAX_SERVER_REQUESTS: Final = 32
"""The server's requests taken and not yet answered, at once."""
_LATER: Final = 256
"""Cancellations waiting to be written (``AnswerWatch``)."""
_CANCELLED: Final = "notifications/cancelled"


@final
class RequestGate:
    """Which of the server's requests are open; see the module."""

    __slots__ = ("_label", "_open", "_told")

    def __init__(self, label: str) -> None:
        self._label = label
        self._open: set[object] = set()
        self._told = False

    def admit(self, item: SessionMessage | Exception) -> bool:
        """Whether ``item``, read from the server, goes on to the session."""
        if not isinstance(item, SessionMessage):
            return True
        message = item.message
        if isinstance(message, mcp_types.JSONRPCNotification):
            if message.method == _CANCELLED:
                cancelled = cancelled_request_id_from_params(message.params)
                if cancelled is not None:
                    self._open.discard(coerce_request_id(cancelled))
            return True
        if not isinstance(message, mcp_types.JSONRPCRequest):
            return True
        key = coerce_request_id(message.id)
        if key in self._open or len(self._open) >= MAX_SERVER_REQUESTS:
            if not self._told:
                self._told = True
                logger.warning(
                    "%s: it sent requests faster than it read their answers (or reused an "
                    "open request's id): such requests are dropped unanswered",
                    self._label,
                )
            return False
        self._open.add(key)
        return True

    def answered(self, item: SessionMessage) -> None:
        """``item`` is being written to the server: an answer frees its request's place."""
        message = item.message
        if isinstance(message, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError):
            if message.id is not None:
                self._open.discard(coerce_request_id(message.id))


@final
class AnswerWatch:
    """The session's write stream, telling ``gate`` of each answer it carries
    once the transport has taken it.

    A ``notifications/cancelled`` is not written by its sender but by
    ``forward`` (a task of the connection), so that a cancelled call returns at
    once: the SDK writes it shielded, for up to 5 s, and a server that stopped
    reading held the canceller that long. Past ``_LATER`` waiting, one is dropped.
    """

    def __init__(self, stream: Any, gate: RequestGate) -> None:
        self._stream = stream  # the transport's: a WriteStream of the SDK
        self._gate = gate
        self._later, self._pending = trio.open_memory_channel[SessionMessage](_LATER)

    async def send(self, item: SessionMessage) -> None:
        message = item.message
        if isinstance(message, mcp_types.JSONRPCNotification) and message.method == _CANCELLED:
            try:
                self._later.send_nowait(item)
            except (trio.WouldBlock, trio.ClosedResourceError):
                logger.debug("a notifications/cancelled was dropped: the server reads none")
            return
        await self._stream.send(item)
        self._gate.answered(item)

    async def forward(self) -> None:
        """Write the notifications ``send`` left, in order, until cancelled or the
        transport is closed."""
        async for item in self._pending:
            try:
                await self._stream.send(item)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return

    async def aclose(self) -> None:
        self._later.close()
        await self._stream.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
