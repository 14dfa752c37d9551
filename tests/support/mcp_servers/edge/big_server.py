"""An MCP server (SDK's MCPServer): `big(mb)` returns a text of `mb` megabytes
(a file read, a page fetched); `noise(mb)` writes `mb` MB to stderr then answers."""

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("big")


@server.tool()
def big(mb: int) -> str:
    """A big text."""
    return "x" * (mb * 1024 * 1024)


@server.tool()
def noise(mb: int, newlines: bool) -> str:
    """Flood stderr."""
    chunk = ("y" * 1023 + "\n") if newlines else "y" * 1024
    for _ in range(mb * 1024):
        sys.stderr.write(chunk)
    sys.stderr.flush()
    return "done"


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


server.run()
