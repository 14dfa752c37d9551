"""Model settings (DESIGN 11.3): checked when given, merged field by field
(run or agent, then turn), sent with every request, and recorded with each
step in the ledger."""

from __future__ import annotations

import math

import msgspec
import pytest
from helpers import add, call, settle, start

from trio_agent import (
    Agent,
    Completed,
    JsonlStore,
    ModelRequest,
    ModelSettings,
    ToolRegistry,
    UserMessage,
)
from trio_agent._settings import merge_settings
from trio_agent.ledger import StepStartRecord
from trio_agent.testing import ScriptedModel, scripted_response

FULL = ModelSettings(
    max_tokens=256,
    temperature=0.2,
    top_p=0.9,
    stop=("END",),
    seed=7,
    tool_choice="add",
    parallel_tool_calls=False,
    reasoning_effort="low",
    thinking_budget=2048,
    extra_body={"metadata": {"user": "u1"}},
    extra_headers={"anthropic-beta": "x"},
)


@pytest.mark.parametrize(
    ("settings", "error", "words"),
    [
        (ModelSettings(max_tokens=0), ValueError, "max_tokens must be >= 1"),
        (ModelSettings(max_tokens=1.5), TypeError, "max_tokens must be an int"),  # type: ignore[arg-type]
        (ModelSettings(temperature=2.5), ValueError, "temperature must be in [0, 2]"),
        (ModelSettings(temperature=math.nan), TypeError, "temperature must be a finite number"),
        (ModelSettings(top_p=-0.1), ValueError, "top_p must be in [0, 1]"),
        (ModelSettings(stop=["x"]), TypeError, "stop must be a tuple"),  # type: ignore[arg-type]
        (ModelSettings(stop=("",)), TypeError, "non-empty str"),
        (ModelSettings(stop=("x",) * 17), ValueError, "more than 16"),
        (ModelSettings(tool_choice="two words"), ValueError, "tool_choice must be"),
        (ModelSettings(parallel_tool_calls=1), TypeError, "parallel_tool_calls"),  # type: ignore[arg-type]
        (ModelSettings(reasoning_effort="max"), ValueError, "reasoning_effort must be one of"),
        (ModelSettings(thinking_budget=0), ValueError, "thinking_budget must be >= 1"),
        (ModelSettings(extra_body={"x": object()}), TypeError, "extra_body cannot be encoded"),
        (ModelSettings(extra_body={1: "x"}), TypeError, "extra_body must be a dict"),  # type: ignore[dict-item]
        (ModelSettings(extra_headers={"bad name": "x"}), ValueError, "is not a header name"),
        (ModelSettings(extra_headers={"x-a": "1\r\nx-b: 2"}), ValueError, "must not hold CR, LF"),
        (ModelSettings(extra_headers={"Host": "evil"}), ValueError, "written by the HTTP client"),
        ({"temperature": 0.1}, TypeError, "settings must be a ModelSettings"),
    ],
)
def test_bad_settings_are_refused_when_given_naming_the_field(settings, error, words):
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        start([scripted_response("r1", "hi")], settings=settings)
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        Agent(model=ScriptedModel([]), settings=settings)
    agent = Agent(model=ScriptedModel([]))
    with pytest.raises(error):
        agent.turn("hi", settings=settings)


def test_a_tool_choice_must_name_a_tool_of_the_run():
    with pytest.raises(ValueError, match="names 'search', which is not one of the tools"):
        start([scripted_response("r1", "hi")], settings=ModelSettings(tool_choice="search"))
    agent = Agent(model=ScriptedModel([]), tools=[add])
    agent.turn("hi", settings=ModelSettings(tool_choice="add"))  # a tool it has: fine
    with pytest.raises(ValueError, match="names 'search'"):
        agent.turn("hi", settings=ModelSettings(tool_choice="search"))
    for mode in ("auto", "none", "required"):
        start([scripted_response("r1", "hi")], settings=ModelSettings(tool_choice=mode))


def test_merging_is_field_by_field_and_the_later_wins_where_it_is_set():
    agent = ModelSettings(temperature=0.2, max_tokens=100, extra_headers={"a": "1", "b": "1"})
    turn = ModelSettings(max_tokens=50, stop=("X",), extra_headers={"b": "2"})
    assert merge_settings(agent, turn) == ModelSettings(
        temperature=0.2, max_tokens=50, stop=("X",), extra_headers={"a": "1", "b": "2"}
    )
    assert merge_settings(None, turn) is turn and merge_settings(agent, None) is agent
    assert merge_settings(turn, ModelSettings()) == turn  # nothing set: nothing changes


