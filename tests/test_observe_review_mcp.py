"""Regressions from issue 21's review: spans of an agent calling MCP tools (the mcp SDK makes
its own spans, "MCP send tools/call ..."): where do they land?"""

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
