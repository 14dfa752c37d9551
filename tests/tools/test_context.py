"""A running call's ``ToolContext`` (``tools/_context.py``): progress reports that
never raise, from the tool's task or a worker thread, and never attributed to a call
of another run."""

from __future__ import annotations

import math

import trio
from helpers import call, user

from trio_agent import ToolContext, ToolRegistry, ToolUpdated, run_agent_loop, tool
from trio_agent.testing import ScriptedModel, scripted_response


async def test_report_never_raises_and_works_from_threads(autojump_clock):
    """``ToolContext.report`` raised on odd values (NaN, a string, an object) and from a worker
    thread; it never raises, and works from threads."""
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
    """Progress reported in a nested run (a run inside a tool) was attributed to the outer call."""

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


async def test_report_of_a_fraction_no_float_can_hold_never_raises_even_from_a_thread(
    autojump_clock,
):
    """``ctx.report("x", 10**400)`` raised ``OverflowError`` (an int too big for a float),
    and from a worker thread, where the report is handed to the trio thread, it crashed
    the whole program with ``TrioInternalError``; so did a ``__float__`` that raises.
    Such a fraction is dropped like any other that is not a number."""
    seen = []

    class Broken:
        def __float__(self) -> float:
            raise RuntimeError("no float")

    @tool
    async def overflowing(ctx: ToolContext) -> str:
        ctx.report("in the task", 10**400)
        await trio.sleep(1)
        await trio.to_thread.run_sync(ctx.report, "from a thread", 10**400)
        await trio.sleep(1)
        await trio.to_thread.run_sync(ctx.report, "broken", Broken())
        await trio.sleep(1)
        ctx.report("fine", 0.5)
        await trio.sleep(1)
        return "ok"

    run = run_agent_loop(
        messages=[user()],
        model=ScriptedModel(
            [scripted_response("r1", [call("overflowing", "o1")]), scripted_response("r2", "ok")]
        ),
        tools=ToolRegistry([overflowing]),
        max_steps=2,
    )
    async with run:
        async for event in run:
            if isinstance(event, ToolUpdated):
                seen.append((event.message, event.fraction))
    assert run.result.messages[2].content == "ok"
    assert seen == [("fine", 0.5)]


async def test_regression_an_infinite_fraction_is_dropped_as_the_docs_say(autojump_clock):
    """``ctx.report("x", float("inf"))`` was shown as done (clamped to 1.0), though
    ``report`` says anything that is not a finite number is dropped."""
    seen = []

    @tool
    async def infinite(ctx: ToolContext) -> str:
        for fraction in (math.inf, -math.inf, math.nan, 0.25):
            ctx.report(str(fraction), fraction)
            await trio.sleep(1)
        return "ok"

    run = run_agent_loop(
        messages=[user()],
        model=ScriptedModel(
            [scripted_response("r1", [call("infinite", "i1")]), scripted_response("r2", "ok")]
        ),
        tools=ToolRegistry([infinite]),
        max_steps=2,
    )
    async with run:
        async for event in run:
            if isinstance(event, ToolUpdated):
                seen.append((event.message, event.fraction))
    assert seen == [("0.25", 0.25)]
