"""pydantic's types as ``@tool`` parameters (``tools/_pydantic.py``,
``tools/_arguments.py``; issue 35 item 3, DESIGN 12.3): pydantic's schema and
validation, its errors back to the model at their JSON paths, ``Field``
defaults, a tool mixing msgspec's and pydantic's types, a model returned as
JSON, and the argument limits holding before pydantic sees anything."""

from __future__ import annotations

import datetime
import json
import uuid
from typing import Annotated, Any

import msgspec
import pydantic
import pytest
import trio
from loopback import Reply
from pydantic import Field
from pydantic_types import Checked, Holds, Item, Model, Order, Point
from wire_builders import ChatWire

from trio_agent import (
    MAX_ARGUMENT_CHARS,
    ToolArgumentsError,
    ToolCall,
    ToolRegistry,
    UserMessage,
    execute_tool_call,
    run_agent_loop,
    tool,
)


@tool
async def place(order: Order, rush: bool = False) -> Order:
    """Places an order."""
    assert type(order) is Order and all(type(item) is Item for item in order.items)
    return order


async def run_calls(loopback: Any, tools: list[Any], *calls: tuple[str, str]) -> Any:
    """Run a loop whose model (over the wire) makes ``calls`` (name, JSON
    arguments), one per step, then answers "done"."""
    loopback.replies += [
        Reply(body=ChatWire.call(f"call_{i}", name, arguments))
        for i, (name, arguments) in enumerate(calls)
    ]
    loopback.replies.append(Reply(body=ChatWire.text("done")))
    run = run_agent_loop(
        messages=[UserMessage("u1", "go")],
        model=ChatWire.model(loopback),
        tools=ToolRegistry(tools),
        max_steps=len(calls) + 1,
    )
    with trio.fail_after(30):
        async with run:
            async for _ in run:
                pass
    return run.result


async def test_a_pydantic_model_parameter_is_described_and_validated_by_pydantic(loopback):
    """A pydantic model parameter was refused at decoration with msgspec's
    "requires either specifying a `schema_hook`" message."""
    good = {"order": {"items": [{"name": "tea", "qty": 2}]}}
    bad = {"order": {"items": [{"name": "tea", "qty": 0}, {"qty": "many"}]}, "rush": "no"}
    result = await run_calls(
        loopback, [place], ("place", json.dumps(bad)), ("place", json.dumps(good))
    )
    assert result.final_text == "done"
    offered = loopback.requests[0].json()["tools"][0]["function"]["parameters"]
    assert offered["properties"]["order"] == {"$ref": "#/$defs/Order"}
    assert offered["$defs"]["Item"]["properties"]["qty"] == {
        "description": "How many.",
        "exclusiveMinimum": 0,
        "title": "Qty",
        "type": "integer",
    }
    assert offered["required"] == ["order"] and offered["additionalProperties"] is False
    refused, accepted = ChatWire.results(loopback.requests[2].json())
    # msgspec's check of the object comes first (the bool), then pydantic's
    assert refused[0] == (
        'Invalid arguments for tool "place": Expected `bool`, got `str` - at `$.rush`'
    )
    assert json.loads(accepted[0]) == {"items": [{"name": "tea", "qty": 2}], "note": None}


async def test_every_pydantic_error_goes_back_with_its_json_path():
    call = ToolCall("c1", "place", {"order": {"items": [{"name": "tea", "qty": 0}, {"qty": "x"}]}})
    result = await execute_tool_call(ToolRegistry([place]), call)
    assert result.is_error
    assert result.content == (
        'Invalid arguments for tool "place": '
        "Input should be greater than 0 - at `$.order.items[0].qty`; "
        "Field required - at `$.order.items[1].name`; "
        "Input should be a valid integer, unable to parse string as an integer "
        "- at `$.order.items[1].qty`"
    )


async def test_names_the_model_does_not_give_or_does_not_know_are_refused_first():
    registry = ToolRegistry([place])
    missing = await execute_tool_call(registry, ToolCall("c1", "place", {}))
    assert missing.content.endswith("Object missing required field `order`")
    unknown = {"order": {"items": []}, "extra": 1}
    result = await execute_tool_call(registry, ToolCall("c2", "place", unknown))
    assert result.content.endswith("Object contains unknown field `extra`")


