"""An MCP server (SDK's MCPServer) with tools whose inputSchemas are odd: `arr`
(type array), `nested` (pydantic-style $defs/$ref), `dangling` ($ref to a missing
$defs entry), `notype` (no type, properties only)."""

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

server = MCPServer("odd")


class Point(BaseModel):
    x: int
    y: int


@server.tool()
def arr(items: list[int]) -> str:
    """Takes an array."""
    return str(items)


@server.tool()
def nested(p: Point) -> str:
    """Takes a point."""
    return f"{p.x},{p.y}"


@server.tool()
def dangling(q: str) -> str:
    """A $ref that resolves nowhere."""
    return q


@server.tool()
def notype(q: str) -> str:
    """No type."""
    return q


server._tool_manager.get_tool("dangling").parameters = {
    "type": "object",
    "properties": {"q": {"$ref": "#/$defs/Missing"}},
}
print(
    "nested schema:",
    server._tool_manager.get_tool("nested").parameters,
    file=__import__("sys").stderr,
)
server.run()
