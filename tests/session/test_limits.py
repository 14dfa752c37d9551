"""``UsageLimits`` (issue 35): per turn (``Agent(usage_limits=)``, a turn's own)
and per session (``Agent(session_usage_limits=)``, across turns and resumes):
requests, tokens and cost checked before each request, tool calls before each
call, the turn ending with ``usage_limit`` and a complete transcript."""

from __future__ import annotations

import json

import msgspec
import pytest
from helpers import add, call

from trio_agent import (
    Agent,
    FallbackModel,
    JsonlStore,
    ToolRegistry,
    TransientModelError,
    TurnUsageLimit,
    Usage,
    UsageLimits,
    validate_transcript,
)
from trio_agent.cli._output import describe_end
from trio_agent.pricing import Price
from trio_agent.testing import ScriptedModel, scripted_response

USAGE = Usage(input_tokens=100, output_tokens=10)


def step(i: int, calls: int = 1, usage: Usage = USAGE):
    return scripted_response(
        f"r{i}",
        [call("add", f"c{i}-{j}", {"left": i, "right": j}) for j in range(calls)],
        usage=usage,
    )


def answer(i: int, usage: Usage = USAGE):
    return scripted_response(f"f{i}", "done", usage=usage)


class Priced:
    """A scripted model with a name and a provider, so that its answers can be priced."""

    provider = "openai"

    def __init__(self, name: str, script: list) -> None:
        self.model = name
        self.scripted = ScriptedModel(script)

    def stream(self, request):
        return self.scripted.stream(request)


PRICES = {"m": Price(input=0.001, output=0.002)}  # a step of USAGE costs 0.12


def agent_on(script, **options):
    model = ScriptedModel(script)
    return Agent(model=model, tools=ToolRegistry([add]), **options), model


async def test_a_request_past_the_turns_limit_is_not_sent():
    agent, model = agent_on(
        [step(1), step(2), step(3), answer(4)], usage_limits=UsageLimits(requests=2)
    )
    result = await agent.prompt("go")
    assert result.end == TurnUsageLimit(name="requests", scope="turn", used=2, limit=2)
    assert model.call_count == 2 and result.steps == 2
    validate_transcript(result.messages)  # every call answered
    assert agent.awaiting_reply  # the model owes an answer: a later turn continues


@pytest.mark.parametrize(
    ("name", "limit", "used"),
    [("input_tokens", 150, 200), ("output_tokens", 20, 20), ("total_tokens", 200, 220)],
)
async def test_tokens_are_checked_before_each_request(name, limit, used):
    agent, model = agent_on(
        [step(1), step(2), step(3), answer(4)], usage_limits=UsageLimits(**{name: limit})
    )
    result = await agent.prompt("go")
    assert result.end == TurnUsageLimit(name=name, scope="turn", used=used, limit=limit)
    assert model.call_count == 2


@pytest.mark.parametrize("execution", ["sequential", "parallel"])
async def test_calls_past_the_tool_call_limit_get_an_error_result_and_end_the_turn(execution):
    agent, model = agent_on(
        [step(1, calls=3), answer(2)],
        usage_limits=UsageLimits(tool_calls=2),
        tool_execution=execution,
    )
    result = await agent.prompt("go")
    assert result.end == TurnUsageLimit(name="tool_calls", scope="turn", used=3, limit=2)
    assert model.call_count == 1  # no request after the batch
    validate_transcript(result.messages)
    results = [m for m in result.messages if type(m).__name__ == "ToolResultMessage"]
    assert [r.is_error for r in results] == [False, False, True]
    assert "tool_calls limit (2) is reached (UsageLimits): this call did not run" in (
        results[2].content
    )


async def test_the_output_tool_is_not_a_tool_call():
    from trio_agent.limits import OUTPUT_TOOL_NAME

    script = [scripted_response("r1", [call(OUTPUT_TOOL_NAME, "o1", {"response": 42})])]
    agent, _ = agent_on(script, output_type=int, usage_limits=UsageLimits(tool_calls=0))
    result = await agent.prompt("go")
    assert result.end.reason == "completed" and result.output == 42


async def test_a_turns_own_limits_replace_the_agents_for_that_turn():
    agent, model = agent_on(
        [step(1), step(2), answer(3), step(4), answer(5)],
        usage_limits=UsageLimits(requests=1),
    )
    first = await agent.prompt("go", usage_limits=UsageLimits(requests=5))
    assert first.end.reason == "completed" and first.steps == 3
    second = await agent.prompt("again")  # the agent's own again
    assert second.end == TurnUsageLimit(name="requests", scope="turn", used=1, limit=1)


