"""Regressions found in the review of the room-making split (issue 13), each named
after the bug it pins."""

from __future__ import annotations

import dataclasses
import gc
import weakref

import pytest

import trio_agent.session._turn_run as _turn_run
from trio_agent import Agent, ToolCall, ToolRegistry, UserMessage, tool
from trio_agent.ledger import Ledger, LedgerError
from trio_agent.stores import JsonlStore
from trio_agent.testing import ScriptedModel, scripted_response


@tool
async def add(left: int, right: int) -> str:
    """Add."""
    return str(left + right)


def two_step_model():
    return ScriptedModel(
        [
            scripted_response("r1", [ToolCall("c1", "add", {"left": 1, "right": 2})]),
            scripted_response("r2", "ok"),
        ]
    )


def test_regression_a_finished_agent_keeps_its_hooks_alive_no_longer():
    class Big:
        pass

    big = Big()
    ref = weakref.ref(big)

    async def hook(call, big=big):
        return None

    Agent(model=ScriptedModel([]), before_tool_call=hook)
    del hook, big
    gc.collect()
    assert ref() is None, "the agent is gone but its hook (and what it closes over) lives on"


@dataclasses.dataclass(frozen=True)
class Audit:
    name: str
    seen: list = dataclasses.field(default_factory=list, compare=False, hash=False)

    async def __call__(self, call):
        self.seen.append(call.id)


async def test_regression_agents_with_equal_hooks_shared_one_hook_object():
    a_hook, b_hook = Audit("audit"), Audit("audit")
    a = Agent(model=two_step_model(), tools=ToolRegistry([add]), before_tool_call=a_hook)
    assert a.turns == 0  # alive (and so is its policy) while b runs
    b = Agent(model=two_step_model(), tools=ToolRegistry([add]), before_tool_call=b_hook)
    await b.prompt("go")
    assert (a_hook.seen, b_hook.seen) == ([], ["c1"])


async def test_regression_a_base_exception_at_turn_start_wedged_the_agent(monkeypatch):
    real, fired = _turn_run.TurnState, []

    def ki_once():
        if not fired:
            fired.append(1)
            raise KeyboardInterrupt
        return real()

    monkeypatch.setattr(_turn_run, "TurnState", ki_once)  # where TurnRun finds it
    agent = Agent(model=ScriptedModel([scripted_response("r1", "ok")]))
    agent.steer("queued")
    with pytest.raises(KeyboardInterrupt):
        await agent.prompt("first")
    assert not agent.running
    assert [m.content for m in agent.queued_steering] == ["queued"]
    await agent.aclose()


async def test_regression_a_failed_turn_start_kept_the_prompt_id_reserved(monkeypatch, tmp_path):
    agent = Agent(model=ScriptedModel([scripted_response("r1", "ok")]), store=JsonlStore(tmp_path))

    def fail(self, turn, sequence, model=""):
        raise LedgerError("No space left on device")

    with monkeypatch.context() as m:
        m.setattr(Ledger, "turn_started", fail)
        with pytest.raises(LedgerError):
            await agent.prompt(UserMessage("u1", "hi"))
    agent.steer(UserMessage("u1", "hi"))  # HEAD: TranscriptError "message id 'u1' is queued"
    await agent.aclose()


@tool
async def extra() -> str:
    """Registered while the turn starts."""
    return "x"


async def test_regression_a_tool_registered_on_turn_started_reached_the_running_turn():
    tools, model = ToolRegistry(), ScriptedModel([scripted_response("r1", "ok")])
    agent = Agent(model=model, tools=tools)
    async with agent.turn("go") as run:
        async for event in run:
            if event.type == "turn.started":
                tools.register(extra)
    assert model.requests[0].tools == ()


@pytest.mark.parametrize("bad", [True, 1.5, "3", None])
def test_regression_agent_max_steps_of_the_wrong_type_is_refused_as_the_loop_does(bad):
    # issue 14: the Agent now refuses what run_agent_loop refuses, in its words (a
    # wrong type is a TypeError there), instead of a message of its own.
    with pytest.raises(TypeError, match="max_steps must be an int, got"):
        Agent(model=ScriptedModel([]), max_steps=bad)


def test_regression_an_unusable_seed_is_refused_at_once():
    with pytest.raises(TypeError, match="seed must be"):
        Agent(model=ScriptedModel([]), seed=[1, 2])


def test_regression_agents_seeded_1_and_1_0_shared_one_seed():
    one, other = Agent(model=ScriptedModel([]), seed=1), Agent(model=ScriptedModel([]), seed=1.0)
    assert one._state.policy is not other._state.policy and type(other._state.policy.seed) is float
