"""``MCPServerStdio`` and ``MCPServerHTTP``: the two transports of an MCP server as a
tool source (the ``[mcp]`` extra), on what both share (``_session``). The package
page says how a server is used and what a call does."""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Collection, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Final, final

import httpx2
import trio
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from .._log import quiet_dependency, safe_url
from ._session import MCPServerBase, MCPServerError, Streams
from ._stdio import EXIT_DRAIN, StdioProcess

__all__ = ["INIT_SECONDS", "MCPServerBase", "MCPServerError", "MCPServerHTTP", "MCPServerStdio"]

# The SDK's loggers ("mcp.*", and its ClientSession's, named "client") are silent
# unless the application configures logging, as ours are: without this, a server
# that answers HTTP with what is not JSON prints the SDK's traceback on stderr.
quiet_dependency("mcp")
quiet_dependency("client")

INIT_SECONDS: Final = 30.0
"""Default bound on the server's answer to ``initialize`` (and, over HTTP,
on reaching it)."""
_LABEL_CHARS: Final = 80
MAX_HTTP_BODY: Final = 64 * 1024 * 1024
"""Bytes (decoded) of one HTTP answer that is no event stream, as of one stdio
line; a longer one is refused (its request fails). An event stream's events are
bounded by the SDK (1 MiB each)."""


@final
class MCPServerStdio(MCPServerBase):
    """An MCP server run as a subprocess, spoken to over its stdin and stdout.

    ``command`` and ``args`` are run directly (no shell) in a new session, with
    a few safe variables of our environment (``PATH``, ``HOME``, ...) and
    ``env`` over them, in ``cwd``. The server's stderr goes to ``logging``
    (logger ``trio_agent.mcp``, DEBUG). Tool names are ``{prefix}_{name}``
    when ``prefix`` is given; ``allow`` keeps only the named server tools,
    ``deny`` drops the named ones. ``progress=False`` makes the tools plain
    (no progress token is sent, no ``tool.updated`` events).

    Failure: a server that cannot start or does not answer ``initialize``
    within ``init_seconds`` is an ``MCPServerError`` at entry; one that dies
    gives the call in flight an error result and later calls an error result
    saying it exited and how, or with ``restart=True`` the next call starts
    it again (once, however many calls wait for it). Leaving the block closes stdin, waits a moment,
    then ends the server's process group (SIGTERM, SIGKILL); it is shielded
    and bounded, so a cancelled caller cannot leak the process.
    """

    def __init__(
        self,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        prefix: str | None = None,
        *,
        allow: Collection[str] | None = None,
        deny: Collection[str] = (),
        init_seconds: float = INIT_SECONDS,
        progress: bool = True,
        restart: bool = False,
    ) -> None:
        if isinstance(args, str):
            raise TypeError("args is a sequence of arguments, not one str")
        super().__init__(
            f"MCP server {_command_label(command, args)!r}",
            prefix,
            allow,
            deny,
            init_seconds,
            progress,
            restart,
        )
        self._start = (command, tuple(args), env, cwd)
        self._process = StdioProcess(command, args, env, cwd, self.label)

    @property
    def pid(self) -> int | None:
        """The server process's id (also its process group's) once started."""
        process = self._process.process
        return None if process is None else process.pid

    async def _open(self, stack: AsyncExitStack, nursery: trio.Nursery) -> Streams:
        if self._process.process is not None:  # a restart: a process of its own
            self._process = StdioProcess(*self._start, self.label)
        try:
            read, write = await self._process.start(nursery)
        except OSError as exc:
            raise MCPServerError(f"{self.label} could not start: {exc}") from exc
        stack.push_async_callback(self._process.stop)
        stack.push_async_callback(write.aclose)
        stack.push_async_callback(read.aclose)
        return read, write

    async def _transport_gone(self) -> str | None:
        if not self._process.exited.is_set():
            return None
        if self._process.reason is not None:
            return self._process.reason
        process = self._process.process
        if process is not None and process.returncode is None:
            with trio.move_on_after(0.5):  # stdout ended: the exit status is due
                await process.wait()
        code = self._process.returncode()
        if code is None:
            return "it closed its stdout"
        return f"it exited with status {code}" if code >= 0 else f"it was killed by signal {-code}"

    async def _last_words(self) -> str | None:
        process = self._process
        if process.process is not None and process.process.returncode is not None:
            with trio.move_on_after(EXIT_DRAIN):
                await process.stderr_done.wait()
        return " | ".join(process.stderr_tail) or None


def _command_label(command: str, args: Sequence[str]) -> str:
    """How a stdio server is named in messages: its command and what it runs (the
    first argument that is no option, nor perhaps an option's value), never the
    rest of its arguments, which may hold a token."""
    shown = [os.path.basename(command)]
    after_option = False
    for arg in args:
        if arg.startswith("-"):
            after_option = arg.startswith("--") and "=" not in arg
            continue
        if not after_option and "=" not in arg:
            shown.append(arg if len(arg) <= _LABEL_CHARS else "..." + arg[-_LABEL_CHARS:])
            break
        after_option = False
    return shlex.join(shown)


@final
class MCPServerHTTP(MCPServerBase):
    """An MCP server reached over streamable HTTP at ``url``, with ``headers``
    (``Authorization``, say) on every request. Options as for
    ``MCPServerStdio``. A server that cannot be reached, or does not answer
    ``initialize`` within ``init_seconds``, is an ``MCPServerError`` at entry;
    one that goes down later gives calls error results (``restart=True``: the
    next call connects again). Leaving the block ends the HTTP session
    (``DELETE``) and closes the connections."""

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str] | None = None,
        prefix: str | None = None,
        *,
        allow: Collection[str] | None = None,
        deny: Collection[str] = (),
        init_seconds: float = INIT_SECONDS,
        progress: bool = True,
        restart: bool = False,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be http:// or https://, got {url!r}")
        super().__init__(
            f"MCP server {safe_url(url)!r}", prefix, allow, deny, init_seconds, progress, restart
        )
        self.url = url
        self._headers = dict(headers or {})

    async def _open(self, stack: AsyncExitStack, nursery: trio.Nursery) -> Streams:
        client = await stack.enter_async_context(create_mcp_http_client(headers=self._headers))
        client.event_hooks["response"].append(_bound_body)
        read, write = await stack.enter_async_context(
            streamable_http_client(self.url, http_client=client)
        )
        return read, write  # type: ignore[return-value]


class _TooLong(httpx2.StreamError):
    """An HTTP answer over ``MAX_HTTP_BODY``; the SDK makes it its request's error."""


async def _bound_body(response: httpx2.Response) -> None:
    """A response hook: an answer that is no event stream is read (by the SDK's
    ``aread``) at most ``MAX_HTTP_BODY`` bytes, then refused. The SDK read it
    whole: a server streaming an endless JSON answer filled our memory.
    Cancellation: the read stops at its await, as httpx's own does."""
    if response.headers.get("content-type", "").lower().startswith("text/event-stream"):
        return

    async def aread() -> bytes:
        parts: list[bytes] = []
        size = 0
        async with contextlib.aclosing(response.aiter_bytes()) as chunks:
            async for part in chunks:
                size += len(part)
                if size > MAX_HTTP_BODY:
                    raise _TooLong(f"the server's answer is over {MAX_HTTP_BODY // 2**20} MiB")
                parts.append(part)
        return b"".join(parts)

    setattr(response, "aread", aread)  # noqa: B010  # the SDK calls response.aread()
