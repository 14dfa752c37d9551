"""What both MCP server kinds share: the session's life, the tool list, calls.

A subclass opens the transport (``_open``); this class runs the SDK's
``ClientSession`` over it, bounds ``initialize``, keeps the current tool
list (refreshed on ``notifications/tools/list_changed``) and makes each
listed tool a ``Tool`` whose calls go through ``_call``.

One task of the server's nursery owns each connection (transport and
session, entered and left in that task): a transport that fails after
entry (an HTTP server that went down) ends that connection, and its calls
get error results, instead of the SDK's task group raising into the
caller's ``async with`` block. With ``restart=True`` the next call opens a
new connection.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Collection
from types import TracebackType
from typing import Any, Final, Self, final

import mcp.types as mcp_types
import trio
from mcp.client.session import ClientSession, IncomingMessage
from mcp.shared.dispatcher import ProgressFnT

from .._log import MCP as logger
from ..engine._run import require_trio
from ..errors import describe, first_leaf
from ..tools._context import tool_context
from ..tools._tool import Tool, ToolError
from ._listing import AnswerWatch, Listing, ListWatch, RequestGate
from ._noise import Noise
from ._stdio import Streams
from ._tools import (
    MAX_LISTING_BYTES,
    MAX_TOOLS,
    Validator,
    check_call,
    describe_error,
    effect_of,
    listed_bytes,
    parameters_of,
    result_value,
    too_deep,
    tool_names,
    validator,
)

__all__ = ["MCPServerBase", "MCPServerError", "Streams"]

_PREFIX: Final = re.compile(r"[A-Za-z0-9_-]{1,32}\Z")
_MAX_PAGES: Final = 100
"""Pages of one ``tools/list``; a server that pages on past this is cut off there."""
_CLIENT: Final = mcp_types.Implementation(name="trio-agent", version="0.1.0")
_CLOSE_SECONDS: Final = 5.0
"""Bound on ending a connection gracefully (an HTTP session's ``DELETE``)."""
_SETTLE_SECONDS: Final = 1.0
"""How long a call that saw its connection close waits to learn why."""


class MCPServerError(Exception):
    """An MCP server could not be used: it did not start, did not answer
    ``initialize`` in time, refused it, or (HTTP) could not be reached."""


@final
class _Connection:
    """One connection to the server: its session while it is up, how it ended."""

    __slots__ = ("done", "failure", "session", "stop")

    def __init__(self) -> None:
        self.session: ClientSession | None = None
        self.stop = trio.Event()  # set to end the connection
        self.done = trio.Event()  # set once it has ended
        self.failure: str | None = None  # why it ended, when it failed


class MCPServerBase:
    """An MCP server as a source of tools; use a subclass (``MCPServerStdio``,
    ``MCPServerHTTP``) as an async context manager.

    ``tools()`` is the current list, fetched at entry and again after the
    server says it changed. Nothing started inside outlives the ``async with``.
    """

    def __init__(
        self,
        label: str,
        prefix: str | None,
        allow: Collection[str] | None,
        deny: Collection[str],
        init_seconds: float,
        progress: bool,
        restart: bool,
    ) -> None:
        if prefix is not None and not (type(prefix) is str and _PREFIX.match(prefix)):
            raise ValueError(f"prefix must be 1 to 32 letters, digits, '_' or '-', got {prefix!r}")
        if isinstance(allow, str) or isinstance(deny, str):
            raise TypeError("allow and deny take collections of tool names, not one str")
        if not (isinstance(init_seconds, int | float) and 0 < init_seconds < math.inf):
            raise ValueError(f"init_seconds must be a positive number, got {init_seconds!r}")
        self.label = label
        self.prefix = prefix
        self._allow = None if allow is None else frozenset(allow)
        self._deny = frozenset(deny)
        self._init_seconds = float(init_seconds)
        self._progress = progress
        self._restart = bool(restart)
        self._tools: tuple[Tool, ...] = ()
        self._connection: _Connection | None = None
        self._connecting: trio.CancelScope | None = None  # a connection being opened
        self._reconnecting = trio.Lock()
        self._restarts = 0  # restarts tried: calls that waited for one take its outcome
        self._restart_failed: str | None = None  # why the last restart failed
        self._stack: contextlib.AsyncExitStack | None = None
        self._nursery: trio.Nursery | None = None
        self._listing = Listing()
        self._closed = False
        self._entered = False  # set as entry starts: a second entry, even a concurrent one, fails
        self._noise = Noise(label)  # what the server sent that is no message

    def tools(self) -> tuple[Tool, ...]:
        """The server's tools as it last listed them (filtered and named), as
        ordinary ``Tool``s. Cheap: call it before each step to see changes.
        ``RuntimeError`` before the server was entered (it has listed nothing
        yet: a run would offer none of its tools) and after it was left (its tools
        could not run; a ``Tool`` taken from it earlier gives an error result
        saying the server is closed)."""
        if self._stack is None:
            if self._closed:  # a turn given it as a source would offer tools that cannot run
                raise RuntimeError(
                    f"{self.label} is closed (its `async with` block has ended, or its entry "
                    "failed), so its tools cannot run: keep the turns that use it inside "
                    "`async with server:`"
                )
            raise RuntimeError(
                f"{self.label} was never entered, so it has no tools yet: use it as "
                "`async with server:` around the turns that use it (it starts, or connects, "
                "and lists its tools on entry)"
            )
        return self._tools

    @property
    def session(self) -> ClientSession | None:
        """The SDK's ``ClientSession`` of the current connection, for what the
        tools do not cover (resources, prompts); None when not connected."""
        connection = self._connection
        return None if connection is None or self._closed else connection.session

    async def _open(self, stack: contextlib.AsyncExitStack, nursery: trio.Nursery) -> Streams:
        """Open the transport; its teardown goes on ``stack``."""
        raise NotImplementedError

    async def _transport_gone(self) -> str | None:
        """Why the transport cannot carry messages any more, if it is known."""
        return None

    async def _last_words(self) -> str | None:
        """What the server said last on stderr, to quote when it fails to start."""
        return None

    async def _gone(self) -> str | None:
        """Why the server cannot answer any more, if it is known to be gone."""
        connection = self._connection
        if connection is None:
            return None
        why = await self._transport_gone()
        if why is None and (connection.done.is_set() or connection.stop.is_set()):
            why = connection.failure or "its session ended"
        return why

    async def __aenter__(self) -> Self:
        """Start the server (or connect), ``initialize`` within ``init_seconds``,
        list the tools. ``MCPServerError`` if any of it fails; a cancelled entry
        ends what it started before the cancellation propagates."""
        require_trio()  # from asyncio: say so, not an error from deep in the SDK's nursery
        if self._entered:
            raise RuntimeError(f"{self.label} can be entered once")
        self._entered = True
        stack = contextlib.AsyncExitStack()
        entered = False
        try:
            self._nursery = await stack.enter_async_context(trio.open_nursery())
            stack.push_async_callback(self._disconnect)
            await self._connect()
            entered = True
        except (Exception, BaseExceptionGroup) as exc:
            # a transport failure (the SDK raises it from its task group, beside the
            # cancellations it caused): an MCPServerError; cancellations alone: below
            failure = _failure_in(exc)
            if failure is None:
                raise
            self._closed = True
            await self._abandon(stack, failure)
            raise
        finally:
            if not entered and not self._closed:  # cancelled: end what was started;
                self._closed = True  # the cancellation propagates, unless it came from
                await self._abandon(stack, None)  # our transport failing: that error
        self._stack = stack
        return self

    async def _abandon(self, stack: contextlib.AsyncExitStack, exc: BaseException | None) -> None:
        """End what a failed entry started; a failure of the transport (a server
        that cannot be reached: the SDK raises it from its task group, often as
        it unwinds) becomes an ``MCPServerError``, from whichever side it came."""
        try:
            await stack.aclose()
        except Exception as closing:
            raise self._entry_error(closing) from closing
        if isinstance(exc, Exception) and not isinstance(exc, MCPServerError):
            raise self._entry_error(exc) from exc

    def _entry_error(self, exc: Exception) -> MCPServerError:
        leaf = _leaf(exc)
        if isinstance(leaf, MCPServerError):
            return leaf
        return MCPServerError(f"{self.label} could not be used: {describe(_leaf(exc))}")

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """End the session and the server (a stdio server's whole process group),
        bounded even when cancelled; the body's exception propagates unchanged."""
        stack, self._stack = self._stack, None
        self._closed = True
        if stack is not None:
            await stack.aclose()

    async def _connect(self) -> None:
        """Open a connection in a task of our nursery; return once the server has
        answered ``initialize`` and listed its tools (its failure raised here)."""
        assert self._nursery is not None
        self._connection = connection = _Connection()
        try:
            with trio.CancelScope() as self._connecting:  # cancelled if the block is left
                await self._nursery.start(self._serve, connection)
        finally:
            self._connecting = None
        if connection.session is None:
            raise MCPServerError(f"{self.label} was closed while it was being started")

    async def _disconnect(self) -> None:
        """End the current connection gracefully (bounded), then whatever else
        runs in our nursery (the pumps of a stdio server that are still up)."""
        if self._connecting is not None:
            self._connecting.cancel()
        connection = self._connection
        if connection is not None:
            connection.stop.set()
            await connection.done.wait()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def _serve(
        self,
        connection: _Connection,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Own one connection: open it, initialize, list, then keep the tool list
        current until ``connection.stop``; a failure after that is recorded on
        the connection (its calls get error results), not raised."""
        started = False
        try:
            with trio.CancelScope() as bound:
                async with contextlib.AsyncExitStack() as stack:
                    read, write = await self._open(stack, self._nurseries())
                    gate = RequestGate(self.label)
                    answers = AnswerWatch(write, gate)
                    session = ClientSession(
                        ListWatch(read, self._listing.changed, gate.admit),
                        answers,
                        message_handler=self._on_message,
                        logging_callback=self._on_log,
                        client_info=_CLIENT,
                    )
                    await stack.enter_async_context(session)
                    await self._initialize(session)
                    connection.session = session
                    await self._first_list()
                    async with trio.open_nursery() as refreshing:
                        refreshing.start_soon(self._listing.run, self._relist)
                        refreshing.start_soon(answers.forward)
                        started = True
                        task_status.started()
                        await connection.stop.wait()
                        bound.deadline = trio.current_time() + _CLOSE_SECONDS
                        refreshing.cancel_scope.cancel()
        except (Exception, BaseExceptionGroup) as exc:
            failure = _failure_in(exc)
            if failure is None or not started:
                raise
            connection.failure = describe(_leaf(failure))
            if not self._closed:
                logger.warning("%s: the connection failed: %s", self.label, connection.failure)
        finally:
            connection.session = None
            connection.done.set()

    def _nurseries(self) -> trio.Nursery:
        assert self._nursery is not None, "entered"
        return self._nursery

    async def _initialize(self, session: ClientSession) -> None:
        with trio.move_on_after(self._init_seconds) as scope:
            try:
                await session.initialize()
            except Exception as exc:
                why = await self._why_not_started()
                raise MCPServerError(
                    f"{self.label} failed to initialize: {describe_error(exc)}{why}"
                ) from exc
        if scope.cancelled_caught:
            why = await self._why_not_started()
            raise MCPServerError(
                f"{self.label} did not answer initialize within {self._init_seconds:g} s{why}"
            )

    async def _why_not_started(self) -> str:
        """How the server ended and what it said last on stderr, for an entry error
        (the user's to read, never a model's)."""
        gone = await self._transport_gone()
        said = await self._last_words()
        return (f" ({gone})" if gone else "") + (f"; its stderr: {said}" if said else "")

    async def _first_list(self) -> None:
        """The first ``tools/list``, bounded by ``init_seconds`` as ``initialize`` is."""
        covered = self._listing.fresh()
        with trio.move_on_after(self._init_seconds) as scope:
            await self._list_pages()
        self._listing.ended(covered)
        if scope.cancelled_caught:
            why = await self._why_not_started()
            raise MCPServerError(
                f"{self.label} did not list its tools within {self._init_seconds:g} s{why}"
            )

    async def refresh(self) -> tuple[Tool, ...]:
        """List the server's tools again and return the new list (also what
        ``tools()`` returns from now on). ``MCPServerError`` if the server is
        gone (with ``restart=True``, it is started again first) or the listing
        fails or is not answered within ``init_seconds``. Cancellation leaves
        the previous list in place."""
        self._require_session()  # RuntimeError outside the block
        try:
            await self._usable()
        except ToolError as exc:
            raise MCPServerError(str(exc)) from exc
        return await self._list()

    async def _list(self) -> tuple[Tool, ...]:
        """``_list_pages`` within ``init_seconds`` (a server that never answers must
        not hold ``refresh()``, nor the listing after a change, for ever); an
        ``MCPServerError`` past it, the previous list kept."""
        with trio.move_on_after(self._init_seconds):
            return await self._list_pages()
        raise MCPServerError(
            f"{self.label}: tools/list was not answered within {self._init_seconds:g} s"
        )

    async def _list_pages(self) -> tuple[Tool, ...]:
        """``tools/list`` on the current connection, every page; the list kept."""
        session = self._require_session()
        listed: list[mcp_types.Tool] = []
        size = 0
        cursor: str | None = None
        try:
            for _ in range(_MAX_PAGES):
                params = None if cursor is None else mcp_types.PaginatedRequestParams(cursor=cursor)
                page = await session.list_tools(params=params)
                listed.extend(page.tools)
                size += listed_bytes(page.tools)
                cursor = page.next_cursor
                if cursor is None or len(listed) > MAX_TOOLS or size > MAX_LISTING_BYTES:
                    break
        except Exception as exc:
            why = describe_error(exc)
            if too_deep(why):  # the SDK could not parse the listing: no tool can be had
                why = "the server sent a tool schema nested too deeply to read"
            raise MCPServerError(f"{self.label}: tools/list failed: {why}") from exc
        if len(listed) > MAX_TOOLS or size > MAX_LISTING_BYTES:  # memory, and time to take them
            raise MCPServerError(
                f"{self.label}: tools/list refused: it lists more than {MAX_TOOLS} tools "
                f"or {MAX_LISTING_BYTES // 2**20} MiB of them"
            )
        tools: list[Tool] = []
        for name, listed_tool in tool_names(
            listed, self.prefix, self._allow, self._deny, self.label
        ):
            await trio.lowlevel.checkpoint()  # a copy of each schema is made: others run between
            try:
                tools.append(self._tool(name, listed_tool))
            except (ValueError, TypeError) as exc:  # a schema we cannot take: the others stay
                logger.warning("%s: tool %r left out: %s", self.label, listed_tool.name, exc)
        self._tools = tuple(tools)
        return self._tools

    def _require_session(self) -> ClientSession:
        connection = self._connection
        if self._closed or connection is None:
            state = "closed" if self._closed else "not entered (use `async with`)"
            raise RuntimeError(f"{self.label} is {state}")
        if connection.session is None:
            raise MCPServerError(f"{self.label} is not running: {connection.failure or 'it ended'}")
        return connection.session

    def _tool(self, name: str, listed_tool: mcp_types.Tool) -> Tool:
        parameters = parameters_of(listed_tool)
        check = validator(parameters)
        server_name = listed_tool.name

        async def execute(arguments: dict[str, Any]) -> Any:
            return await self._call(server_name, arguments, check)

        return Tool(
            name=name,
            description=listed_tool.description or listed_tool.title or "",
            parameters=parameters,
            execute=execute,
            progress=self._progress,
            effect=effect_of(listed_tool),
        )

    async def _call(self, name: str, arguments: dict[str, Any], check: Validator) -> Any:
        """Call tool ``name``: arguments checked first (``ToolArgumentsError``), the
        result mapped (``result_value``); any failure of the server or the protocol
        is a ``ToolError``. Cancellation: the SDK sends ``notifications/cancelled``
        for the request, then ``trio.Cancelled`` propagates at once."""
        checked = await check_call(arguments, check)
        context = tool_context()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            fraction = progress / total if total else None
            text = f"{progress:g}/{total:g}" if total else f"{progress:g}"
            context.report(message or text, fraction)

        for attempt in (1, 2):
            session = await self._usable()
            connection = self._connection
            try:
                result = await _call_tool(
                    session, name, checked, on_progress if self._progress else None
                )
                break
            except Exception as exc:
                if attempt == 1 and _session_lost(exc) and connection is not None:
                    # the server no longer knows the session (it was restarted): the
                    # request was refused unrun, so with restart=True it is sent again
                    connection.failure = "the server no longer knows our session (restarted?)"
                    connection.stop.set()
                    if self._restart:
                        continue
                gone = await self._why_closed(exc)
                why = (
                    f"{self.label} stopped during the call: {gone}" if gone else describe_error(exc)
                )
                raise ToolError(why) from exc
        # changes the server announced before answering are listed before we return,
        # so that the next step offers them (bounded: the result is never held long)
        if not await self._listing.settle(self._init_seconds):
            logger.warning(
                "%s: the tool list it announced did not arrive within %g s; going on",
                self.label,
                self._init_seconds,
            )
        return result_value(result)

    async def _why_closed(self, exc: Exception) -> str | None:
        """Why the server is gone, after a request failed with ``exc``: when the SDK
        says the connection closed, the failure that closed it is waited for (a
        moment) so the call can name it."""
        gone = await self._gone()
        connection = self._connection
        if gone is None and connection is not None and _closed(exc):
            with trio.move_on_after(_SETTLE_SECONDS):
                await connection.done.wait()
            gone = await self._gone()
        return gone

    async def _usable(self) -> ClientSession:
        """The session a call goes to; a ``ToolError`` saying why when there is
        none (closed, or the server gone and not to be restarted, or its restart
        failed)."""
        if self._closed or self._connection is None:
            raise ToolError(f"{self.label} is closed")
        gone = await self._gone()
        if gone is not None:
            if not self._restart:
                raise ToolError(f"{self.label} is not running: {gone}")
            await self._reconnect(gone)
        session = self._connection.session
        if session is None:
            raise ToolError(f"{self.label} is not running: {await self._gone() or 'it ended'}")
        return session

    async def _reconnect(self, gone: str) -> None:
        """``restart=True``: end the connection that is gone and open another one.
        One call tries it; the calls that waited meanwhile take its outcome (a
        failed restart is not tried again by each of them). A ``ToolError`` if it
        failed."""
        tried = self._restarts
        async with self._reconnecting:
            if self._closed:
                raise ToolError(f"{self.label} is closed")
            if self._restarts != tried:  # another call tried while this one waited
                if self._restart_failed is not None:
                    raise ToolError(self._restart_failed)
                return
            if await self._gone() is None:
                return
            self._restarts += 1
            logger.warning("%s is not running (%s): starting it again", self.label, gone)
            old = self._connection
            assert old is not None
            old.stop.set()
            await old.done.wait()
            try:
                await self._connect()
            except (Exception, BaseExceptionGroup) as exc:
                failure = _failure_in(exc)
                if failure is None:
                    raise
                leaf = _leaf(failure)
                why = str(leaf) if isinstance(leaf, MCPServerError) else describe(leaf)
                self._restart_failed = (
                    f"{self.label} is not running ({gone}) and could not be restarted: {why}"
                )
                raise ToolError(self._restart_failed) from exc
            self._restart_failed = None

    async def _relist(self) -> None:
        """A listing after an announced change; a failure is logged (not while the
        session closes: that one is expected)."""
        try:
            await self._list()
        except (MCPServerError, RuntimeError) as exc:
            if not self._closed:
                logger.warning("%s: could not refresh the tool list: %s", self.label, exc)

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, Exception):
            self._noise.note(describe_error(message))

    async def _on_log(self, params: mcp_types.LoggingMessageNotificationParams) -> None:
        logger.debug("%s log (%s): %.2000s", self.label, params.level, params.data)


async def _call_tool(
    session: ClientSession,
    name: str,
    arguments: dict[str, Any],
    on_progress: ProgressFnT | None,
) -> mcp_types.CallToolResult:
    """``tools/call``, its result left unchecked against the tool's ``outputSchema``:
    the SDK's ``call_tool`` checks it with ``jsonschema`` on the event loop, where a
    server's ``pattern`` (``^(a+)+$``) or ``$ref`` bomb holds it for hours, and the
    result is the server's word whatever its own schema says."""
    request = mcp_types.CallToolRequest(
        params=mcp_types.CallToolRequestParams(name=name, arguments=arguments)
    )
    return await session.send_request(
        request, mcp_types.CallToolResult, progress_callback=on_progress
    )


def _failure_in(exc: BaseException) -> BaseException | None:
    """What failed in ``exc``, leaving out the cancellations beside it (None when
    it is only cancellations: those propagate as they are)."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1]
    return None if isinstance(exc, trio.Cancelled) else exc


def _closed(exc: Exception) -> bool:
    """Whether ``exc`` is the SDK's "connection closed" error of a request."""
    return getattr(getattr(exc, "error", None), "code", None) == mcp_types.CONNECTION_CLOSED


def _session_lost(exc: Exception) -> bool:
    """Whether ``exc`` says the server does not know our session (over HTTP, a
    server that was restarted answers 404, which the SDK reports so)."""
    error = getattr(exc, "error", None)
    message = getattr(error, "message", "")
    return isinstance(message, str) and "session not found" in message.lower()


def _leaf(exc: BaseException) -> BaseException:
    return first_leaf(exc) if isinstance(exc, BaseExceptionGroup) else exc
