"""The shell every run shares (``engine/_run.py``): however the run ends (an outer
cancel grouped by a tool's or a model's nursery, a consumer's exception while the
run dies, a group of our own errors), it has its result and its run.finished.
Regressions a review of the core loop found, each named after what it pins."""

from __future__ import annotations

import pytest
import trio
from helpers import add, call, start, user
from waiting import cancelled_once_blocked

from trio_agent import Cancelled, ToolRegistry, UserMessage, run_agent_loop, tool
from trio_agent.testing import ScriptedModel, scripted_response


def nursery_tool(log: list[str]):
    @tool
    async def fan_out() -> str:
        """Runs two children in its own nursery until cancelled."""
        log.append("start")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            nursery.start_soon(trio.sleep_forever)
        return "never"

    return fan_out


@pytest.mark.parametrize("observed", [True, False], ids=["async-with", "wait"])
async def test_outer_cancel_grouped_by_a_tool_nursery_still_ends_with_run_finished(observed):
    """An outer cancel that a tool's nursery wrapped in an exception group left the run without its
    Cancelled result."""
    log: list[str] = []
    run, _ = start(
        [scripted_response("r1", [call("fan_out", "c1")])], tools=ToolRegistry([nursery_tool(log)])
    )
    events = []
    async with cancelled_once_blocked() as outer:  # the tool's children hang
        if observed:
            async with run:
                async for event in run:
                    events.append(event)
        else:
            await run.wait()
    assert outer.cancelled_caught and log == ["start"]
    assert isinstance(run.result, Cancelled)
    assert run.result.messages[0] == user() and len(run.result.messages) == 2


async def test_outer_cancel_grouped_by_a_model_nursery_still_sets_the_result():
    """An outer cancel that the model's nursery wrapped in an exception group left the run without
    its result."""

    class NurseryModel:
        def stream(self, request):
            inner = ScriptedModel([scripted_response("r1", "x", hang_at=0)]).stream(request)

            class CM:
                async def __aenter__(self):
                    self.cm = trio.open_nursery()
                    nursery = await self.cm.__aenter__()
                    nursery.start_soon(trio.sleep_forever)
                    return await inner.__aenter__()

                async def __aexit__(self, *exc):
                    await inner.__aexit__(*exc)
                    return await self.cm.__aexit__(*exc)

            return CM()

    run = run_agent_loop(messages=[user()], model=NurseryModel(), tools=ToolRegistry(), max_steps=1)
    async with cancelled_once_blocked() as outer:  # the model's stream hangs
        await run.wait()
    assert outer.cancelled_caught
    assert run.result == Cancelled(messages=(user(),), steps=1)


class Boom(BaseException):
    pass


async def test_body_exception_is_kept_when_the_run_also_dies():
    """When the consumer's body raised while the run also died, one of the two exceptions was lost;
    both are kept."""

    @tool
    async def explodes_on_cancel() -> str:
        try:
            await trio.sleep_forever()
        finally:
            raise Boom
        return "never"

    run, _ = start(
        [scripted_response("r1", [call("explodes_on_cancel", "c1")])],
        tools=ToolRegistry([explodes_on_cancel]),
    )
    with pytest.raises(BaseExceptionGroup) as info:
        async with run:
            async for event in run:
                if event.type == "tool.started":
                    raise ValueError("consumer bug")
    kinds = {type(e) for e in info.value.exceptions}
    assert kinds == {ValueError, Boom}


async def test_regression_a_group_of_our_own_errors_still_ends_the_run_visibly(monkeypatch):
    """An exception group (a bug inside a parallel batch's nursery, with ``wait()`` and no ``async
    with``) skipped the INTERNAL_ERROR path: no run.finished and no result."""
    import trio_agent.engine._batch as engine  # where a batch records and starts a call

    async def bug(*args, **kwargs):
        raise RuntimeError("bug")

    monkeypatch.setattr(engine, "_start", bug)
    run = run_agent_loop(
        messages=[UserMessage("u1", "hi")],
        model=ScriptedModel(
            [scripted_response("r1", [call("add", "c1", {"left": 1, "right": 2})])]
        ),
        tools=ToolRegistry([add]),
        max_steps=2,
        tool_execution="parallel",
    )
    with pytest.raises(BaseExceptionGroup):
        await run.wait()
    assert run.result is not None and run.result.status == "failed"
    assert run.result.code == "INTERNAL_ERROR" and "bug" in run.result.detail


def test_driven_from_asyncio_the_library_says_at_once_that_it_runs_on_trio(tmp_path):
    """Issue 35: ``asyncio.run(agent.prompt(...))`` ended in a 30-line traceback with
    "RuntimeError: must be called from async context" deep inside ``engine/_emit.py``.
    Each entry point says what is wrong and what to do, before it changes anything:
    the prompt's message id is not spent, so the agent goes on under trio."""
    import asyncio
    import traceback

    from trio_agent import Agent, JsonlStore

    agent = Agent(model=ScriptedModel([scripted_response("r1", "hi")]))
    run = run_agent_loop(
        messages=[user()], model=ScriptedModel([]), tools=ToolRegistry(), max_steps=1
    )

    async def enter_agent() -> None:
        async with Agent(model=ScriptedModel([]), store=JsonlStore(tmp_path)):
            pass

    async def enter_run() -> None:
        async with run_agent_loop(
            messages=[user()], model=ScriptedModel([]), tools=ToolRegistry(), max_steps=1
        ):
            pass

    entries = [
        lambda: agent.prompt("hello"),
        lambda: agent.turn("hello").wait(),
        run.wait,
        enter_agent,
        enter_run,
        lambda: Agent.resume(JsonlStore(tmp_path), "s", model=ScriptedModel([])),
        lambda: Agent.fork(JsonlStore(tmp_path), "s", at_turn=0, new_session_id="t"),
    ]
    for entry in entries:
        with pytest.raises(RuntimeError) as caught:
            asyncio.run(entry())
        assert str(caught.value) == (
            "trio-agent runs on trio; call it from trio.run(...) (asyncio is not supported; "
            "see the docs' why-trio page)"
        )
        frames = traceback.extract_tb(caught.value.__traceback__)
        assert not any(frame.filename.endswith("_emit.py") for frame in frames)
    assert list(tmp_path.iterdir()) == []  # nothing was created

    async def later() -> str:
        return (await agent.prompt("hello")).final_text

    assert trio.run(later) == "hi"