@tool
async def label(
    word: Annotated[str, Field(max_length=5, description="The word.")],
    count: int = Field(3, gt=0, description="How many times."),
    tags: list[str] = Field(default_factory=list),  # noqa: B008 (pydantic's way)
    point: Point | None = None,
) -> dict[str, Any]:
    """Labels."""
    tags.append("seen")  # a fresh list each call: the factory is called each time
    return {"word": word, "count": count, "tags": tags, "point": point}


async def test_field_defaults_and_annotations_are_pydantics():
    """``Field(...)`` as a default or in ``Annotated``: its constraints, description
    and default (a factory called at each call), as pydantic-ai's users write."""
    properties = label.parameters["properties"]
    assert properties["word"] == {"type": "string", "maxLength": 5, "description": "The word."}
    assert properties["count"] == {
        "type": "integer",
        "exclusiveMinimum": 0,
        "description": "How many times.",
        "default": 3,
    }
    assert properties["point"]["default"] is None
    assert label.parameters["required"] == ["word"]
    first = await label.execute({"word": "hi"})
    assert first == {"word": "hi", "count": 3, "tags": ["seen"], "point": None}
    second = await label.execute({"word": "hi", "point": {"x": 1}})
    assert second["tags"] == ["seen"] and second["point"] == Point(1, 0)
    with pytest.raises(ToolArgumentsError) as caught:
        await label.execute({"word": "toolong", "count": 0, "point": {"x": "a"}})
    message = str(caught.value)
    assert "at least" not in message  # one message per problem, each at its path
    for path in ("$.word", "$.count", "$.point.x"):
        assert f"at `{path}`" in message, message


class Item2(msgspec.Struct):
    """A Struct whose schema name is ``Item`` too: its definition and pydantic's
    ``Item`` must both be there, each referred to by its own name."""

    sku: str


Item2.__name__ = Item2.__qualname__ = "Item"


@tool
async def restock(order: Order, bin: Item2, count: int = 1) -> str:
    """Restocks."""
    assert type(bin) is Item2 and type(order) is Order
    return f"{bin.sku}:{count}:{len(order.items)}"


async def test_a_tool_mixing_a_struct_and_a_model_checks_each_with_its_library():
    schema = restock.parameters
    bin_ref = schema["properties"]["bin"]["$ref"]
    order_ref = schema["properties"]["order"]["$ref"]
    defs = schema["$defs"]
    assert defs[bin_ref.removeprefix("#/$defs/")]["properties"] == {"sku": {"type": "string"}}
    order = defs[order_ref.removeprefix("#/$defs/")]
    item_ref = order["properties"]["items"]["items"]["$ref"]
    assert "qty" in defs[item_ref.removeprefix("#/$defs/")]["properties"]
    assert bin_ref != item_ref  # two classes named Item, two definitions
    ok = {"order": {"items": [{"name": "a", "qty": 1}]}, "bin": {"sku": "b7"}}
    assert await restock.execute(ok) == "b7:1:1"
    with pytest.raises(ToolArgumentsError, match=r"Expected `str`, got `int` - at `\$\.bin\.sku`"):
        await restock.execute({**ok, "bin": {"sku": 7}})
    with pytest.raises(ToolArgumentsError, match=r"at `\$\.order\.items`"):
        await restock.execute({**ok, "order": {"items": "none"}})


@tool
async def unpack(boxes: list[Holds], models: dict[str, Model]) -> str:
    """Unpacks."""
    assert all(type(box.model) is Model for box in boxes)
    return ",".join(f"{box.label}={box.model.x}" for box in boxes) + f";{sorted(models)}"


async def test_what_holds_a_model_is_validated_by_pydantic():
    """``list[...]`` of a standard dataclass holding a model, a dict of models."""
    result = await unpack.execute({"boxes": [{"model": {"x": "4"}}], "models": {"a": {"x": 1}}})
    assert result == "box=4;['a']"  # "4": pydantic's lax mode, as in any pydantic app
    with pytest.raises(ToolArgumentsError, match=r"at `\$\.models\.b\.x`"):
        await unpack.execute({"boxes": [], "models": {"b": {"x": []}}})


