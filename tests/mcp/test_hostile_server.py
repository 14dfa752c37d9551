"""MCP servers that attack the client (hardening): a tool's ``outputSchema`` or
``inputSchema`` built to hold the event loop, a tool list that never comes or
never ends, a flood of requests. Server: tests/mcp/hostile_server.py (bare
JSON-RPC, so it can send what no SDK server would)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("mcp")

from trio_agent.mcp import MCPServerStdio

WAIT = 120  # seconds: only a failing test waits this long
SERVER = str(Path(__file__).with_name("hostile_server.py"))
EVIL = "^(a+)+$"
OK_SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}


def hostile(mode: str, tools: list[dict[str, Any]] | None = None, **env: Any) -> MCPServerStdio:
    """The hostile server in ``mode``, listing ``tools`` (else one tool, ``ok``)."""
    environment = {"MODE": mode, **{key: str(value) for key, value in env.items()}}
    if tools is not None:
        environment["TOOLS"] = json.dumps(tools)
    return MCPServerStdio(sys.executable, [SERVER], env=environment, init_seconds=WAIT / 4)


async def test_a_tools_output_schema_is_not_matched_on_the_event_loop(monkeypatch):
    """The SDK's ``call_tool`` checked ``structuredContent`` against the server's
    ``outputSchema`` with ``jsonschema`` (Python's ``re``) on the trio thread:
    ``^(a+)+$`` against 26 ``a``s and ``!`` held it 2.3 s, 40 for hours (and a
    ``$ref`` bomb as long). The result is the server's word either way, so it is
    not checked against the server's own schema: the call returns the result and
    ``re`` never sees the server's text."""
    output = {"type": "object", "properties": {"v": {"type": "string", "pattern": EVIL}}}
    tools = [{"name": "ok", "inputSchema": OK_SCHEMA, "outputSchema": output}]
    answer = {
        "content": [{"type": "text", "text": "the text"}],
        "structuredContent": {"v": "aaaa!"},  # quick to refuse here; 40 a's: hours
    }
    asked: list[object] = []
    search = re.search

    def watched(pattern: Any, string: Any, *rest: Any) -> Any:
        if string == "aaaa!":
            asked.append(pattern)
        return search(pattern, string, *rest)

    with trio.fail_after(WAIT):
        async with hostile("result", tools, RESULT=json.dumps(answer)) as server:
            [tool] = server.tools()
            monkeypatch.setattr(re, "search", watched)
            outcome = await tool.execute({})
            monkeypatch.undo()
    assert outcome == "the text"
    assert asked == []

