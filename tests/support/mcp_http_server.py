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
    """``serve_demo_http`` on a given port: the process."""
    process, _ = await serve_demo_http(port, wait, script, env)
    return process


async def serve_demo_http(
    port: int, wait: float = 60.0, script: Path = DEMO, env: dict[str, str] | None = None
) -> tuple[trio.Process, int]:
    """Start the demo server (or ``script``, taking ``--http-fd FD`` as it does, with
    ``env`` added to ours) over HTTP on ``port`` (0: a free one); return it and its port once it
    answers HTTP (the caller ends the process).

    The port is bound here and the listening socket handed to the server: a port
    probed free and bound later by the server could be taken in between by another
    test's server (the suite runs in several processes), and a readiness check would
    then have found that other server while ours failed to start."""
    listening = socket.socket()
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind(("127.0.0.1", port))
        listening.listen(128)
        port = listening.getsockname()[1]
        process = await trio.lowlevel.open_process(
            [sys.executable, str(script), "--http-fd", str(listening.fileno())],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=None if env is None else {**os.environ, **env},
            pass_fds=(listening.fileno(),),
        )
    finally:
        listening.close()  # the server holds it now; down with the server, as a real one
    ready = False
    try:
        with trio.fail_after(wait):
            while not await _answers(port):
                if process.poll() is not None:
                    raise RuntimeError(f"{script.name} exited with {process.returncode}")
                await trio.sleep(0.02)
            ready = True
            return process, port
    finally:
        if not ready:  # failed or cancelled: the process is not left behind
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()


async def _answers(port: int) -> bool:
    """Whether the server on ``port`` answers an HTTP request yet (connections
    queue on the socket before it accepts them, so a connection alone says nothing)."""
    try:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
    except OSError:
        return False
    try:
        await stream.send_all(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        return bool(await stream.receive_some(1))
    except (OSError, trio.BrokenResourceError):
        return False
    finally:
        await stream.aclose()


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
    process, port = await serve_demo_http(0 if port is None else port, wait, script, env)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        with trio.CancelScope(shield=True):
            await process.wait()
