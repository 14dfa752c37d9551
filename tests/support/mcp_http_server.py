"""The fixture MCP server (``mcp_servers/demo.py``) over streamable HTTP on a free
loopback port, for the tests that need one (the SDK's client and our CLI)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

DEMO = Path(__file__).parent / "mcp_servers" / "demo.py"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def start_demo_http(
    port: int, wait: float = 60.0, script: Path = DEMO, env: dict[str, str] | None = None
) -> trio.Process:
    """Start the demo server (or ``script``, taking ``--http PORT`` as it does, with
    ``env`` added to ours) over HTTP on ``port``; return once it accepts
    connections (the caller ends the process)."""
    process = await trio.lowlevel.open_process(
        [sys.executable, str(script), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=None if env is None else {**os.environ, **env},
    )
    ready = False
    try:
        with trio.fail_after(wait):
            while True:
                try:
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                except OSError:
                    await trio.sleep(0.02)
                    continue
                await stream.aclose()
                ready = True
                return process
    finally:
        if not ready:  # failed or cancelled: the process is not left behind
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()


@asynccontextmanager
async def demo_over_http(
    wait: float = 60.0,
    port: int | None = None,
    script: Path = DEMO,
    env: dict[str, str] | None = None,
) -> AsyncIterator[str]:
    """Serve the demo server (or ``script``, with ``env``) over HTTP (on ``port``,
    else a free one); yield its URL once it accepts connections; end the process
    afterwards (shielded)."""
    port = free_port() if port is None else port
    process = await start_demo_http(port, wait, script, env)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        with trio.CancelScope(shield=True):
            await process.wait()
