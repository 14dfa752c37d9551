"""An MCP server for the tests, written with the SDK's own ``MCPServer``.

Run over stdio (``python demo.py``) or streamable HTTP
(``python demo.py --http PORT``). Tools: ``add``, ``echo``, ``weather``
(structured output), ``fail`` (an ``isError`` result), ``picture`` (an
image), ``slow`` (sleeps, records its cancellation in ``MCP_DEMO_RECORD``),
``count`` (progress), ``crash`` (the process dies mid-call), ``grow``
(adds a tool and sends ``tools/list_changed``), ``spawn`` (a child
process in the server's group). With ``MCP_DEMO_ONCE`` set to a path, it
starts only once (a restart then fails).
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent
from pydantic import BaseModel

server = MCPServer("demo")
RECORD = os.environ.get("MCP_DEMO_RECORD")
ONCE = os.environ.get("MCP_DEMO_ONCE")
"""A file path: the server starts only when it is absent (and creates it)."""
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
    )
).decode()


def _record(line: str) -> None:
    if RECORD:
        with open(RECORD, "a") as file:
            file.write(line + "\n")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Return the text."""
    print(f"echo called with {text!r}", file=sys.stderr, flush=True)
    return text


class Weather(BaseModel):
    city: str
    celsius: float


@server.tool()
def weather(city: str) -> Weather:
    """The weather in a city, as structured output."""
    return Weather(city=city, celsius=21.5)


@server.tool()
def fail(reason: str) -> str:
    """Always fails."""
    raise ToolError(f"failed on purpose: {reason}")


@server.tool()
def picture() -> list[object]:
    """A one-pixel PNG and a caption."""
    return ["a pixel", ImageContent(type="image", data=PNG, mime_type="image/png")]


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep, recording a cancellation."""
    _record("slow started")
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        _record("slow cancelled")
        raise
    _record("slow finished")
    return "slept"


@server.tool()
async def count(steps: int, ctx: Context) -> str:
    """Count, reporting progress at each step."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step}")
        await anyio.sleep(0.06)
    return f"counted {steps}"


@server.tool()
async def crash() -> str:
    """The server process dies mid-call."""
    await anyio.sleep(0.05)
    os._exit(3)


@server.tool()
async def grow(ctx: Context) -> str:
    """Add a tool ``extra`` and tell the client the list changed."""

    def extra() -> str:
        """Added later."""
        return "extra"

    server.add_tool(extra)
    await ctx.session.send_tool_list_changed()
    return "grown"


@server.tool()
def spawn() -> int:
    """Start a long sleep in the server's process group; return its pid."""
    child = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL)
    return child.pid


if __name__ == "__main__":
    if ONCE:
        if os.path.exists(ONCE):
            print("started once already", file=sys.stderr)
            sys.exit(5)
        open(ONCE, "w").close()
    if len(sys.argv) > 2 and sys.argv[1] == "--http-fd":
        # the tests bind the port and hand over the listening socket: no other
        # process can take the port between a probe and the bind
        import socket

        import uvicorn

        listening = socket.socket(fileno=int(sys.argv[2]))
        config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
        uvicorn.Server(config).run(sockets=[listening])
    elif len(sys.argv) > 2 and sys.argv[1] == "--http":
        import uvicorn

        uvicorn.run(
            server.streamable_http_app(),
            host="127.0.0.1",
            port=int(sys.argv[2]),
            log_level="warning",
        )
    else:
        server.run()
