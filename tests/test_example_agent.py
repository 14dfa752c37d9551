"""An example of testing your own agent with trio-agent's toolkit.

This file is what the site's "Testing your agent" page (docs/concepts/testing.md)
shows; it runs in our suite as written. It uses the pytest plugin's fixtures
(``scripted_model``, ``event_recorder``, ``explore``), which are there once
trio-agent is installed.
"""

import trio
import trio.lowlevel

from trio_agent import Agent, RetryPolicy, ToolCall, ToolRegistry, UserMessage, tool
from trio_agent.testing import CutStream, FaultyModel, scripted_response

# --- the application under test: a tiny weather agent --------------------------------

FORECASTS = {"Hanoi": "31 C, humid", "Oslo": "2 C, snow"}


@tool
async def forecast(city: str) -> str:
    """Tomorrow's forecast for a city."""
    await trio.lowlevel.checkpoint()  # pretend to call a service
    return FORECASTS.get(city, "unknown city")


def weather_agent(model) -> Agent:
    return Agent(
        model=model,
        tools=ToolRegistry([forecast]),
        system="Answer briefly.",
        retry=RetryPolicy(jitter=0),
    )


# --- the tests -------------------------------------------------------------------------


def script():
    return [
        scripted_response("r1", [ToolCall("c1", "forecast", {"city": "Hanoi"})]),
        scripted_response("r2", "Tomorrow in Hanoi: 31 C and humid.", text_chunks=4),
    ]


async def test_the_agent_looks_the_forecast_up(scripted_model, event_recorder):
    model = scripted_model(*script())
    agent = weather_agent(model)
    events, result = await event_recorder.record(agent.turn(UserMessage("u1", "Hanoi?")))
    assert result.final_text == "Tomorrow in Hanoi: 31 C and humid."
    assert result.messages[2].content == "31 C, humid"  # what the tool answered
    assert model.requests[1].system == "Answer briefly."


async def test_the_agent_survives_a_dropped_stream(scripted_model, autojump_clock):
    flaky = FaultyModel(scripted_model(*script()[:1], *script()), [CutStream(call=1, after=0)])
    result = await weather_agent(flaky).prompt(UserMessage("u1", "Hanoi?"))
    assert result.end.reason == "completed"  # retried inside the same step


async def test_cancelling_at_any_point_keeps_the_conversation_valid(scripted_model, explore):
    # explore() cancels the turn after each of its checkpoints in turn and checks
    # every promise of the contract each time (assert_run_invariants).
    report = await explore(lambda: weather_agent(scripted_model(*script())).turn("Hanoi?"))
    assert "cancelled" in report.outcomes and report.outcomes[-1] == "completed"
