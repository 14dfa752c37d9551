"""Cancellation sweeps with OpenTelemetry on (issue 21): a turn with retries, an agent
used as a tool in a parallel batch, and a parallel ``run_agent_loop`` run, each
cancelled after every checkpoint in turn, leave no span open and give every failed
span its ``error.type``."""

from __future__ import annotations

from typing import Any

import trio
from helpers import call
from opentelemetry.trace import StatusCode

from trio_agent import (
    Agent,
    RetryPolicy,
    ToolRegistry,
    TransientModelError,
    UserMessage,
    run_agent_loop,
    tool,
)
from trio_agent.testing import ScriptedModel, explore_cancellation, scripted_response


@tool
async def slow_add(a: int, b: int) -> int:
    """Add, slowly."""
    await trio.sleep(0.01)
    return a + b


def make_check(exporter, opened):
    def check(events: list[Any], result: Any, *rest: Any) -> None:
        assert not opened.open, f"spans left open: {sorted(opened.open.values())}"
        spans = exporter.get_finished_spans()
        for s in spans:
            if s.status.status_code is StatusCode.ERROR:
                assert "error.type" in s.attributes, s.name
        exporter.clear()

    return check


async def test_sweep_retries(debug_sdk, autojump_clock):
    """Issue 21 (review of telemetry): a sweep the branch's own did not cover: a turn with retries,
    cancelled anywhere, leaves no span open."""
    exporter, _, opened = debug_sdk

    def scenario():
        flaky = scripted_response("a1", "x", raise_at=0, error=TransientModelError("503"))
        script = [
            flaky,
            scripted_response("r1", [call("slow_add", "c1", {"a": 1, "b": 2})]),
            scripted_response("r2", "3"),
        ]
        return Agent(
            model=ScriptedModel(script), tools=[slow_add], retry=RetryPolicy(jitter=0)
        ).turn("go")

    report = await explore_cancellation(scenario, make_check(exporter, opened))
    assert report.checkpoints > 5


async def test_sweep_agent_as_tool_in_a_parallel_batch(debug_sdk):
    """Issue 21 (review of telemetry): a sweep the branch's own did not cover: an agent used as a
    tool in a parallel batch, cancelled anywhere, leaves no span open."""
    exporter, _, opened = debug_sdk

    def scenario():
        inner = Agent(
            model=ScriptedModel(
                [
                    scripted_response("i1", [call("slow_add", "ic", {"a": 1, "b": 2})]),
                    scripted_response("i2", "inner"),
                ]
            ),
            tools=[slow_add],
        )
        script = [
            scripted_response(
                "o1",
                [call("helper", "c1", {"input": "x"}), call("slow_add", "c2", {"a": 1, "b": 2})],
            ),
            scripted_response("o2", "done"),
        ]
        return Agent(
            model=ScriptedModel(script),
            tools=[inner.as_tool("helper", "Helps."), slow_add],
            tool_execution="parallel",
        ).turn("go")

    report = await explore_cancellation(scenario, make_check(exporter, opened))
    assert report.checkpoints > 10


async def test_sweep_run_agent_loop_parallel(debug_sdk):
    """Issue 21 (review of telemetry): a sweep the branch's own did not cover: a parallel
    ``run_agent_loop`` run, cancelled anywhere, leaves no span open."""
    exporter, _, opened = debug_sdk

    def scenario():
        script = [
            scripted_response(
                "r1",
                [
                    call("slow_add", "c1", {"a": 1, "b": 2}),
                    call("slow_add", "c2", {"a": 3, "b": 4}),
                ],
            ),
            scripted_response("r2", "done"),
        ]
        return run_agent_loop(
            messages=[UserMessage("u1", "go")],
            model=ScriptedModel(script),
            tools=ToolRegistry([slow_add]),
            max_steps=4,
            tool_execution="parallel",
        )

    report = await explore_cancellation(scenario, make_check(exporter, opened))
    assert report.checkpoints > 10
