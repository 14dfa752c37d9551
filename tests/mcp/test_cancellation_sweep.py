"""Cancelling an agent turn that calls MCP tools at each of its checkpoints in
turn (issue 20, item 4): every run keeps the event and transcript invariants,
the agent goes on, and the one server (entered once, shared by all the runs)
keeps serving; a cancelled call is cancelled on the server too."""

from __future__ import annotations

import sys
from typing import Any

import pytest
import trio
from helpers import call
from paths import DEMO_SERVER

from trio_agent import (
    Agent,
    ToolRegistry,
    TurnResult,
    execute_tool_call,
    repair_transcript,
    validate_transcript,
)
from trio_agent.mcp import MCPServerStdio
from trio_agent.testing import (
    ScriptedModel,
    assert_run_invariants,
    explore_cancellation,
    scripted_response,
)

pytest.importorskip("mcp")


DEMO = str(DEMO_SERVER)


@pytest.mark.parametrize("execution", ["sequential", "parallel"])
async def test_cancel_a_turn_with_mcp_calls_at_every_checkpoint(execution, tmp_path):
    record = tmp_path / "record"
    agents: list[Agent] = []
    async with MCPServerStdio(
        sys.executable, [DEMO], env={"MCP_DEMO_RECORD": str(record)}, prefix="d"
    ) as server:

        def scenario() -> Any:
            script = [
                scripted_response(
                    "r1",
                    [
                        call("d_add", "c1", {"a": 2, "b": 3}),
                        call("d_slow", "c2", {"seconds": 0.02}),
                        call("d_echo", "c3", {"text": "hi"}),
                    ],
                ),
                scripted_response("r2", "done"),
                scripted_response("r3", "again"),
            ]
            agent = Agent(
                model=ScriptedModel(script),
                tool_sources=[server],
                tool_execution=execution,
                max_steps=3,
            )
            agents.append(agent)
            return agent.turn("go")

        async def check(events: list[Any], result: TurnResult) -> None:
            assert_run_invariants(events, result)
            agent = agents[-1]
            validate_transcript(repair_transcript(agent.messages))
            answered = {m.tool_call_id: m for m in agent.messages if m.role == "tool_result"}
            finished = {
                e.result.tool_call_id: e.result for e in events if e.type == "tool.finished"
            }
            assert answered == finished  # a result only for a call that finished
            expected = {"c1": "5", "c2": "slept", "c3": "hi"}
            assert all(r.content == expected[i] and not r.is_error for i, r in answered.items())
            if result.end.reason == "completed":
                assert set(answered) == {"c1", "c2", "c3"}
            follow = await agent.prompt("and now?")  # the agent goes on
            validate_transcript(follow.messages)

        with trio.fail_after(240):
            report = await explore_cancellation(scenario, check)
            # the server served every run and still serves
            after = await execute_tool_call(
                ToolRegistry(server.tools()), call("d_add", "z", {"a": 1, "b": 1})
            )
    assert after.content == "2"
    assert report.checkpoints > 20
    assert set(report.outcomes) == {"cancelled", "completed"}
    lines = record.read_text().splitlines()
    assert "slow cancelled" in lines  # some cancels landed while the server slept
    assert lines.count("slow started") == lines.count("slow cancelled") + lines.count(
        "slow finished"
    )