async def test_every_request_of_a_run_carries_its_settings():
    settings = ModelSettings(temperature=0.1, tool_choice="add")
    run, model = start(
        [
            scripted_response("r1", [call("add", "c1", {"left": 1, "right": 2})]),
            scripted_response("r2", "3"),
        ],
        settings=settings,
    )
    _, result = await settle(run)
    assert isinstance(result, Completed)
    assert [r.settings for r in model.requests] == [settings, settings]


async def test_a_turns_settings_go_over_the_agents_for_that_turn_only():
    model = ScriptedModel([scripted_response("r1", "a"), scripted_response("r2", "b")])
    agent = Agent(model=model, settings=ModelSettings(temperature=0.2, max_tokens=100))
    await agent.prompt("one", settings=ModelSettings(max_tokens=10, seed=3))
    await agent.prompt("two")
    assert model.requests[0].settings == ModelSettings(temperature=0.2, max_tokens=10, seed=3)
    assert model.requests[1].settings == ModelSettings(temperature=0.2, max_tokens=100)


def test_settings_given_are_copied_so_later_changes_do_not_reach_the_run():
    body = {"metadata": {"user": "u1"}}
    run, model = start([scripted_response("r1", "hi")], settings=ModelSettings(extra_body=body))
    body["metadata"]["user"] = "changed"
    assert run._spec.settings.extra_body == {"metadata": {"user": "u1"}}


def test_a_request_with_settings_round_trips_as_json_without_its_unset_fields():
    request = ModelRequest(
        "request-001", (UserMessage("u1", "hi"),), (), settings=ModelSettings(temperature=0.5)
    )
    encoded = msgspec.json.encode(request)
    assert b'"settings":{"temperature":0.5}' in encoded
    assert msgspec.json.decode(encoded, type=ModelRequest) == request
    assert msgspec.json.decode(msgspec.json.encode(FULL), type=ModelSettings) == FULL


async def test_each_step_records_its_settings_and_a_resume_keeps_going_with_its_own(tmp_path):
    store = JsonlStore(tmp_path)
    settings = ModelSettings(temperature=0.3, extra_body={"metadata": {"user": "u1"}})
    model = ScriptedModel([scripted_response("r1", "a")])
    async with Agent(model=model, store=store, session_id="s1", settings=settings) as agent:
        await agent.prompt("one")
    records = (await store.load("s1")).records
    assert [r.settings for r in records if type(r) is StepStartRecord] == [settings]
    model = ScriptedModel([scripted_response("r2", "b")])
    resumed = await Agent.resume(store, "s1", model=model, settings=ModelSettings(seed=1))
    async with resumed:
        await resumed.prompt("two", settings=ModelSettings(top_p=0.5))
    assert model.requests[0].settings == ModelSettings(seed=1, top_p=0.5)
    records = (await store.load("s1")).records
    assert [r.settings for r in records if type(r) is StepStartRecord][-1] == ModelSettings(
        seed=1, top_p=0.5
    )


async def test_extra_header_values_are_not_written_to_the_ledger(tmp_path):
    # an extra header may carry a key (Azure's api-key): the ledger keeps its name only
    store = JsonlStore(tmp_path)
    settings = ModelSettings(temperature=0.3, extra_headers={"api-key": "sk-SECRET-VALUE"})
    model = ScriptedModel([scripted_response("r1", "a")])
    async with Agent(model=model, store=store, session_id="s1", settings=settings) as agent:
        await agent.prompt("one")
    assert model.requests[0].settings == settings  # the request still carries it
    assert b"sk-SECRET-VALUE" not in (tmp_path / "s1.jsonl").read_bytes()
    records = (await store.load("s1")).records
    (recorded,) = [r.settings for r in records if type(r) is StepStartRecord]
    assert recorded == ModelSettings(temperature=0.3, extra_headers={"api-key": "[redacted]"})


def test_agents_with_equal_settings_holding_dicts_are_made_and_share_a_policy():
    settings = ModelSettings(extra_body={"a": [1]}, extra_headers={"x-a": "1"})
    first = Agent(model=ScriptedModel([]), tools=ToolRegistry([]), settings=settings)
    second = Agent(model=ScriptedModel([]), tools=ToolRegistry([]), settings=settings)
    assert first._state.policy is second._state.policy


def test_the_repr_of_settings_shows_extra_headers_by_name_only():
    settings = ModelSettings(temperature=0.5, extra_headers={"api-key": "sk-SECRET-VALUE"})
    assert repr(settings) == (
        "ModelSettings(temperature=0.5, extra_headers={'api-key': '[redacted]'})"
    )
    assert settings.extra_headers == {"api-key": "sk-SECRET-VALUE"}  # the value is kept
