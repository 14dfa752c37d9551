"""Plain ``def`` functions are tools too (run in a worker thread), and a tool
made by ``@tool`` is its function for callers: same signature, same result."""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing

from trio_agent import (
    Tool,
    ToolCall,
    ToolContext,
    ToolRegistry,
    UserMessage,
    execute_tool_call,
    run_agent_loop,
    tool,
)
from trio_agent.testing import ScriptedModel, scripted_response


@tool
def where(label: str) -> dict[str, object]:
    """Say which thread ran the call."""
    return {"label": label, "main": threading.current_thread() is threading.main_thread()}


@tool
async def add(left: int, right: int = 0) -> int:
    return left + right


async def test_a_plain_def_tool_runs_in_a_worker_thread_with_validated_arguments():
    registry = ToolRegistry([where])
    result = await execute_tool_call(registry, ToolCall("c1", "where", {"label": "x"}))
    assert (result.is_error, result.content) == (False, '{"label":"x","main":false}')
    bad = await execute_tool_call(registry, ToolCall("c2", "where", {"label": 3}))
    assert bad.is_error and "Expected `str`, got `int` - at `$.label`" in bad.content


async def test_a_plain_def_tool_reports_progress_from_its_thread():
    @tool
    def slow(ctx: ToolContext) -> str:
        ctx.report("half way", 0.5)
        return "done"

    model = ScriptedModel(
        [
            scripted_response("r1", [ToolCall("c1", "slow", {})]),
            scripted_response("r2", "ok"),
        ]
    )
    run = run_agent_loop(
        messages=[UserMessage("u1", "go")], model=model, tools=ToolRegistry([slow]), max_steps=3
    )
    async with run:
        kinds = [(event.type, getattr(event, "message", None)) async for event in run]
    assert ("tool.updated", "half way") in kinds
    assert run.result is not None and run.result.status == "completed"


async def test_cancelling_a_plain_def_call_waits_for_its_thread_and_keeps_its_result():
    entered, release = threading.Event(), threading.Event()

    @tool
    def blocking() -> str:
        entered.set()
        release.wait(10)
        return "too late"

    model = ScriptedModel(
        [scripted_response("r1", [ToolCall("c1", "blocking", {})]), scripted_response("r2", "x")]
    )
    run = run_agent_loop(
        messages=[UserMessage("u1", "go")],
        model=model,
        tools=ToolRegistry([blocking]),
        max_steps=3,
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run.wait)
        await trio.to_thread.run_sync(entered.wait)
        run.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert run.result is None  # the thread cannot be interrupted: the run waits for it
        release.set()
    assert run.result is not None and run.result.status == "cancelled"
    # the work was done, so its result is kept (as for any tool that finished)
    assert run.result.messages[-1].content == "too late"


async def test_calling_a_tool_calls_its_function():
    assert await add(1, right=2) == 3
    assert where("y") == {"label": "y", "main": True}  # called directly: no thread
    assert add.function is not None and add.function.__name__ == "add"

    async def execute(arguments: dict[str, object]) -> str:
        return "ok"

    by_hand = Tool(name="by_hand", description="", parameters={}, execute=execute)
    assert by_hand.function is None
    with pytest.raises(TypeError, match="built by hand"):
        by_hand()


async def test_a_sync_wrapper_of_an_async_function_is_awaited_not_threaded():
    import functools

    async def fetch(city: str) -> str:
        await trio.lowlevel.checkpoint()
        return f"sunny in {city}"

    def logged(f):
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            return f(*args, **kwargs)

        return wrapper

    wrapped = tool(name="fetch")(logged(fetch))
    result = await execute_tool_call(
        ToolRegistry([wrapped]), ToolCall("c", "fetch", {"city": "Oslo"})
    )
    assert (result.is_error, result.content) == (False, "sunny in Oslo")


async def test_a_plain_def_that_returns_a_coroutine_is_an_error_result_saying_so():
    async def later() -> str:
        return "x"

    @tool
    def sneaky() -> object:
        return later()

    result = await execute_tool_call(ToolRegistry([sneaky]), ToolCall("c", "sneaky", {}))
    assert result.is_error and "appears to be asynchronous" in result.content


async def test_plain_def_tools_do_not_take_the_librarys_own_threads():
    seen: list[int] = []

    @tool
    def busy() -> str:
        seen.append(trio.from_thread.run_sync(_default_borrowed))
        return "ok"

    await execute_tool_call(ToolRegistry([busy]), ToolCall("c", "busy", {}))
    assert seen == [0]  # the default limiter (ledgers, loads) lent no thread to the tool


def _default_borrowed() -> int:
    return trio.to_thread.current_default_thread_limiter().borrowed_tokens
