"""An MCP server (SDK's MCPServer) whose tool `storm` starts a background task that
sends notifications/tools/list_changed every STORM_MS milliseconds (as a server
watching a busy directory might); tools/list takes LIST_MS milliseconds (as an
aggregating server's might); and `add`."""

import asyncio
import os
import sys
import traceback

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("storm")
INTERVAL = float(os.environ.get("STORM_MS", "2")) / 1000
LIST_DELAY = float(os.environ.get("LIST_MS", "0")) / 1000
TASKS = []
_list_tools = server.list_tools


LISTED = [0]


async def slow_list_tools():
    LISTED[0] += 1
    if LISTED[0] > int(os.environ.get("FAST_LISTS", "0")):
        await asyncio.sleep(LIST_DELAY)
    return await _list_tools()


server.list_tools = slow_list_tools


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
async def notify(ctx: Context) -> str:
    """Say the tool list changed, then answer."""
    await ctx.session.send_tool_list_changed()
    return "notified"


@server.tool()
async def storm(ctx: Context) -> str:
    """Start sending tools/list_changed every few milliseconds."""
    session = ctx.session

    async def loop():
        try:
            while True:
                await session.send_tool_list_changed()
                await asyncio.sleep(INTERVAL)
        except BaseException:
            traceback.print_exc(file=sys.stderr)
            raise

    TASKS.append(asyncio.get_running_loop().create_task(loop()))
    return "storming"


server.run()
