"""Regression tests for parallel tool batches, each named after the bug it pins."""

from __future__ import annotations

import math

import msgspec
import pytest
import trio
from helpers import call, user

from trio_agent import (
    TOOL_CANCELLED,
    TOOL_NOT_STARTED,
    Agent,
    Cancelled,
    FatalToolError,
    JsonlStore,
    ToolContext,
    ToolRegistry,
    ToolResultMessage,
    ToolUpdated,
    TurnCancelled,
    UserMessage,
    run_agent_loop,
    tool,
)
from trio_agent.testing import ScriptedModel, scripted_response


@tool
async def nap(key: str, seconds: float) -> str:
    """Sleep."""
    await trio.sleep(seconds)
    return key


@tool
async def boom(after: float) -> str:
    """Fail fatally."""
    await trio.sleep(after)
    raise FatalToolError("quota gone")


@tool
async def progress(ctx: ToolContext) -> str:
    """Report progress."""
    ctx.report("working", 0.5)
    await trio.sleep(1)
    return "done"


def naps(*specs):
    return [call("nap", f"c-{k}", {"key": k, "seconds": s}) for k, s in specs]


@pytest.mark.parametrize("how", ["wait", "prompt"])
@pytest.mark.parametrize("mode", ["parallel", "sequential-with-progress"])
async def test_a_fatal_error_in_a_batch_is_a_result_not_an_exception(autojump_clock, how, mode):
    if mode == "parallel":
        calls = [*naps(("a", 1)), call("boom", "c-x", {"after": 2})]
        tools = ToolRegistry([nap, boom])
    else:
        calls = [call("progress", "c-p"), call("boom", "c-x", {"after": 0})]
        tools = ToolRegistry([progress, boom])
    script = [scripted_response("r1", calls), scripted_response("r2", "no")]
    options = {"tool_execution": "parallel" if mode == "parallel" else "sequential"}
    if how == "wait":
        run = run_agent_loop(
            messages=[user()], model=ScriptedModel(script), tools=tools, max_steps=2, **options
        )
        result = await run.wait()
        assert result.code == "TOOL_FATAL" and "quota gone" in result.detail
    else:
        agent = Agent(model=ScriptedModel(script), tools=tools, **options)
        result = await agent.prompt(UserMessage("u1", "go"))
        assert result.end.code == "TOOL_FATAL"


async def test_the_grace_period_bounds_a_prompt_inside_async_with_agent(autojump_clock):
    @tool
    async def stubborn() -> str:
        with trio.CancelScope(shield=True):
            await trio.sleep(100)
        return "late"

    async with Agent(
        model=ScriptedModel([scripted_response("r1", [call("stubborn", "c-s")])]),
        tools=ToolRegistry([stubborn]),
        tool_execution="parallel",
        tool_grace_period=2,
    ) as agent:
        with trio.move_on_after(1):
            await agent.prompt(UserMessage("u1", "go"))
        assert trio.current_time() == pytest.approx(3)  # 1 s, then the grace period
        assert agent.messages[-1].id == "message-r1"  # nothing invented
    assert trio.current_time() == pytest.approx(100)  # leaving the block waited for it


async def test_grace_zero_keeps_results_already_waiting(autojump_clock):
    calls = naps(("a", 1), ("b", 1), ("c", 5), ("d", 1))
    run = run_agent_loop(
        messages=[user()],
        model=ScriptedModel([scripted_response("r1", calls)]),
        tools=ToolRegistry([nap]),
        max_steps=1,
        tool_execution="parallel",
        tool_grace_period=0,
    )
    with trio.move_on_after(2):
        await run.wait()
    kept = [m.tool_call_id for m in run.result.messages if isinstance(m, ToolResultMessage)]
    assert kept == ["c-a", "c-b", "c-d"]


async def test_after_tool_call_runs_on_siblings_kept_after_a_fatal_error(autojump_clock):
    async def redact(c, result):
        return msgspec.structs.replace(result, content="[redacted]")

    calls = [*naps(("a", 1)), call("boom", "c-x", {"after": 1})]
    agent = Agent(
        model=ScriptedModel([scripted_response("r1", calls)]),
        tools=ToolRegistry([nap, boom]),
        tool_execution="parallel",
        after_tool_call=redact,
    )
    result = await agent.prompt(UserMessage("u1", "go"))
    assert result.end.code == "TOOL_FATAL"
    contents = [m.content for m in result.messages if isinstance(m, ToolResultMessage)]
    assert contents == ["[redacted]"]


async def test_a_call_cancelled_before_dispatch_is_not_recorded_as_dispatched(tmp_path):
    store = JsonlStore(tmp_path)
    agent = Agent(
        model=ScriptedModel([scripted_response("r1", naps(("a", 5), ("b", 5)))]),
        tools=ToolRegistry([nap]),
        tool_execution="parallel",
        store=store,
        session_id="s1",
    )
    async with agent.turn(UserMessage("u1", "go")) as run:
        async for event in run:
            if event.type == "tool.started":
                run.cancel()  # cancels the second call's dispatch
    assert run.result.end == TurnCancelled()
    await agent.aclose()
    resumed = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=ToolRegistry([nap]))
    codes = dict((r.tool_call_id, code) for r, code in resumed.closed_on_resume)
    # c-a ran and was cancelled in this process, which knew it: not "outcome unknown"
    assert codes == {"c-a": TOOL_CANCELLED, "c-b": TOOL_NOT_STARTED}
    await resumed.aclose()


