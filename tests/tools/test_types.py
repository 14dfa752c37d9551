"""How a type travels as JSON (``tools/_types.py``, issue 35 item 3, DESIGN 12.3):
the standard library's types with msgspec alone (``pathlib`` paths included),
end to end through a model's JSON arguments; ``import trio_agent`` and plain
tools never import pydantic; a type neither library takes is refused when it is
declared, saying what to use; constraints only pydantic checks are checked."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import pathlib
import subprocess
import sys
import textwrap
import uuid
from typing import Annotated, Any

import annotated_types
import msgspec
import pytest
import trio
from loopback import Reply
from wire_builders import ChatWire

from trio_agent import (
    Agent,
    ToolArgumentsError,
    ToolCall,
    ToolContext,
    ToolRegistry,
    UserMessage,
    execute_tool_call,
    run_agent_loop,
    tool,
)
from trio_agent.output._spec import output_spec
from trio_agent.testing import ScriptedModel
from trio_agent.tools._types import error_depth, json_path, needs_pydantic


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


REF = uuid.UUID("12345678-1234-5678-1234-567812345678")


@tool
async def plan(
    where: pathlib.Path,
    when: datetime.datetime,
    day: datetime.date,
    at: datetime.time,
    takes: datetime.timedelta,
    cost: decimal.Decimal,
    ref: uuid.UUID,
    colour: Colour,
    level: Level,
    also: list[pathlib.PurePosixPath] = [],  # noqa: B006
) -> dict[str, str]:
    """Plans."""
    got = [where, when, day, at, takes, cost, ref, colour, level, *also]
    return {type(value).__name__: str(value) for value in got}


ARGUMENTS = {
    "where": "/srv/data/report.txt",
    "when": "2026-03-01T10:30:00Z",
    "day": "2026-03-01",
    "at": "10:30:00",
    "takes": "PT1H30M",
    "cost": "12.50",
    "ref": str(REF),
    "colour": "blue",
    "level": 2,
    "also": ["a/b"],
}
EXPECTED = {
    "PosixPath": "/srv/data/report.txt",
    "datetime": "2026-03-01 10:30:00+00:00",
    "date": "2026-03-01",
    "time": "10:30:00",
    "timedelta": "1:30:00",
    "Decimal": "12.50",
    "UUID": str(REF),
    "Colour": "Colour.BLUE",
    "Level": "2",
    "PurePosixPath": "a/b",
}


async def test_standard_types_are_tool_parameters_with_msgspec_alone_end_to_end(loopback):
    """A ``pathlib.Path`` parameter was refused at decoration with msgspec's
    "requires either specifying a `schema_hook`" (which @tool gives no way to act
    on). The arguments arrive as JSON text from the model, over the wire."""
    loopback.replies += [
        Reply(body=ChatWire.call("call_1", "plan", json.dumps(ARGUMENTS))),
        Reply(body=ChatWire.text("done")),
    ]
    run = run_agent_loop(
        messages=[UserMessage("u1", "plan it")],
        model=ChatWire.model(loopback),
        tools=ToolRegistry([plan]),
        max_steps=3,
    )
    with trio.fail_after(30):
        async with run:
            async for _ in run:
                pass
    assert run.result.final_text == "done"
    offered = loopback.requests[0].json()["tools"][0]["function"]["parameters"]
    assert offered["properties"]["where"] == {"type": "string", "format": "path"}
    assert offered["properties"]["also"]["items"] == {"type": "string", "format": "path"}
    assert offered["properties"]["ref"] == {"type": "string", "format": "uuid"}
    (result, is_error) = ChatWire.results(loopback.requests[1].json())[0]
    assert json.loads(result) == EXPECTED, result


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("where", 3, "Expected `str` (a path), got `int` - at `$.where`"),
        ("also", ["a", None], "Expected `str` (a path), got `null` - at `$.also[1]`"),
        ("takes", 3.5, "at `$.takes`"),
        ("cost", "lots", "at `$.cost`"),
        ("colour", "green", "at `$.colour`"),
        ("ref", "not-a-uuid", "at `$.ref`"),
    ],
)
async def test_a_standard_typed_argument_that_does_not_fit_goes_back_with_its_path(
    name, value, says
):
    call = ToolCall("c1", "plan", {**ARGUMENTS, name: value})
    result = await execute_tool_call(ToolRegistry([plan]), call)
    assert result.is_error and result.content.startswith('Invalid arguments for tool "plan"')
    assert says in result.content, result.content


@pytest.mark.parametrize(
    "kind", [pathlib.Path, Colour, datetime.date, decimal.Decimal, uuid.UUID, list[pathlib.Path]]
)
def test_standard_types_are_output_types(kind):
    """``output_type=Path`` was refused like a parameter; a wrapped answer decodes."""
    spec = output_spec(kind)
    assert spec is not None and spec.wrapped
    value = {
        pathlib.Path: "/a",
        Colour: "red",
        datetime.date: "2026-01-02",
        decimal.Decimal: "1.5",
        uuid.UUID: str(REF),
        list[pathlib.Path]: ["/a", "b"],
    }[kind]
    assert spec.from_arguments({"response": value}) == msgspec.convert(
        value, kind, dec_hook=lambda t, v: t(v)
    )
    assert spec.from_text(json.dumps({"response": value})) == spec.from_arguments(
        {"response": value}
    )


async def test_a_tool_returning_a_path_gives_its_string():
    """A returned ``Path`` was an error result ("cannot be encoded as JSON")."""

    @tool
    async def locate() -> dict[str, pathlib.Path]:
        """Locates."""
        return {"at": pathlib.Path("/srv/x")}

    result = await execute_tool_call(ToolRegistry([locate]), ToolCall("c1", "locate", {}))
    assert not result.is_error and result.content == '{"at":"/srv/x"}'


# ------------------------------------------------------------ refusals


class Opaque:
    """A plain class: neither msgspec nor pydantic can describe it."""

    def __init__(self, value: int) -> None:
        self.value = value


ADVICE = "use a msgspec Struct, a dataclass, a TypedDict or a pydantic model"
UNUSABLE = [Opaque, list[Opaque], dict[str, Opaque], Opaque | None]


@pytest.mark.parametrize("kind", UNUSABLE)
def test_a_parameter_type_neither_library_takes_is_refused_at_decoration(kind):
    """The refusal was msgspec's "Generating JSON schema for custom types requires
    either: specifying a `schema_hook`...", naming neither the parameter nor a fix."""

    async def pick(count: int, thing: Any) -> str:
        return ""

    pick.__annotations__["thing"] = kind
    with pytest.raises(TypeError) as caught:
        tool(pick)
    message = str(caught.value)
    assert message.startswith("@tool: ")
    assert "parameter 'thing'" in message and "cannot be described as JSON" in message
    assert "Opaque" in message and ADVICE in message
    assert "schema_hook" not in message


