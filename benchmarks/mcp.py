"""MCP tool calls (issue 20): the per-call cost of our wrapper over the SDK's own
``ClientSession.call_tool``, on one stdio server (tests/support/mcp_servers/demo.py, its
trivial ``add`` tool), in one run.

Three ways to make the same call, interleaved (each round makes ``--calls`` calls
each way, the order of the ways rotated every round), timed per call, medians
of ``--rounds`` rounds:

- ``raw``: ``ClientSession.call_tool("add", ...)`` on the session our
  ``MCPServerStdio`` drives (the same process, the same pipes);
- ``Tool.execute``: the ``Tool`` that ``server.tools()`` gives: arguments
  checked (limits, the tool's ``inputSchema``), a progress token sent, the
  result mapped to a ``str``;
- ``execute_tool_call``: what an agent's step does with a model's call:
  lookup, ``Tool.execute``, the result message.

With ``--peer-python PATH`` (a Python with ``pydantic-ai-slim[mcp]``), the same
is measured for pydantic-ai in that interpreter, under asyncio:
``MCPToolset.direct_call_tool`` against ``call_tool`` on the ``ClientSession``
its FastMCP client drives. Run::

    .venv/bin/python benchmarks/mcp.py     # --calls 200 --rounds 15 --peer-python PATH
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _figures import add_json_option, json_output, record

HERE = Path(__file__).resolve().parent
if sys.path and Path(sys.path[0] or ".").resolve() == HERE:
    del sys.path[0]  # this file is mcp.py: the SDK's package ``mcp`` must not be it
DEMO = HERE.parent / "tests" / "support" / "mcp_servers" / "demo.py"
ARGS = {"a": 20, "b": 22}

Call = Callable[[], Awaitable[Any]]


async def measure(ways: dict[str, Call], calls: int, rounds: int) -> dict:
    """Per call of each way, the medians over ``rounds`` interleaved rounds: wall
    seconds, and CPU seconds of this process (the client's side alone: the server
    is another process)."""
    for call in ways.values():  # warm up each path (imports, caches, the server's own)
        for _ in range(20):
            await call()
    names = list(ways)
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            call = ways[name]
            start, start_cpu = time.perf_counter(), time.process_time()
            for _ in range(calls):
                await call()
            wall[name].append((time.perf_counter() - start) / calls)
            cpu[name].append((time.process_time() - start_cpu) / calls)
    return {n: (statistics.median(wall[n]), statistics.median(cpu[n])) for n in names}


async def ours(calls: int, rounds: int) -> dict:
    from trio_agent import ToolCall, ToolRegistry, execute_tool_call
    from trio_agent.mcp import MCPServerStdio

    async with MCPServerStdio(sys.executable, [str(DEMO)]) as server:
        tools = ToolRegistry(server.tools())
        add = tools.get("add")
        assert add is not None
        session = server.session  # the SDK's ClientSession our wrapper drives
        assert session is not None
        call = ToolCall("c1", "add", ARGS)

        async def raw() -> Any:
            result = await session.call_tool("add", ARGS)
            assert not result.is_error
            return result

        async def execute() -> Any:
            assert await add.execute(ARGS) == "42"

        async def through_registry() -> Any:
            assert (await execute_tool_call(tools, call)).content == "42"

        ways = {"raw": raw, "Tool.execute": execute, "execute_tool_call": through_registry}
        return await measure(ways, calls, rounds)


async def pydantic_ai(calls: int, rounds: int) -> dict:
    from fastmcp.client.transports import StdioTransport
    from pydantic_ai.mcp import MCPToolset

    toolset = MCPToolset(StdioTransport(command=sys.executable, args=[str(DEMO)]))
    async with toolset:
        session = toolset.client.session

        async def raw() -> Any:
            result = await session.call_tool("add", ARGS)
            assert not result.is_error
            return result

        async def direct() -> Any:
            assert await toolset.direct_call_tool("add", ARGS) == 42

        return await measure({"raw": raw, "MCPToolset.direct_call_tool": direct}, calls, rounds)


def report(who: str, title: str, medians: dict) -> None:
    raw_wall, raw_cpu = medians["raw"]
    print(title)
    record(
        **{who: {name: {"wall_us": w * 1e6, "cpu_us": c * 1e6} for name, (w, c) in medians.items()}}
    )
    print(f"  {'':28} {'wall us/call':>12} {'vs raw':>8} {'client CPU us':>14} {'vs raw':>8}")
    for name, (wall, cpu) in medians.items():
        over_wall = "" if name == "raw" else f"{wall / raw_wall - 1:+.1%}"
        over_cpu = "" if name == "raw" else f"{cpu / raw_cpu - 1:+.1%}"
        print(f"  {name:28} {wall * 1e6:12.1f} {over_wall:>8} {cpu * 1e6:14.1f} {over_cpu:>8}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per way per round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--peer-python", metavar="PATH", help="a Python with pydantic-ai[mcp]")
    parser.add_argument("--pydantic-ai", action="store_true", help=argparse.SUPPRESS)
    add_json_option(parser)
    args = parser.parse_args()
    if args.pydantic_ai:  # in the peer's interpreter: print the medians as JSON
        import asyncio

        print(json.dumps(asyncio.run(pydantic_ai(args.calls, args.rounds))))
        return

    with json_output(args.json):
        compare(args)


def compare(args: argparse.Namespace) -> None:
    """Measure ours, and pydantic-ai's with ``--peer-python``; print both."""
    import trio

    report(
        "trio-agent",
        f"trio-agent on trio, stdio, `add` (medians of {args.rounds} rounds of {args.calls}):",
        trio.run(ours, args.calls, args.rounds),
    )
    if args.peer_python:
        sizes = ["--calls", str(args.calls), "--rounds", str(args.rounds)]
        done = subprocess.run(
            [args.peer_python, __file__, "--pydantic-ai", *sizes],
            capture_output=True,
            text=True,
            check=True,
        )
        report(
            "pydantic-ai",
            f"pydantic-ai on asyncio, stdio, `add` (medians of {args.rounds} rounds "
            f"of {args.calls}):",
            json.loads(done.stdout.splitlines()[-1]),
        )


if __name__ == "__main__":
    main()