async def test_report_never_raises_and_works_from_threads(autojump_clock):
    seen = []

    class Weird:
        def __str__(self):
            return "weird object"

    @tool
    async def messy(ctx: ToolContext) -> str:
        for value in (1.0000001, -0.5, math.nan, "half", None):
            ctx.report("value", value)
            await trio.sleep(1)
        ctx.report(Weird())
        await trio.sleep(1)
        await trio.to_thread.run_sync(ctx.report, "from a thread", 0.25)
        await trio.sleep(1)
        return "ok"

    run = run_agent_loop(
        messages=[user()],
        model=ScriptedModel(
            [scripted_response("r1", [call("messy", "m1")]), scripted_response("r2", "ok")]
        ),
        tools=ToolRegistry([messy]),
        max_steps=2,
    )
    async with run:
        async for event in run:
            if isinstance(event, ToolUpdated):
                seen.append((event.message, event.fraction))
    assert run.result.messages[2].content == "ok"  # the tool did not fail
    assert seen == [
        ("value", 1.0),
        ("value", 0.0),
        ("value", None),
        ("weird object", None),
        ("from a thread", 0.25),
    ]


async def test_progress_of_a_nested_run_is_not_attributed_to_the_outer_call(autojump_clock):
    @tool
    async def inner_tool(ctx: ToolContext) -> str:
        ctx.report("inner progress")
        return "inner"

    @tool
    async def quiet() -> str:
        from trio_agent import tool_context

        tool_context().report("should go nowhere")  # a tool without progress support
        return "quiet"

    @tool
    async def outer(ctx: ToolContext) -> str:
        ctx.report("outer progress")
        inner = run_agent_loop(
            messages=[user()],
            model=ScriptedModel(
                [scripted_response("i1", [call("quiet", "q1")]), scripted_response("i2", "ok")]
            ),
            tools=ToolRegistry([inner_tool, quiet]),
            max_steps=2,
        )
        await inner.wait()
        return "outer"

    run = run_agent_loop(
        messages=[user()],
        model=ScriptedModel(
            [scripted_response("r1", [call("outer", "o1")]), scripted_response("r2", "ok")]
        ),
        tools=ToolRegistry([outer]),
        max_steps=2,
    )
    updates = []
    async with run:
        async for event in run:
            if isinstance(event, ToolUpdated):
                updates.append((event.call.id, event.message))
    assert updates == [("o1", "outer progress")]


async def test_many_reports_do_not_build_a_backlog_before_tool_finished(autojump_clock):
    @tool
    async def chatty(ctx: ToolContext) -> str:
        for i in range(100):
            ctx.report(f"step {i}")
            await trio.sleep(0.06)
        return "done"

    calls = [call("chatty", f"c{i}") for i in range(5)]
    run = run_agent_loop(
        messages=[user()],
        model=ScriptedModel([scripted_response("r1", calls), scripted_response("r2", "ok")]),
        tools=ToolRegistry([chatty]),
        max_steps=2,
        tool_execution="parallel",
    )
    first_finished = None
    async with run:
        async for event in run:
            if event.type == "tool.updated":
                await trio.sleep(0.05)  # a slow consumer
            if event.type == "tool.finished" and first_finished is None:
                first_finished = trio.current_time()
    assert first_finished is not None and first_finished < 6.0 + 0.5
    assert isinstance(run.result, Cancelled) is False


async def test_a_failing_hook_on_one_kept_sibling_loses_no_other_and_keeps_the_fatal_code(
    autojump_clock,
):
    # Review finding: when the batch stopped on a fatal tool, an after_tool_call
    # that failed for a sibling finishing in the grace period dropped the later
    # ones and turned TOOL_FATAL into HOOK_ERROR.
    async def after(c, result):
        if c.id == "c-a":
            raise RuntimeError("hook bug")
        return msgspec.structs.replace(result, content="[redacted]")

    @tool
    async def stubborn(key: str, seconds: float) -> str:
        """Finish even when cancelled (within the grace period)."""
        with trio.CancelScope(shield=True):
            await trio.sleep(seconds)
        return key

    calls = [
        call("boom", "c-x", {"after": 1}),
        call("stubborn", "c-a", {"key": "a", "seconds": 2}),
        call("stubborn", "c-b", {"key": "b", "seconds": 3}),
    ]
    agent = Agent(
        model=ScriptedModel([scripted_response("r1", calls)]),
        tools=ToolRegistry([stubborn, boom]),
        tool_execution="parallel",
        tool_grace_period=10,
        after_tool_call=after,
    )
    result = await agent.prompt(UserMessage("u1", "go"))
    assert result.end.code == "TOOL_FATAL"
    kept = {m.tool_call_id: m.content for m in result.messages if isinstance(m, ToolResultMessage)}
    assert kept == {"c-a": "a", "c-b": "[redacted]"}  # the hook's failure kept a's own result
