"""An MCP tool schema nested too deeply is a clear error, never "Connection
closed" nor a raw RecursionError (hardening issue): the SDK cannot parse a
listing whose JSON nests past 200 levels, so entry fails saying a schema is
nested too deeply; a schema the SDK read but we cannot take leaves that tool
out with a warning, the server's other tools offered. Server:
tests/support/mcp_servers/edge/raw_server.py (it writes what the SDK would not)."""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

pytest.importorskip("mcp")

import mcp.types as mcp_types
from mcp_http_server import demo_over_http
from paths import EDGE_SERVERS

from trio_agent.mcp import MCPServerBase, MCPServerError, MCPServerHTTP, MCPServerStdio
from trio_agent.mcp import _tools as _mcp_tools

RAW = EDGE_SERVERS / "raw_server.py"
pytestmark = pytest.mark.filterwarnings(
    "ignore:Async generator 'http(x|core)2\\.:ResourceWarning"  # README: the SDK's, over HTTP
)


@asynccontextmanager
async def raw_server(transport: str, depth: int) -> AsyncIterator[MCPServerBase]:
    env = {"DEPTH": str(depth)}
    if transport == "stdio":
        yield MCPServerStdio(sys.executable, [str(RAW)], env=env)
        return
    async with demo_over_http(script=RAW, env=env) as url:
        yield MCPServerHTTP(url)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_listing_nested_too_deeply_for_the_sdk_says_so_at_entry(transport):
    """A tools/list whose inputSchema nests 5,000 deep was refused as "Connection
    closed" (over stdio, later "the server's answer could not be read
    (ValidationError)"; over HTTP, pydantic's report and a traceback)."""
    with trio.fail_after(60):
        async with raw_server(transport, 5000) as server:
            with pytest.raises(MCPServerError) as caught:
                async with server:
                    pass
    message = str(caught.value)
    assert "tools/list failed: the server sent a tool schema nested too deeply to read" in message
    assert "Connection closed" not in message and "validation error" not in message


async def test_a_tool_whose_schema_is_too_deep_to_take_is_left_out_by_name(monkeypatch, caplog):
    """A schema the SDK read but that nests past what we copy would raise from
    the listing (a RecursionError in msgspec at ~1,000 levels) and cost the
    server all its tools; the limit is lowered here to reach it with a schema
    the SDK can read."""
    monkeypatch.setattr(_mcp_tools, "_MAX_SCHEMA_DEPTH", 50)
    with trio.fail_after(60):
        async with raw_server("stdio", 60) as server, server:
            assert [tool.name for tool in server.tools()] == ["ok"]
            assert await server.tools()[0].execute({"a": 1}) == "done"
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        "tool 'deep' left out: its inputSchema is nested more than 50 levels deep" in m
        for m in warned
    ), warned


def test_the_schema_copy_refuses_a_deep_schema_without_recursing():
    """``parameters_of`` round-trips the schema through msgspec, which raises
    RecursionError past ~1,000 levels."""
    schema: dict = {"type": "string"}
    for _ in range(5000):
        schema = {"type": "object", "properties": {"x": schema}}
    listed = mcp_types.Tool.model_construct(name="deep", input_schema=schema)
    with pytest.raises(ValueError, match="nested more than 256 levels deep"):
        _mcp_tools.parameters_of(listed)
