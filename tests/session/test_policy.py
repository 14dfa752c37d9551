"""``SessionPolicy``, the frozen value agents built alike share (issue 13, the review
of the room-making split): what it keeps alive, what makes two policies the same,
and the seed it is given."""

from __future__ import annotations

import dataclasses
import gc
import weakref

import pytest

from trio_agent import Agent, ToolCall, ToolRegistry, tool
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


def test_regression_a_finished_agent_lets_its_hooks_go():
    """Issue 13 (review of the room-making split): an agent that was gone kept its hooks (and what
    they close over) alive through a shared policy."""

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


async def test_regression_agents_with_equal_hooks_each_call_their_own():
    """Issue 13 (review of the room-making split): two agents whose hooks compare equal shared one
    hook object: one agent's calls went to the other's hook."""
    a_hook, b_hook = Audit("audit"), Audit("audit")
    a = Agent(model=two_step_model(), tools=ToolRegistry([add]), before_tool_call=a_hook)
    assert a.turns == 0  # alive (and so is its policy) while b runs
    b = Agent(model=two_step_model(), tools=ToolRegistry([add]), before_tool_call=b_hook)
    await b.prompt("go")
    assert (a_hook.seen, b_hook.seen) == ([], ["c1"])


def test_regression_an_unusable_seed_is_refused_at_once():
    """Issue 13 (review of the room-making split): a seed that cannot seed a random generator was
    taken, and failed at the first retry."""
    with pytest.raises(TypeError, match="seed must be"):
        Agent(model=ScriptedModel([]), seed=[1, 2])


def test_regression_agents_seeded_1_and_1_0_keep_their_own_seed():
    """Issue 13 (review of the room-making split): agents seeded 1 and 1.0 shared one policy, so one
    got the other's seed."""
    one, other = Agent(model=ScriptedModel([]), seed=1), Agent(model=ScriptedModel([]), seed=1.0)
    assert one._state.policy is not other._state.policy and type(other._state.policy.seed) is float
