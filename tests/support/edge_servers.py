"""The MCP servers for edge cases (tests/support/mcp_servers/edge/), started over
stdio, and a call through a registry as the agent makes it."""

from __future__ import annotations

import sys

from paths import EDGE_SERVERS

from trio_agent import ToolCall
from trio_agent.mcp import MCPServerStdio
from trio_agent.tools import ToolRegistry, execute_tool_call

HERE = EDGE_SERVERS


def edge_server(script: str, **kwargs) -> MCPServerStdio:
    return MCPServerStdio(sys.executable, [str(HERE / script)], **kwargs)


async def call_tool(tool_registry: ToolRegistry, name: str, arguments: dict):
    return await execute_tool_call(tool_registry, ToolCall("c1", name, arguments))
