"""Cancel a parallel batch after k checkpoints of the run, for every k (issue 5)."""

from __future__ import annotations

import trio
import trio.lowlevel
from helpers import assert_stream_shape, call, user

from trio_agent import (
    Cancelled,
    Completed,
    ToolFinished,
    ToolRegistry,
    ToolResultMessage,
    repair_transcript,
    run_agent_loop,
    tool,
    validate_transcript,
)
from trio_agent.testing import ScriptedModel, scripted_response


class CancelAfter(trio.abc.Instrument):
    def __init__(self, run, k):
        self.run, self.k, self.steps, self.fired = run, k, 0, False

    def after_task_step(self, task):
        if task.name == "trio_agent.run":
            self.steps += 1
            if self.steps == self.k:
                self.fired = True
                self.run.cancel()


def scenario(log: dict[str, list[str]]):
    @tool
    async def work(key: str, spins: int) -> str:
        log["started"].append(key)
        try:
            for _ in range(spins):
                await trio.lowlevel.checkpoint()
        except trio.Cancelled:
            log["cancelled"].append(key)
            raise
        log["finished"].append(key)
        return key

    calls = [
        call("work", f"c{i}", {"key": f"k{i}", "spins": spins})
        for i, spins in enumerate([6, 1, 4, 2, 3])
    ]
    model = ScriptedModel([scripted_response("r1", calls), scripted_response("r2", "ok")])
    return run_agent_loop(
        messages=[user()],
        model=model,
        tools=ToolRegistry([work]),
        max_steps=3,
        tool_execution="parallel",
        max_parallel_tools=3,
    )


async def test_cancel_a_parallel_batch_after_every_checkpoint():
    k, statuses = 1, []
    while True:
        log: dict[str, list[str]] = {"started": [], "cancelled": [], "finished": []}
        run = scenario(log)
        instrument = CancelAfter(run, k)
        trio.lowlevel.add_instrument(instrument)
        events = []
        try:
            async with run:
                async for event in run:
                    events.append(event)
        finally:
            trio.lowlevel.remove_instrument(instrument)
        result = run.result
        statuses.append(result.status)
        assert isinstance(result, Cancelled | Completed)
        assert_stream_shape(events, result)
        results = [m for m in result.messages if isinstance(m, ToolResultMessage)]
        # only finished calls have results, in call order among themselves
        assert sorted(r.content for r in results) == sorted(log["finished"])
        assert [r.tool_call_id for r in results] == sorted(r.tool_call_id for r in results)
        # every started call either finished or saw trio.Cancelled
        assert sorted(log["started"]) == sorted(log["finished"] + log["cancelled"])
        # the stream announced exactly the kept results
        announced = {e.result.id for e in events if isinstance(e, ToolFinished)}
        assert announced == {r.id for r in results}
        validate_transcript(repair_transcript(result.messages))
        if not instrument.fired:
            assert isinstance(result, Completed)
            break
        k += 1
        assert k < 500
    assert statuses.count("cancelled") > 10