@pytest.mark.parametrize("kind", UNUSABLE)
def test_an_output_type_neither_library_takes_is_refused_when_declared(kind):
    with pytest.raises(TypeError) as caught:
        Agent(model=ScriptedModel([]), output_type=kind)
    message = str(caught.value)
    assert "output_type" in message and "Opaque" in message and ADVICE in message
    assert "schema_hook" not in message


@dataclasses.dataclass
class Holder:
    inner: Opaque


def test_a_dataclass_holding_an_unusable_type_is_refused_naming_the_parameter():
    with pytest.raises(TypeError, match=r"parameter 'holder': type Holder .*Opaque"):

        @tool
        async def keep(holder: Holder) -> str:
            """Keeps."""
            return ""


def test_without_pydantic_installed_the_refusal_says_how_to_install_it():
    program = textwrap.dedent(
        """
        import sys
        sys.modules["pydantic"] = None  # as if it were not installed
        from trio_agent import tool

        class Opaque:
            pass

        async def pick(thing: Opaque) -> str:
            return ""

        try:
            tool(pick)
        except TypeError as exc:
            print(exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert f"{ADVICE} (pip install pydantic)" in done.stdout, done.stdout


async def test_an_annotated_types_bound_is_checked_not_silently_ignored():
    """msgspec ignores ``annotated_types.Gt`` (pydantic's ``PositiveInt`` is one):
    a tool taking ``Annotated[int, Gt(0)]`` accepted -1."""

    @tool
    async def take(count: Annotated[int, annotated_types.Gt(0)]) -> int:
        """Takes."""
        return count

    assert take.parameters["properties"]["count"]["exclusiveMinimum"] == 0
    with pytest.raises(ToolArgumentsError, match=r"greater than 0 - at `\$\.count`"):
        await take.execute({"count": -1})
    assert await take.execute({"count": 2}) == 2


# ------------------------------------------------ pydantic is never imported


def test_import_trio_agent_and_plain_tools_never_import_pydantic():
    """pydantic is imported only for a type that is pydantic's: an application
    that does not use it pays nothing, in time or memory."""
    program = textwrap.dedent(
        """
        import datetime, json, pathlib, sys
        import msgspec, trio
        import trio_agent
        from trio_agent import ToolCall, ToolRegistry, execute_tool_call, tool
        from trio_agent.output import PartialOutput
        from trio_agent.output._spec import output_spec

        class Point(msgspec.Struct):
            x: int

        @tool
        async def move(point: Point, to: pathlib.Path, when: datetime.date) -> Point:
            "Moves."
            return point

        async def main():
            call = ToolCall("c1", "move", {"point": {"x": 1}, "to": "/a", "when": "2026-01-01"})
            result = await execute_tool_call(ToolRegistry([move]), call)
            assert result.content == '{"x":1}', result
            bad = ToolCall("c2", "move", {"point": {"x": "1"}, "to": "/a", "when": "x"})
            assert (await execute_tool_call(ToolRegistry([move]), bad)).is_error

        trio.run(main)
        output_spec(Point)
        output_spec(list[pathlib.Path], "native")
        PartialOutput(Point)
        trio_agent.Agent  # the lazily loaded public names
        print(sorted(m for m in sys.modules if m.startswith(("pydantic", "annotated_types"))))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


class Plain(msgspec.Struct):
    x: int


def test_needs_pydantic_walks_the_type_and_stops_at_msgspecs():
    from pydantic_types import Holds, Model

    assert needs_pydantic(Model) and needs_pydantic(list[Model]) and needs_pydantic(Holds)
    assert needs_pydantic(dict[str, Model | None])
    assert needs_pydantic(Annotated[int, Model.model_fields["x"]])
    assert not needs_pydantic(Plain) and not needs_pydantic(list[Plain])
    assert not needs_pydantic(Annotated[int, msgspec.Meta(gt=0)])
    assert not needs_pydantic(pathlib.Path) and not needs_pydantic(Any)


def test_json_paths_are_written_as_msgspec_writes_them():
    assert json_path(()) == "$"
    assert json_path(("order", "items", 0, "qty")) == "$.order.items[0].qty"
    assert json_path(("odd key", 2)) == '$["odd key"][2]'
    assert error_depth("Expected `int`, got `str` - at `$.a[0].b`") == 3
    assert error_depth("Object contains unknown field `k` - at `$.x`") == 1


def test_a_bare_ctx_parameter_is_refused_at_decoration_pointing_to_tool_context():
    """Issue 35 (a review after it): ``async def f(ctx, a: int)``, pydantic-ai's
    habit with the annotation left off, made ``ctx`` a required argument of any
    JSON: every call failed with "Object missing required field 'ctx'" and the turn
    completed. Refused when decorated, saying what to write; a tool taking two
    contexts is refused too."""

    async def bare(ctx, a: int) -> int:  # type: ignore[no-untyped-def]
        return a

    with pytest.raises(
        TypeError,
        match=r"parameter 'ctx' of .*bare has no annotation: annotate it `ctx: ToolContext`",
    ):
        tool(bare)

    async def twice(first: ToolContext, second: ToolContext, a: int) -> int:
        return a

    with pytest.raises(
        TypeError, match=r"takes two ToolContext parameters \('first' and 'second'\)"
    ):
        tool(twice)

    async def typed(context: str) -> str:  # a typed argument of that name stays one
        return context

    assert tool(typed).parameters["required"] == ["context"]
