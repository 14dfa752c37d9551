"""pydantic's types as ``output_type`` (issue 35 item 3, DESIGN 12.3): pydantic's
schema and validation over the real adapters in tool and native mode, its
errors back to the model at their JSON paths (inside the ``{"response": ...}``
wrapper too), partial values while the answer streams, and the accepted
output recorded in the ledger as JSON."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
import trio
from loopback import Reply
from pydantic_types import Item, Order, Point, Sealed
from wire_builders import ALL_WIRES, ChatWire, pieces

from trio_agent import (
    OUTPUT_TOOL_NAME,
    Agent,
    Completed,
    JsonlStore,
    ModelChunk,
    TextDelta,
    ToolCall,
    ToolRegistry,
    UserMessage,
    run_agent_loop,
)
from trio_agent.ledger import OutputRecord
from trio_agent.output import PartialOutput
from trio_agent.output._spec import output_spec
from trio_agent.testing import ScriptedModel, assert_run_invariants, scripted_response

MODES = ("tool", "native")
COMBOS = [(wire, mode) for wire in ALL_WIRES for mode in MODES]
EVERY_WIRE_AND_MODE = pytest.mark.parametrize(
    ("wire", "mode"), COMBOS, ids=[f"{wire.name}-{mode}" for wire, mode in COMBOS]
)
GOOD = {"items": [{"name": "tea", "qty": 2}], "note": "soon"}
BAD = {"items": [{"name": "tea", "qty": 0}]}
QTY_PATH = "Input should be greater than 0 - at `$.items[0].qty`"


def answer(wire: Any, mode: str, value: Any, call_id: str = "call_1") -> Reply:
    raw = json.dumps(value)
    body = wire.call(call_id, OUTPUT_TOOL_NAME, raw) if mode == "tool" else wire.text(pieces(raw))
    return Reply(body=body, piece=4096, chunked=True)


def told(wire: Any, mode: str, body: dict[str, Any]) -> str:
    return wire.results(body)[-1][0] if mode == "tool" else wire.texts(body, "user")[-1]


async def finish(run: Any) -> Any:
    with trio.fail_after(30):
        async with run:
            events = [event async for event in run]
    assert_run_invariants(events, run.result)
    return run.result


def loop(model: Any, output_type: Any, mode: str = "tool", **options: Any) -> Any:
    return run_agent_loop(
        messages=[UserMessage("u1", "what was ordered?")],
        model=model,
        tools=ToolRegistry(),
        max_steps=4,
        output_type=output_type,
        output_mode=mode,
        **options,
    )


@EVERY_WIRE_AND_MODE
async def test_a_pydantic_model_is_an_output_type_refused_then_fixed(loopback, wire, mode):
    """``output_type=`` a pydantic model was refused with msgspec's "requires either
    specifying a `schema_hook`" message."""
    loopback.replies += [answer(wire, mode, BAD), answer(wire, mode, GOOD, "call_2")]
    result = await finish(loop(wire.model(loopback), Order, mode))
    assert type(result) is Completed and type(result.output) is Order
    assert result.output == Order(items=[Item(name="tea", qty=2)], note="soon")
    said = told(wire, mode, loopback.requests[1].json())
    assert QTY_PATH in said and "(1 retry left)" in said
    body = loopback.requests[0].json()
    asked = json.dumps(body[wire.field] if mode == "native" else body["tools"])
    assert '"description": "How many."' in asked and '"exclusiveMinimum": 0' in asked


@pytest.mark.parametrize("mode", MODES)
async def test_a_list_of_models_travels_wrapped_and_errors_name_the_wrapper(loopback, mode):
    loopback.replies += [
        answer(ChatWire, mode, {"response": [GOOD, {"items": "none"}]}),
        answer(ChatWire, mode, {"response": [GOOD]}, "call_2"),
    ]
    result = await finish(loop(ChatWire.model(loopback), list[Order], mode))
    assert type(result) is Completed and [type(o) for o in result.output] == [Order]
    said = told(ChatWire, mode, loopback.requests[1].json())
    assert "Input should be a valid " in said and " - at `$.response[1].items`" in said
    spec = output_spec(list[Order], mode)
    assert spec is not None and spec.wrapped
    assert spec.schema["required"] == ["response"] and "title" not in spec.schema
    assert spec.schema["additionalProperties"] is False


async def test_a_native_answer_that_is_not_json_is_told_so():
    script = [
        scripted_response("r1", '{"items": ['),
        scripted_response("r2", json.dumps(GOOD)),
    ]
    model = ScriptedModel(script)
    result = await finish(loop(model, Order, "native"))
    assert type(result) is Completed and type(result.output) is Order
    asked = model.requests[1].messages[-1].content
    assert asked.startswith(
        "Your answer does not fit the required JSON schema: the answer is not JSON"
    )


