"""An MCP server (SDK's MCPServer) with TOOLS tools of 10 parameters each (as big
servers such as GitHub's have), and `notify`, which announces a list change."""

import os

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("many")


def make(i):
    def fn(
        a: str, b: str, c: int, d: int, e: bool, f: float, g: str, h: str, j: int, k: str
    ) -> str:
        return "ok"

    fn.__name__ = f"tool_{i}"
    fn.__doc__ = f"Tool number {i}."
    return fn


for i in range(int(os.environ.get("TOOLS", "100"))):
    server.add_tool(make(i))


@server.tool()
async def notify(ctx: Context) -> str:
    """Announce a list change."""
    await ctx.session.send_tool_list_changed()
    return "notified"


server.run()
