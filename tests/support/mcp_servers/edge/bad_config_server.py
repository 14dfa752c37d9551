"""An MCP server (SDK's MCPServer) that refuses to start without its configuration,
saying why on stderr, as real servers do."""

import os
import sys

from mcp.server.mcpserver import MCPServer

if "DATABASE_URL" not in os.environ:
    print("error: DATABASE_URL is not set; pass it with --mcp-env DATABASE_URL", file=sys.stderr)
    sys.exit(1)
server = MCPServer("db")
server.run()