async def test_session_limits_hold_across_turns_and_a_turn_may_not_even_start():
    agent, model = agent_on(
        [step(1), answer(2), step(3), answer(4)],
        session_usage_limits=UsageLimits(requests=3),
    )
    assert (await agent.prompt("one")).end.reason == "completed"
    second = await agent.prompt("two")
    assert second.end == TurnUsageLimit(name="requests", scope="session", used=3, limit=3)
    third = await agent.prompt("three")
    assert third.end == TurnUsageLimit(name="requests", scope="session", used=3, limit=3)
    assert third.steps == 0 and model.call_count == 3


async def test_session_limits_hold_across_resume(tmp_path):
    store = JsonlStore(tmp_path)
    limits = UsageLimits(requests=4, tool_calls=2)
    agent = Agent(
        model=ScriptedModel([step(1), answer(2)]),
        tools=[add],
        store=store,
        session_usage_limits=limits,
    )
    async with agent:
        assert (await agent.prompt("one")).end.reason == "completed"
    model = ScriptedModel([step(3, calls=2), answer(4)])
    resumed = await Agent.resume(
        store, agent.session_id, model=model, tools=[add], session_usage_limits=limits
    )
    async with resumed:
        result = await resumed.prompt("two")
    # one call ran in turn 1: of the two asked for now, the second is past the limit
    assert result.end == TurnUsageLimit(name="tool_calls", scope="session", used=3, limit=2)
    assert model.call_count == 1


class Down:
    """A model whose every attempt fails as a provider's would (a 503)."""

    def __init__(self) -> None:
        self.attempts = 0

    def stream(self, request):
        self.attempts += 1
        raise TransientModelError("503 from the first model")


@pytest.mark.parametrize(
    ("name", "limit", "used"),
    [("requests", 2, 2), ("input_tokens", 200, 200), ("total_tokens", 220, 220)],
)
async def test_session_requests_and_tokens_hold_across_resume_and_a_fallback(
    tmp_path, name, limit, used
):
    """DESIGN 12.3: what the session's earlier turns used, read from the ledger on
    resume, counts against ``session_usage_limits``; a ``FallbackModel``'s failed
    attempt is no request and has no tokens (one step, answered by the next model)."""
    store = JsonlStore(tmp_path)
    limits = UsageLimits(**{name: limit})
    down = Down()
    first = ScriptedModel([answer(1)])
    agent = Agent(model=FallbackModel(down, first), store=store, session_usage_limits=limits)
    async with agent:
        assert (await agent.prompt("one")).end.reason == "completed"
    assert down.attempts == 1 and first.call_count == 1
    later = ScriptedModel([answer(2), answer(3)])
    resumed = await Agent.resume(
        store, agent.session_id, model=FallbackModel(down, later), session_usage_limits=limits
    )
    async with resumed:
        assert (await resumed.prompt("two")).end.reason == "completed"
        third = await resumed.prompt("three")
    assert third.end == TurnUsageLimit(name=name, scope="session", used=used, limit=limit)
    assert later.call_count == 1 and down.attempts == 2  # the third turn sent nothing


async def test_a_cost_limit_prices_each_answer():
    model = Priced("m", [step(1), step(2), step(3), answer(4)])
    agent = Agent(model=model, tools=[add], prices=PRICES, usage_limits=UsageLimits(cost=0.2))
    result = await agent.prompt("go")
    assert result.end.name == "cost" and result.end.limit == 0.2
    assert result.end.used == pytest.approx(0.24) and model.scripted.call_count == 2
    assert result.usage.cost == pytest.approx(0.24)


async def test_a_session_cost_limit_is_priced_from_the_ledger_on_resume(tmp_path):
    store = JsonlStore(tmp_path)
    limits = UsageLimits(cost=0.3)
    agent = Agent(
        model=Priced("m", [step(1), answer(2)]),
        tools=[add],
        store=store,
        prices=PRICES,
        session_usage_limits=limits,
    )
    async with agent:
        await agent.prompt("one")  # 0.24
    model = Priced("m", [step(3), answer(4)])
    resumed = await Agent.resume(
        store, agent.session_id, model=model, prices=PRICES, session_usage_limits=limits
    )
    async with resumed:
        result = await resumed.prompt("two")
    assert result.end.name == "cost" and result.end.scope == "session"
    assert result.end.used == pytest.approx(0.36) and model.scripted.call_count == 1