def test_a_sealed_model_is_asked_for_strictly_in_native_mode():
    """extra="forbid" and every field required: what OpenAI's strict mode takes."""
    sealed = output_spec(Sealed, "native")
    loose = output_spec(Order, "native")
    assert sealed is not None and sealed.format is not None and sealed.format.strict
    assert loose is not None and loose.format is not None and not loose.format.strict


def chunks(text: str, size: int) -> list[ModelChunk]:
    return [
        ModelChunk(sequence=i, request_id="request-001", chunk=TextDelta(text[at : at + size]))
        for i, at in enumerate(range(0, len(text), size))
    ]


@pytest.mark.parametrize("size", [1, 3, 7])
def test_partial_values_of_a_pydantic_model_grow_into_the_final_one(size):
    # qty first: an item shows once all its required fields have started
    final = {"items": [{"qty": 12, "name": "green tea"}, {"qty": 1, "name": "cake"}], "note": "x"}
    state = PartialOutput(Order)
    got = []
    for event in chunks(json.dumps(final), size):
        if state.advance(event):
            got.append(state.value)
    assert got and all(type(value) is Order for value in got)
    assert got[-1] == Order.model_validate(final)
    names = [[item.name for item in value.items] for value in got]
    assert ["gree"] in names or size > 1  # the string being written shows as it grows
    for value in got:  # every partial value could grow into the final one
        assert len(value.items) <= 2
        for item, whole in zip(value.items, final["items"], strict=False):
            assert whole["name"].startswith(item.name)


def test_partial_values_of_a_wrapped_pydantic_type_and_its_tool_mode_call():
    state = PartialOutput(list[Point])
    assert state.wrapped
    got = [
        state.value
        for event in chunks(json.dumps({"response": [{"x": 1, "y": 2}, {"x": 3}]}), 2)
        if state.advance(event)
    ]
    assert got[0] == [] and got[-1] == [Point(1, 2), Point(3, 0)]
    tool_mode = PartialOutput(Order)
    call = ToolCall("c1", OUTPUT_TOOL_NAME, GOOD)
    event = ModelChunk(sequence=0, request_id="request-001", chunk=call)
    assert tool_mode.feed(event) == Order.model_validate(GOOD)


async def test_an_agents_pydantic_output_is_recorded_as_json(tmp_path):
    """The ledger recorded a pydantic output as null ("has no JSON form")."""
    script = [scripted_response("r1", [ToolCall("c1", OUTPUT_TOOL_NAME, GOOD)])]
    store = JsonlStore(tmp_path)
    agent = Agent(model=ScriptedModel(script), store=store, session_id="s1", output_type=Order)
    result = await agent.prompt("what was ordered?")
    await agent.aclose()
    assert type(result.output) is Order
    (record,) = [r for r in (await store.load("s1")).records if type(r) is OutputRecord]
    assert record.output == GOOD and record.error is None
    assert msgspec.json.decode(msgspec.json.encode(record.output)) == GOOD


@pytest.mark.parametrize("mode", MODES)
async def test_a_strict_pydantic_model_takes_the_json_its_schema_asks_for(mode):
    """A model with ``ConfigDict(strict=True)`` was validated from the output tool's
    arguments as Python: the strings its schema asks for a datetime, a UUID, an
    Enum and the list of a tuple were refused ("Input should be an instance of
    UUID"), every try, so a tool-mode turn always ended ``OUTPUT_INVALID``
    (native mode read the JSON text and took them)."""
    import datetime
    import enum
    import uuid

    import pydantic

    class Color(enum.Enum):
        RED = "red"

    class Strict(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(strict=True)
        when: datetime.datetime
        color: Color
        pair: tuple[int, int]
        id: uuid.UUID

    value = {
        "when": "2026-01-02T03:04:05Z",
        "color": "red",
        "pair": [1, 2],
        "id": "12345678-1234-5678-1234-567812345678",
    }
    script = (
        [scripted_response("r1", [ToolCall("c1", OUTPUT_TOOL_NAME, value)])]
        if mode == "tool"
        else [scripted_response("r1", json.dumps(value))]
    )
    agent = Agent(model=ScriptedModel(script), output_type=Strict, output_mode=mode)
    result = await agent.prompt("when?")
    assert result.end.reason == "completed", result.end
    assert result.output is not None
    assert result.output.color is Color.RED and result.output.pair == (1, 2)
    assert result.output.id == uuid.UUID(value["id"])

    reader = PartialOutput(Strict)  # the partial reader takes the call as the loop does
    call = ToolCall("c1", OUTPUT_TOOL_NAME, value)
    assert reader.advance(ModelChunk(sequence=0, request_id="request-001", chunk=call))
    assert reader.value == result.output
    reader = PartialOutput(Strict)  # and the streamed JSON before it is complete
    text = json.dumps(value)[:-1]
    assert reader.advance(ModelChunk(sequence=0, request_id="request-001", chunk=TextDelta(text)))
    assert reader.value == result.output
