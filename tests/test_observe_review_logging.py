"""Regressions from issue 21's review: logging defects."""

from __future__ import annotations

import logging
import sys

import trio
from helpers import call
from paths import DEMO_SERVER

from trio_agent import Agent
from trio_agent.mcp import MCPServerStdio
from trio_agent.testing import ScriptedModel, scripted_response

SECRET = "the launch code is 0451"
DEMO = str(DEMO_SERVER)


async def test_mcp_tool_arguments_reach_the_info_log(caplog):
    # what -v turns on: an MCP server's stderr (here it quotes the tool's arguments)
    caplog.set_level(logging.INFO, "trio_agent")
    script = [
        scripted_response("r1", [call("echo", "c1", {"text": SECRET})]),
        scripted_response("r2", "done"),
    ]
    async with MCPServerStdio(sys.executable, [DEMO]) as server:
        agent = Agent(model=ScriptedModel(script), tool_sources=[server])
        result = await agent.prompt("go")
        await trio.sleep(0.5)  # let the stderr line arrive
    assert result.end.reason == "completed"
    assert SECRET not in caplog.text, [
        r.getMessage() for r in caplog.records if SECRET in r.getMessage()
    ]


def test_v_before_the_command_is_refused():
    from trio_agent.cli import main

    try:
        code = main(["-v", "demo"])
    except SystemExit as exc:
        code = exc.code
    assert code == 0


def test_main_twice_adds_two_handlers():
    from trio_agent.cli import _verbose

    root = logging.getLogger("trio_agent")
    before = list(root.handlers)
    try:
        _verbose(1)
        _verbose(1)
        added = [h for h in root.handlers if h not in before]
        assert len(added) <= 1, added
    finally:
        root.handlers[:] = before
        root.setLevel(logging.NOTSET)
