"""Cancel a two-step, two-tool scenario after k checkpoints, for every k until
the run completes, and check the contract every time (DESIGN 7, 10)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import trio
import trio.lowlevel
from helpers import assert_stream_shape, call, user

from trio_agent import (
    AssistantMessage,
    Cancelled,
    Completed,
    TextBlock,
    ToolFinished,
    ToolRegistry,
    ToolResultMessage,
    ToolStarted,
    repair_transcript,
    run_agent_loop,
    tool,
    validate_transcript,
)
from trio_agent.testing import ScriptedModel, scripted_response
from trio_agent.testing._explorer import seeded_scheduler

RUN_TASK = "trio_agent.run"
INLINE_TASK = "inline-wait"


@dataclass
class ToolLog:
    started: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)


def scenario(log: ToolLog):
    async def work(name: str, value: int) -> str:
        log.started.append(name)
        try:
            await trio.lowlevel.checkpoint()
            await trio.lowlevel.checkpoint()
        except trio.Cancelled:
            log.cancelled.append(name)
            raise
        log.finished.append(name)
        return f"{name}={value}"

    @tool
    async def lookup(key: str) -> str:
        """Look a key up."""
        return await work(f"lookup:{key}", len(key))

    @tool
    async def compute(x: int) -> str:
        """Compute something."""
        return await work(f"compute:{x}", x * 2)

    step1 = [
        TextBlock("Let me check."),
        call("lookup", "c1", {"key": "abc"}),
        call("compute", "c2", {"x": 21}),
    ]
    step2 = [TextBlock("All done: abc and 42.")]
    model = ScriptedModel(
        [
            scripted_response("s1", step1, text_chunks=3),
            scripted_response("s2", step2, text_chunks=4),
        ]
    )
    complete = [
        AssistantMessage("message-s1", tuple(step1)),
        AssistantMessage("message-s2", tuple(step2)),
    ]
    run = run_agent_loop(
        messages=[user()], model=model, tools=ToolRegistry([lookup, compute]), max_steps=4
    )
    return run, model, complete


class CancelAfter(trio.abc.Instrument):
    """Cancel ``run`` once the task named ``task_name`` has taken ``k`` steps."""

    def __init__(self, run, task_name: str, k: int) -> None:
        self.run, self.task_name, self.k = run, task_name, k
        self.steps = 0
        self.fired = False

    def after_task_step(self, task) -> None:
        if task.name != self.task_name:
            return
        self.steps += 1
        if self.steps == self.k and not self.fired:
            self.fired = True
            self.run.cancel()


def check(events, result, model, log: ToolLog, complete, *, observed: bool) -> None:
    assert isinstance(result, (Cancelled, Completed)), result
    # every initial message kept; only complete assistant messages
    assert result.messages[0] == user()
    for message in result.messages:
        if isinstance(message, AssistantMessage):
            assert message in complete, f"partial assistant message {message}"
    # results only for tools that finished, never for interrupted ones
    results = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert not any(r.is_error for r in results)
    assert sorted(r.content.split("=")[0] for r in results) == sorted(log.finished)
    # a tool that started and did not finish saw trio.Cancelled
    assert sorted(set(log.started) - set(log.finished)) == sorted(log.cancelled)
    # repair makes the transcript one a provider accepts
    validate_transcript(repair_transcript(result.messages))
    if isinstance(result, Completed):
        assert result.final_text == "All done: abc and 42."
        validate_transcript(result.messages)
    if observed:
        assert_stream_shape(events, result)
        # the stream and the transcript agree on every tool result
        announced = [e.result for e in events if isinstance(e, ToolFinished)]
        assert announced == results
        started = [e.call.id for e in events if isinstance(e, ToolStarted)]
        assert [r.tool_call_id for r in results] == started[: len(results)]
    assert model.call_count == result.steps


async def _drive(run, observed: bool, events: list) -> None:
    if observed:
        async with run:
            async for event in run:
                events.append(event)
    else:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run.wait, name=INLINE_TASK)


async def sweep(observed: bool) -> int:
    k = 0
    statuses: list[str] = []
    seen: set[str] = set()
    while True:
        log = ToolLog()
        run, model, complete = scenario(log)
        task_name = RUN_TASK if observed else INLINE_TASK
        instrument = CancelAfter(run, task_name, k)
        if k == 0:
            run.cancel()
        trio.lowlevel.add_instrument(instrument)
        events = []
        try:
            with seeded_scheduler():  # the same order of ready tasks for every k
                await _drive(run, observed, events)
        finally:
            trio.lowlevel.remove_instrument(instrument)
        result = run.result
        check(events, result, model, log, complete, observed=observed)
        statuses.append(result.status)
        if isinstance(result, Cancelled):
            seen.add(cancel_point(result, log))
        if k > 0 and not instrument.fired:
            assert isinstance(result, Completed)
            break
        k += 1
        assert k < 500, "the scenario never completed"
    # cancelled at every checkpoint up to the end of the last step, completed after:
    # a cancel that lands once the result is decided (the final emit is shielded)
    # cannot undo it.
    first_completed = statuses.index("completed")
    assert first_completed > 10
    assert set(statuses[:first_completed]) == {"cancelled"}
    assert set(statuses[first_completed:]) == {"completed"}
    expected = {"before the first request", "during step 1", "in a tool", "during step 2"}
    if observed:  # without a consumer, emitting is no checkpoint: nothing lies between tools
        expected.add("between tools")
    assert seen >= expected, seen
    return k


def cancel_point(result: Cancelled, log: ToolLog) -> str:
    """Where the cancel landed, by what the result and the tools show."""
    if log.cancelled:
        return "in a tool"
    if result.steps == 0:
        return "before the first request"
    if result.steps == 1 and len(log.finished) in (0, 1) and len(result.messages) > 1:
        return "between tools"
    return f"during step {result.steps}"


@pytest.mark.parametrize("observed", [True, False], ids=["async-with", "wait"])
async def test_cancel_after_every_checkpoint(observed):
    checkpoints = await sweep(observed)
    assert checkpoints > 10  # the sweep really walked through the scenario
