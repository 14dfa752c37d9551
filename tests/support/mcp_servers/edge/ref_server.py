"""An MCP server (SDK's MCPServer) whose tool `lookup` has an inputSchema with a
remote $ref, set from the env var REF_URL."""

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("ref")


@server.tool()
def lookup(x: str) -> str:
    """Look x up."""
    return f"looked up {x}"


server._tool_manager.get_tool("lookup").parameters = {
    "type": "object",
    "properties": {"x": {"$ref": os.environ["REF_URL"]}},
    "required": ["x"],
}
server.run()
