"""Cancel a parallel batch after k checkpoints of the run, for every k (issue 5)."""

from __future__ import annotations

import trio
import trio.lowlevel
from helpers import call, user

from trio_agent import ToolFinished, ToolRegistry, ToolResultMessage, run_agent_loop, tool
from trio_agent.testing import (
    ScriptedModel,
    assert_run_invariants,
    explore_cancellation,
    scripted_response,
)


async def test_cancel_a_parallel_batch_after_every_checkpoint():
    log: dict[str, list[str]] = {}

    def scenario():
        log.update(started=[], cancelled=[], finished=[])

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

    def check(events, result):
        assert_run_invariants(events, result)
        results = [m for m in result.messages if isinstance(m, ToolResultMessage)]
        # only finished calls have results, in call order among themselves
        assert sorted(r.content for r in results) == sorted(log["finished"])
        assert [r.tool_call_id for r in results] == sorted(r.tool_call_id for r in results)
        # every started call either finished or saw trio.Cancelled
        assert sorted(log["started"]) == sorted(log["finished"] + log["cancelled"])
        # the stream announced exactly the kept results
        announced = {e.result.id for e in events if isinstance(e, ToolFinished)}
        assert announced == {r.id for r in results}

    report = await explore_cancellation(scenario, check)
    assert report.outcomes.count("cancelled") > 10
    assert report.outcomes[-1] == "completed"
