"""Cancel a session turn after k checkpoints, for every k, and check that
nothing is lost or invented and the session can go on (issue 3)."""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
import trio
import trio.lowlevel
from helpers import call

from trio_agent import (
    Agent,
    MessageAccepted,
    RetryPolicy,
    SessionEvent,
    ToolFinished,
    ToolRegistry,
    ToolResultMessage,
    TransientModelError,
    TurnCancelled,
    TurnCompleted,
    TurnFinished,
    TurnStarted,
    UserMessage,
    tool,
    validate_transcript,
)
from trio_agent.testing import (
    ScriptedModel,
    assert_run_invariants,
    explore_cancellation,
    scripted_response,
)


@dataclass
class Log:
    started: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)


def scenario_agent(log: Log) -> Agent:
    @tool
    async def work(key: str) -> str:
        log.started.append(key)
        await trio.lowlevel.checkpoint()
        log.finished.append(key)
        return key.upper()

    model = ScriptedModel(
        [
            scripted_response(
                "s1",
                [call("work", "c1", {"key": "a"}), call("work", "c2", {"key": "b"})],
                text_chunks=2,
            ),
            scripted_response(
                "fail", "lost", text_chunks=2, raise_at=1, error=TransientModelError("503")
            ),
            scripted_response("s2", "all done", text_chunks=3),
            scripted_response("next", "next turn"),
        ]
    )
    agent = Agent(model=model, tools=ToolRegistry([work]), retry=RetryPolicy(initial_delay=0.01))
    agent.steer(UserMessage("steer-1", "be quick"))
    return agent


async def test_cancel_a_session_turn_after_every_checkpoint(autojump_clock):
    state: dict = {}

    def scenario():
        state["log"] = Log()
        state["agent"] = agent = scenario_agent(state["log"])
        return agent.turn(UserMessage("u1", "go"))

    async def check(events, result):
        agent, log = state["agent"], state["log"]
        assert_run_invariants(events, result)
        assert isinstance(events[0], TurnStarted) and isinstance(events[-1], TurnFinished)
        for event in events:
            assert (
                msgspec.json.decode(msgspec.json.encode(event, enc_hook=tuple), type=SessionEvent)
                == event
            )
        assert isinstance(result.end, (TurnCancelled, TurnCompleted))
        # input never lost: the prompt and the steering are in the transcript or queued
        ids = [m.id for m in result.messages]
        queued = [m.id for m in agent.queued_steering]
        assert "u1" in ids  # appended before the turn's first await
        assert ("steer-1" in ids) != ("steer-1" in queued)
        # every message in the transcript was announced
        announced = [e.message for e in events if isinstance(e, MessageAccepted)]
        assert [m for m in result.messages if m.id in ("u1", "steer-1")] == [
            m for m in announced if m.id in ("u1", "steer-1")
        ]
        kept = [m for m in result.messages if isinstance(m, ToolResultMessage)]
        assert kept == [e.result for e in events if isinstance(e, ToolFinished)]
        # results only for tools that finished; no text of the failed attempt kept
        assert sorted(r.content.lower() for r in kept) == sorted(log.finished)
        assert "lost" not in str(result.messages)
        # the session goes on: the next turn answers anything left dangling
        follow = await agent.prompt(UserMessage("u2", "next"))
        validate_transcript(follow.messages)

    report = await explore_cancellation(scenario, check)
    first_done = report.outcomes.index("completed")
    assert first_done > 10
    assert set(report.outcomes[:first_done]) == {"cancelled"}
    assert set(report.outcomes[first_done:]) == {"completed"}


class _CancelScopeAfter(trio.abc.Instrument):
    """Cancels ``scope`` after ``k`` steps of the task named ``prompt``."""

    def __init__(self, scope: trio.CancelScope, k: int) -> None:
        self.scope, self.k, self.steps = scope, k, 0

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name == "prompt":
            self.steps += 1
            if self.steps == self.k:
                self.scope.cancel()


async def test_prompt_cancelled_by_the_callers_scope_after_every_checkpoint(autojump_clock):
    """prompt() runs the turn with no cancel scope of its own: the caller's scopes
    cancel it, at any checkpoint, with the same guarantees as a cancelled turn."""
    outcomes = []
    for k in range(1, 200):
        log = Log()
        agent = scenario_agent(log)
        box: dict = {}

        async def prompt(scope: trio.CancelScope) -> None:
            with scope:
                box["result"] = await agent.prompt(UserMessage("u1", "go"))  # noqa: B023

        scope = trio.CancelScope()
        instrument = _CancelScopeAfter(scope, k)
        trio.lowlevel.add_instrument(instrument)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(prompt, scope, name="prompt")
        finally:
            trio.lowlevel.remove_instrument(instrument)
        outcomes.append("completed" if "result" in box else "cancelled")
        assert not agent.running
        messages = agent.messages
        ids = [m.id for m in messages]
        assert "u1" in ids  # appended before the turn's first await
        assert ("steer-1" in ids) != ("steer-1" in [m.id for m in agent.queued_steering])
        kept = [m for m in messages if isinstance(m, ToolResultMessage)]
        assert sorted(r.content.lower() for r in kept) == sorted(log.finished)
        assert "lost" not in str(messages)
        follow = await agent.prompt(UserMessage("u2", "next"))
        validate_transcript(follow.messages)
        if "result" in box:
            assert isinstance(box["result"].end, TurnCompleted)
            break
    assert outcomes[-1] == "completed" and set(outcomes[:-1]) == {"cancelled"}
    assert len(outcomes) > 10
