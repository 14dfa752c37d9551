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


@dataclasses.dataclass(frozen=True)
class Gate:
    name: str
    hold: bool = dataclasses.field(compare=False)
    asked: list = dataclasses.field(default_factory=list, compare=False, hash=False)

    async def __call__(self, call):
        self.asked.append(call.id)
        return self.hold


async def test_regression_agents_with_equal_approval_policies_each_ask_their_own():
    """Two agents whose ``approval`` policies compare equal shared one policy object,
    as the other hooks once did: one agent's calls were put to the other's policy,
    which let them run unapproved; and an approval policy that cannot be hashed (a
    plain ``@dataclass`` with ``__call__``) made ``Agent()`` raise ``TypeError``."""
    lenient, strict = Gate("gate", hold=False), Gate("gate", hold=True)
    a = Agent(model=two_step_model(), tools=ToolRegistry([add]), approval=lenient)
    assert a.turns == 0  # alive (and so is its policy) while b runs
    b = Agent(model=two_step_model(), tools=ToolRegistry([add]), approval=strict)
    result = await b.prompt("go")
    assert (lenient.asked, strict.asked) == ([], ["c1"])
    assert result.end.reason == "awaiting_approval"
    assert [call.id for call in b.pending_approvals] == ["c1"]

    @dataclasses.dataclass
    class Rule:  # eq by fields, so no __hash__
        async def __call__(self, call):
            return True

    ruled = Agent(model=ScriptedModel([]), approval=Rule())
    assert type(ruled._state.policy.approval) is Rule


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


def test_an_agent_made_again_with_the_same_plain_options_takes_the_policy_made_first():
    """Issue 38: an agent's options were checked and its policy made again for each
    agent, even with the options of one made just before and gone since (most of what
    ``Agent()`` cost, per request where each request makes its agent). The options as
    given, each with its type, now name the policy they made."""
    from trio_agent.session import _policy

    first = Agent(model=ScriptedModel([]), system="be brief", max_steps=7)
    policy = weakref.ref(first._state.policy)
    del first
    gc.collect()
    again = Agent(model=ScriptedModel([]), system="be brief", max_steps=7)
    assert again._state.policy is policy()  # kept while agents come and go
    # each value with its type: True is not 1, 5 is not 5.0, and bad values still fail
    assert again._state.policy.max_steps == 7 and again._state.policy.system == "be brief"
    Agent(model=ScriptedModel([]), system="be brief", max_steps=1)
    with pytest.raises(TypeError):
        Agent(model=ScriptedModel([]), system="be brief", max_steps=True)
    five = Agent(model=ScriptedModel([]), tool_grace_period=5)._state.policy
    assert type(five.tool_grace_period) is float
    with pytest.raises(ValueError, match="max_steps"):
        Agent(model=ScriptedModel([]), system="be brief", max_steps=0)
    # a hook is not a plain value: such an agent's options are checked each time
    hooked = Agent(model=ScriptedModel([]), before_tool_call=Audit("a"))._state.policy
    assert all(hooked is not kept for kept in _policy._GIVEN.values())
    # the options by name, in whatever order they are given
    from trio_agent.session._policy import POLICY_OPTIONS, SessionPolicy

    given = {name: getattr(again._state.policy, name) for name in POLICY_OPTIONS}
    given["max_steps"], given["retry"] = 9, None  # as given to Agent(): no retry policy
    backwards = SessionPolicy.build(**dict(reversed(given.items())))
    assert (backwards.max_steps, backwards.system) == (9, "be brief")
    key = _policy._given_key(given)
    assert key is not None and _policy._given_key(dict(reversed(given.items()))) == key
    # bounded: when full, it starts over
    for n in range(_policy._GIVEN_AT_MOST + 10):
        Agent(model=ScriptedModel([]), system=f"system {n}")
        assert 1 <= len(_policy._GIVEN) <= _policy._GIVEN_AT_MOST
    made_last = Agent(model=ScriptedModel([]), system=f"system {_policy._GIVEN_AT_MOST + 9}")
    assert made_last._state.policy in _policy._GIVEN.values()


@pytest.mark.parametrize("stored", [False, True])
async def test_a_session_that_compacts_holds_what_its_context_holds(stored, tmp_path):
    """Issue 38: a long session held every message it had ever had (3.8 KB a
    turn). With compaction, what the session holds stays flat: after 2,000 turns
    it holds what it held after 200, in memory or with a ledger (measured by
    tracemalloc, not a clock)."""
    import gc
    import itertools
    import tracemalloc

    from trio_agent import Agent
    from trio_agent.testing import CallableModel, scripted_response

    ids = itertools.count()

    def answer(request):
        return scripted_response(f"r{next(ids)}", f"answer {next(ids)} " * 8)

    async def compact(messages):
        keep = messages[-8:]
        return keep if keep[0].role == "user" else messages[-7:]

    from trio_agent import JsonlStore

    store = {"store": JsonlStore(tmp_path), "fsync": "never"} if stored else {}
    agent = Agent(
        model=CallableModel(answer, record_requests=False),
        **store,
        context_window=1000,
        reserve_output_tokens=100,
        compact=compact,
    )
    held = {}
    tracemalloc.start()
    try:
        for turn in range(1, 2001):
            await agent.prompt(f"question {turn} " * 8)
            if turn in (200, 2000):
                gc.collect()
                held[turn] = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    await agent.aclose()
    assert len(agent.messages) <= 16
    assert held[2000] < held[200] + 64 * 1024, held  # no growth with the turns
