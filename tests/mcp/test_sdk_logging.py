"""The MCP SDK's loggers are as silent as ours unless the application configures
logging (hardening issue): an MCP server over HTTP that answered with what is
not JSON printed the SDK's traceback on stderr, through logging's last resort.
Server: tests/support/mcp_servers/edge/raw_server.py with NOT_JSON=1."""

from __future__ import annotations

import subprocess
import sys

import pytest
import trio

pytest.importorskip("mcp")

from mcp_http_server import demo_over_http
from paths import EDGE_SERVERS

RAW = EDGE_SERVERS / "raw_server.py"
CLIENT = """
import logging, sys, trio
from trio_agent.mcp import MCPServerHTTP
if sys.argv[2] == "configured":
    logging.basicConfig()

async def main():
    async with MCPServerHTTP(sys.argv[1]) as server:
        try:
            await server.tools()[0].execute({"a": 1})
        except Exception as exc:
            print("error result:", type(exc).__name__)

trio.run(main)
"""


async def run_client(url: str, logging_: str) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(
        [sys.executable, "-c", CLIENT, url, logging_], capture_stdout=True, capture_stderr=True
    )


async def test_the_sdks_errors_reach_no_terminal_unless_logging_is_configured():
    with trio.fail_after(120):
        async with demo_over_http(script=RAW, env={"NOT_JSON": "1"}) as url:
            silent = await run_client(url, "unconfigured")
            configured = await run_client(url, "configured")
    assert b"error result: ToolError" in silent.stdout
    assert silent.stderr == b""  # observed: "Error parsing JSON response", a traceback
    # an application's own handlers still get the SDK's records
    assert b"Error parsing JSON response" in configured.stderr
