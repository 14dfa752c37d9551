"""Spans of an agent calling MCP tools (issue 21): the mcp SDK makes spans of its own
("MCP send tools/call ..."), which must nest under the call's span."""

from __future__ import annotations

import logging
import sys

from helpers import call
from opentelemetry import trace
from otel_helpers import otel_sdk
from paths import DEMO_SERVER

from trio_agent import Agent
from trio_agent.mcp import MCPServerStdio
from trio_agent.testing import ScriptedModel, scripted_response

DEMO = str(DEMO_SERVER)


def script(n):
    return [
        scripted_response(f"r{n}", [call("add", f"c{n}", {"a": 1, "b": 2})]),
        scripted_response(f"f{n}", "3"),
    ]


async def test_mcp_sdk_spans_nest_under_their_execute_tool_span(caplog):
    """Issue 21 (review of telemetry): the mcp SDK's own spans of a call must nest under the call's
    ``execute_tool`` span, not under the span current when the server was entered."""
    caplog.set_level(logging.DEBUG, "opentelemetry")
    with otel_sdk() as (exporter, _, opened):
        tracer = trace.get_tracer("app")
        with tracer.start_as_current_span("app startup"):
            server = MCPServerStdio(sys.executable, [DEMO])
            await server.__aenter__()
        try:
            for n in range(2):
                agent = Agent(model=ScriptedModel(script(n)), tool_sources=[server])
                with tracer.start_as_current_span(f"app request {n}"):
                    result = await agent.prompt("go")
                assert result.end.reason == "completed"
        finally:
            await server.__aexit__(None, None, None)
        spans = exporter.get_finished_spans()
        by_id = {s.context.span_id: s for s in spans}
        lines = []
        for s in spans:
            parent = (
                by_id.get(s.parent.span_id).name if s.parent and s.parent.span_id in by_id else None
            )
            lines.append(f"{s.name!r} <- {parent!r} trace={s.context.trace_id % 10000}")
        print("\n".join(lines))
        mcp_calls = [s for s in spans if "tools/call" in s.name]
        assert mcp_calls, lines
        for s in mcp_calls:
            assert by_id[s.parent.span_id].name == "execute_tool add", lines
        assert not opened.open, opened.open
    assert not [r.getMessage() for r in caplog.records if r.name.startswith("opentelemetry")]
