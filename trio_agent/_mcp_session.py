"""What both MCP server kinds share: the session's life, the tool list, calls.

A subclass opens the transport (``_open``); this class runs the SDK's
``ClientSession`` over it, bounds ``initialize``, keeps the current tool
list (refreshed on ``notifications/tools/list_changed``) and makes each
listed tool a ``Tool`` whose calls go through ``_call``.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Collection
from types import TracebackType
from typing import Any, Final, Self

import mcp.types as mcp_types
import trio
from mcp.client.session import ClientSession, IncomingMessage

from ._errors import describe, first_leaf
from ._mcp_stdio import Streams, logger
from ._mcp_tools import (
    Validator,
    check_call,
    describe_error,
    parameters_of,
    result_value,
    tool_names,
    validator,
)
from .tools import Tool, ToolError, tool_context

__all__ = ["MCPServerBase", "MCPServerError", "Streams"]

_PREFIX: Final = re.compile(r"[A-Za-z0-9_-]{1,32}\Z")
_MAX_PAGES: Final = 100
"""Pages of one ``tools/list``; a server that pages on past this is cut off there."""
_CLIENT: Final = mcp_types.Implementation(name="trio-agent", version="0.1.0")


class MCPServerError(Exception):
    """An MCP server could not be used: it did not start, did not answer
    ``initialize`` in time, refused it, or (HTTP) could not be reached."""


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
        self._tools: tuple[Tool, ...] = ()
        self._session: ClientSession | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._nursery: trio.Nursery | None = None
        self._refresh_wanted = trio.Event()
        self._changes = 0  # list_changed notifications received
        self._listed = 0  # of those, the ones a listing has taken in
        self._closed = False

    def tools(self) -> tuple[Tool, ...]:
        """The server's tools as it last listed them (filtered and named), as
        ordinary ``Tool``s. Cheap: call it before each step to see changes."""
        return self._tools

    async def _open(self, stack: contextlib.AsyncExitStack, nursery: trio.Nursery) -> Streams:
        """Open the transport; its teardown goes on ``stack``."""
        raise NotImplementedError

    async def _gone(self) -> str | None:
        """Why the server cannot answer any more, if it is known to be gone."""
        return None

    async def __aenter__(self) -> Self:
        """Start the server (or connect), ``initialize`` within ``init_seconds``,
        list the tools. ``MCPServerError`` if any of it fails; a cancelled entry
        ends what it started before the cancellation propagates."""
        if self._stack is not None or self._closed:
            raise RuntimeError(f"{self.label} can be entered once")
        stack = contextlib.AsyncExitStack()
        entered = False
        try:
            self._nursery = nursery = await stack.enter_async_context(trio.open_nursery())
            stack.callback(nursery.cancel_scope.cancel)  # after the transport has ended
            streams = await self._open(stack, nursery)
            session = ClientSession(
                *streams,
                message_handler=self._on_message,
                logging_callback=self._on_log,
                client_info=_CLIENT,
            )
            await stack.enter_async_context(session)
            await self._initialize(session)
            self._session = session
            await self._first_list()
            nursery.start_soon(self._refresh_loop)
            entered = True
        except (Exception, BaseExceptionGroup) as exc:
            # a transport failure (the SDK raises it from its task group, beside the
            # cancellations it caused): an MCPServerError; cancellations alone: below
            failure = exc.split(trio.Cancelled)[1] if isinstance(exc, BaseExceptionGroup) else exc
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
        if isinstance(exc, MCPServerError):
            return exc
        leaf = first_leaf(exc) if isinstance(exc, BaseExceptionGroup) else exc
        return MCPServerError(f"{self.label} could not be used: {describe(leaf)}")

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
        self._session = None
        if stack is not None:
            await stack.aclose()

    async def _initialize(self, session: ClientSession) -> None:
        with trio.move_on_after(self._init_seconds) as scope:
            try:
                await session.initialize()
            except Exception as exc:
                gone = await self._gone()
                raise MCPServerError(
                    f"{self.label} failed to initialize: {describe_error(exc)}"
                    + (f" ({gone})" if gone else "")
                ) from exc
        if scope.cancelled_caught:
            gone = await self._gone()
            raise MCPServerError(
                f"{self.label} did not answer initialize within {self._init_seconds:g} s"
                + (f" ({gone})" if gone else "")
            )

    async def _first_list(self) -> None:
        """The first ``tools/list``, bounded by ``init_seconds`` as ``initialize`` is."""
        with trio.move_on_after(self._init_seconds) as scope:
            await self.refresh()
        if scope.cancelled_caught:
            gone = await self._gone()
            raise MCPServerError(
                f"{self.label} did not list its tools within {self._init_seconds:g} s"
                + (f" ({gone})" if gone else "")
            )

    async def refresh(self) -> tuple[Tool, ...]:
        """List the server's tools again and return the new list (also what
        ``tools()`` returns from now on). ``MCPServerError`` if the listing fails.
        Cancellation leaves the previous list in place."""
        session = self._require_session()
        listed: list[mcp_types.Tool] = []
        cursor: str | None = None
        try:
            for _ in range(_MAX_PAGES):
                params = None if cursor is None else mcp_types.PaginatedRequestParams(cursor=cursor)
                page = await session.list_tools(params=params)
                listed.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
        except Exception as exc:
            raise MCPServerError(f"{self.label}: tools/list failed: {describe_error(exc)}") from exc
        names = tool_names(listed, self.prefix, self._allow, self._deny, self.label)
        self._tools = tuple(self._tool(name, listed_tool) for name, listed_tool in names)
        return self._tools

    def _require_session(self) -> ClientSession:
        if self._session is None:
            state = "closed" if self._closed else "not entered (use `async with`)"
            raise RuntimeError(f"{self.label} is {state}")
        return self._session

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
        )

    async def _call(self, name: str, arguments: dict[str, Any], check: Validator | None) -> Any:
        """Call tool ``name``: arguments checked first (``ToolArgumentsError``), the
        result mapped (``result_value``); any failure of the server or the protocol
        is a ``ToolError``. Cancellation: the SDK sends ``notifications/cancelled``
        for the request, then ``trio.Cancelled`` propagates at once."""
        checked = check_call(arguments, check)
        session = self._session
        if session is None:
            raise ToolError(f"{self.label} is closed")
        gone = await self._gone()
        if gone is not None:
            raise ToolError(f"{self.label} is not running: {gone}")
        context = tool_context()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            fraction = progress / total if total else None
            text = f"{progress:g}/{total:g}" if total else f"{progress:g}"
            context.report(message or text, fraction)

        try:
            result = await session.call_tool(
                name, checked, progress_callback=on_progress if self._progress else None
            )
        except Exception as exc:
            gone = await self._gone()
            why = f"{self.label} stopped during the call: {gone}" if gone else describe_error(exc)
            raise ToolError(why) from exc
        if self._listed < self._changes:  # the list changed during the call: the next
            await self._catch_up()  # step must see it, so it is listed before we return
        return result_value(result)

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, Exception):
            logger.warning("%s: %s", self.label, describe_error(message))
        elif isinstance(message, mcp_types.ToolListChangedNotification):
            self._changes += 1
            self._refresh_wanted.set()

    async def _on_log(self, params: mcp_types.LoggingMessageNotificationParams) -> None:
        logger.info("%s log (%s): %.2000s", self.label, params.level, params.data)

    async def _refresh_loop(self) -> None:
        """Re-list the tools each time the server says the list changed (changes
        that come while a listing runs are taken by the next one)."""
        while True:
            await self._refresh_wanted.wait()
            self._refresh_wanted = trio.Event()
            await self._catch_up()

    async def _catch_up(self) -> None:
        """List again until every change announced so far is taken in; a failure is
        logged (not while the session closes: that one is expected)."""
        while self._listed < self._changes:
            self._listed = self._changes
            try:
                await self.refresh()
            except (MCPServerError, RuntimeError) as exc:
                if not self._closed:
                    logger.warning("%s: could not refresh the tool list: %s", self.label, exc)
                return
