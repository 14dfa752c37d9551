"""MCP servers as tool sources, over stdio and streamable HTTP (the ``[mcp]`` extra).

::

    from trio_agent.mcp import MCPServerStdio

    async with MCPServerStdio("uvx", ["mcp-server-fetch"], prefix="web") as server:
        agent = Agent(model=model, tools=server.tools())

Each server is an async context manager: entering starts the server (or
connects), answers ``initialize`` within ``init_seconds`` and lists the
tools; leaving ends the session and, for stdio, the server's whole process
group. ``server.tools()`` returns the current list as ordinary ``Tool``s
(refreshed when the server sends ``notifications/tools/list_changed``;
``await server.refresh()`` re-lists at once).

A call checks its arguments against our limits and the tool's
``inputSchema`` before sending them; text content becomes the result text,
images become ``ImageBlock``s, ``structuredContent`` is the result when
there is no content, and an ``isError`` result, a server error, a protocol
error or a server that died is an error result the model sees, never a
failed run. Cancelling a call sends the protocol's ``notifications/cancelled``
for it and returns at once; the server keeps serving. Server progress
becomes ``tool.updated`` events (the tools are ``progress=True``). A
server that stops after entry gives error results; ``restart=True`` starts
it again (or reconnects) on the next call.
"""

from __future__ import annotations

from .._public import publish as _publish
from ._servers import INIT_SECONDS as INIT_SECONDS
from ._servers import MCPServerHTTP as MCPServerHTTP
from ._servers import MCPServerStdio as MCPServerStdio
from ._session import MCPServerBase as MCPServerBase
from ._session import MCPServerError as MCPServerError

__all__ = [
    "INIT_SECONDS",
    "MCPServerBase",
    "MCPServerError",
    "MCPServerHTTP",
    "MCPServerStdio",
]

_publish(globals())  # each name says this page is its module (tracebacks, reprs, pickles)