def test_a_cost_limit_without_a_price_is_refused_when_it_is_set(monkeypatch):
    import trio_agent.session._limits as limits_module

    monkeypatch.setattr(limits_module, "genai_installed", lambda: False)
    model = Priced("unknown-model", [answer(1)])
    with pytest.raises(ValueError, match="no price for model 'unknown-model'"):
        Agent(model=model, usage_limits=UsageLimits(cost=1.0))
    with pytest.raises(ValueError, match="no price for model 'unknown-model'"):
        Agent(model=model, session_usage_limits=UsageLimits(cost=1.0))
    agent = Agent(model=model)
    with pytest.raises(ValueError, match="no price for model 'unknown-model'"):
        agent.turn("hi", usage_limits=UsageLimits(cost=1.0))
    Agent(
        model=model,
        prices={"unknown-model": Price(input=0, output=0)},
        usage_limits=UsageLimits(cost=1),
    )


async def test_a_price_genai_prices_does_not_know_fails_the_turn_before_it_starts():
    model = Priced("no-such-model-anywhere", [answer(1)])
    agent = Agent(model=model, usage_limits=UsageLimits(cost=1.0))
    with pytest.raises(ValueError, match="no-such-model-anywhere"):
        await agent.prompt("hi")
    assert agent.turns == 0 and model.scripted.call_count == 0 and agent.messages == ()


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"requests": -1}, ValueError),
        ({"tool_calls": True}, ValueError),
        ({"input_tokens": 1.5}, ValueError),
        ({"cost": float("nan")}, ValueError),
        ({"cost": -0.5}, ValueError),
        ({"cost": "1"}, ValueError),
    ],
)
def test_a_bad_limit_is_refused_naming_it(given, error):
    with pytest.raises(error, match=next(iter(given))):
        UsageLimits(**given)


def test_limits_that_are_not_usage_limits_are_refused():
    with pytest.raises(TypeError, match="usage_limits must be a UsageLimits"):
        Agent(model=ScriptedModel([]), usage_limits={"requests": 3})
    with pytest.raises(TypeError, match="session_usage_limits must be a UsageLimits"):
        Agent(model=ScriptedModel([]), session_usage_limits=3)


async def test_the_ledger_and_the_command_line_say_which_limit_ended_the_turn(tmp_path):
    agent = Agent(
        model=ScriptedModel([step(1), answer(2)]),
        tools=[add],
        store=JsonlStore(tmp_path),
        usage_limits=UsageLimits(requests=1),
    )
    async with agent:
        result = await agent.prompt("go")
    [ledger] = tmp_path.glob("*.jsonl")
    [end] = [json.loads(line) for line in ledger.read_text().splitlines() if "turn/end" in line]
    assert end["end"] == {
        "reason": "usage_limit",
        "name": "requests",
        "scope": "turn",
        "used": 1,
        "limit": 1,
    }
    assert msgspec.json.decode(json.dumps(end["end"]), type=TurnUsageLimit) == result.end
    assert describe_end(result.end) == "usage_limit: the turn's requests limit (1 of 1)"
    cost = TurnUsageLimit(name="cost", scope="session", used=0.25, limit=0.2)
    assert describe_end(cost) == "usage_limit: the session's cost limit ($0.2500 of $0.2000)"


async def test_an_approved_call_is_held_to_the_tool_call_limit_of_the_turn_that_runs_it():
    """The approved calls a turn runs first are a batch like any other: past the
    turn's ``tool_calls`` limit they get the error result and do not run, and the
    turn ends with ``usage_limit`` (an approval is no way around a limit)."""
    from trio_agent import tool

    ran: list[int] = []

    @tool(requires_approval=True)
    async def guarded(left: int) -> str:
        """A call that needs a yes."""
        ran.append(left)
        return "ran"

    script = [scripted_response("r1", [call("guarded", "c1", {"left": 1})]), answer(2)]
    model = ScriptedModel(script)
    agent = Agent(model=model, tools=[guarded])
    assert (await agent.prompt("go")).end.reason == "awaiting_approval"
    await agent.approve("c1")
    result = await agent.prompt(usage_limits=UsageLimits(tool_calls=0))
    assert result.end == TurnUsageLimit(name="tool_calls", scope="turn", used=1, limit=0)
    assert ran == [] and model.call_count == 1
    validate_transcript(result.messages)
    [answered] = [m for m in result.messages if type(m).__name__ == "ToolResultMessage"]
    assert answered.is_error and "tool_calls limit (0) is reached" in answered.content
