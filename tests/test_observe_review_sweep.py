"""Regressions from issue 21's review: cancellation sweeps over scenarios the branch's own sweep
does not cover (retries, an agent used as a tool in a parallel batch, a
run_agent_loop run, an approved held call run at the next turn)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
from helpers import call
from opentelemetry.trace import StatusCode
from otel_helpers import otel_sdk

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


@pytest.fixture
def sdk(caplog):
    caplog.set_level(logging.DEBUG, "opentelemetry")
    with otel_sdk() as configured:
        yield configured
    bad = [r.getMessage() for r in caplog.records if r.name.startswith("opentelemetry")]
    assert not bad, bad


@tool
async def slow_add(a: int, b: int) -> int:
    """Add, slowly."""
    await trio.sleep(0.01)
    return a + b


@tool(requires_approval=True)
async def guarded(a: int) -> int:
    """Needs approval."""
    await trio.sleep(0.01)
    return a


def make_check(exporter, opened):
    def check(events: list[Any], result: Any, *rest: Any) -> None:
        assert not opened.open, f"spans left open: {sorted(opened.open.values())}"
        spans = exporter.get_finished_spans()
        for s in spans:
            if s.status.status_code is StatusCode.ERROR:
                assert "error.type" in s.attributes, s.name
        exporter.clear()

    return check


async def test_sweep_retries(sdk, autojump_clock):
    exporter, _, opened = sdk

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


async def test_sweep_agent_as_tool_in_a_parallel_batch(sdk):
    exporter, _, opened = sdk

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


async def test_sweep_run_agent_loop_parallel(sdk):
    exporter, _, opened = sdk

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


async def test_approved_call_runs_in_an_execute_tool_span(sdk):
    exporter, _, opened = sdk
    script = [
        scripted_response("r1", [call("guarded", "c1", {"a": 5})]),
        scripted_response("r2", "five"),
    ]
    agent = Agent(model=ScriptedModel(script), tools=[guarded])
    first = await agent.prompt("go")
    assert first.end.reason == "awaiting_approval"
    await agent.approve("c1")
    second = await agent.prompt("ok")
    assert second.end.reason == "completed", second.end
    spans = exporter.get_finished_spans()
    turns = [s for s in spans if s.name == "invoke_agent"]
    assert [t.status.status_code for t in turns] == [StatusCode.UNSET, StatusCode.UNSET]
    [tool_span] = [s for s in spans if s.name == "execute_tool guarded"]
    assert tool_span.parent.span_id == turns[1].context.span_id
    assert not opened.open