@tool
async def shout(word: Checked) -> str:
    """Shouts."""
    return word.word.upper()


async def test_a_models_own_validator_refuses_with_its_message_at_its_path():
    says = r"Value error, must be lowercase - at `\$\.word\.word`"
    with pytest.raises(ToolArgumentsError, match=says):
        await shout.execute({"word": {"word": "LOUD"}})


async def test_the_argument_limits_hold_before_pydantic_sees_the_arguments(loopback):
    """Arguments past the limits (here one string past ``MAX_ARGUMENT_CHARS``) are
    refused by the adapter: the tool is not run and pydantic validates nothing."""
    Checked.seen = 0
    huge = json.dumps({"word": {"word": "a" * (MAX_ARGUMENT_CHARS + 10)}})
    result = await run_calls(loopback, [shout], ("shout", huge))
    assert result.final_text == "done"
    ((text, _),) = ChatWire.results(loopback.requests[1].json())
    assert text.startswith('Tool "shout" was not run')
    assert Checked.seen == 0


async def test_an_edited_approval_is_checked_by_pydantic_too():
    """``Tool.check_arguments`` (an approval's edited arguments) runs the same check."""
    with pytest.raises(ToolArgumentsError, match=r"at `\$\.order\.items\[0\]\.qty`"):
        place.check_arguments({"order": {"items": [{"name": "a", "qty": -1}]}})
    place.check_arguments({"order": {"items": []}})


async def test_a_returned_model_and_a_pydantic_dataclass_are_json():
    """A model returned by a tool was an error result ("cannot be encoded")."""

    @tool
    async def make() -> dict[str, Any]:
        """Makes."""
        return {"order": Order(items=[Item(name="a", qty=1)]), "point": Point(1, 2)}

    result = await execute_tool_call(ToolRegistry([make]), ToolCall("c1", "make", {}))
    assert not result.is_error
    assert json.loads(result.content) == {
        "order": {"items": [{"name": "a", "qty": 1}], "note": None},
        "point": {"x": 1, "y": 2},
    }


class Loose(pydantic.BaseModel):
    """A model that holds a Struct: pydantic builds it, but cannot describe it."""

    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
    blob: Item2


def test_a_model_holding_a_type_pydantic_cannot_take_is_refused_saying_why():
    with pytest.raises(TypeError) as caught:

        @tool
        async def keep(loose: Loose) -> str:
            """Keeps."""
            return ""

    message = str(caught.value)
    assert message.startswith("@tool: ") and "parameter 'loose': type Loose" in message
    assert "not msgspec Structs" in message


class Booking(pydantic.BaseModel):
    """A strict model: pydantic coerces nothing in Python mode."""

    model_config = pydantic.ConfigDict(strict=True)
    id: uuid.UUID
    at: datetime.datetime
    seats: tuple[int, int]


@tool
async def book(booking: Booking, when: datetime.date) -> str:
    """Books."""
    assert type(booking.id) is uuid.UUID and type(booking.at) is datetime.datetime
    return f"{booking.id} {booking.at.isoformat()} {booking.seats} {when}"


async def test_regression_a_strict_pydantic_parameter_takes_the_json_its_schema_asks_for():
    """A tool parameter of a strict pydantic model (``ConfigDict(strict=True)``) was
    checked as Python objects, so it refused the very strings and arrays its schema
    asks for (a UUID, a datetime, a tuple): every call failed. It is read as JSON."""
    arguments = {
        "booking": {
            "id": "12345678-1234-5678-1234-567812345678",
            "at": "2026-12-07T10:00:00",
            "seats": [3, 4],
        },
        "when": "2026-12-08",
    }
    result = await execute_tool_call(ToolRegistry([book]), ToolCall("c1", "book", arguments))
    assert not result.is_error, result.content
    assert result.content == (
        "12345678-1234-5678-1234-567812345678 2026-12-07T10:00:00 (3, 4) 2026-12-08"
    )
    wrong = {**arguments, "booking": {**arguments["booking"], "seats": ["3", 4]}}
    refused = await execute_tool_call(ToolRegistry([book]), ToolCall("c2", "book", wrong))
    assert refused.is_error and "`$.booking.seats[0]`" in refused.content  # still strict
