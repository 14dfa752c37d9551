"""An MCP server (SDK's MCPServer): `tree(depth)` returns a JSON value nested `depth`
levels (a DOM or AST dump, say) as text content; `deepen` adds a tool whose
inputSchema is nested 120 levels and announces the change."""

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent

server = MCPServer("deep")


@server.tool()
def tree(depth: int) -> CallToolResult:
    """A nested value, as structured content (a DOM or AST dump, say)."""
    value: object = "leaf"
    for _ in range(depth):
        value = {"child": value}
    return CallToolResult(
        content=[TextContent(type="text", text="a tree")], structured_content={"tree": value}
    )


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
async def deepen(ctx: Context) -> str:
    """Add a tool with a deeply nested schema."""

    def nested(x: str) -> str:
        """Deep."""
        return x

    server.add_tool(nested)
    schema: dict = {"type": "string"}
    for _ in range(120):
        schema = {"type": "object", "properties": {"x": schema}}
    server._tool_manager.get_tool("nested").parameters = schema
    await ctx.session.send_tool_list_changed()
    return "deepened"


server.run()
