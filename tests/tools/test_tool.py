"""``@tool``, ``Tool``, ``ToolRegistry`` and ``execute_tool_call`` (DESIGN 6), and the
regressions a review of the core loop found in them, each named after the behaviour
it pins."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import pytest
import trio
from helpers import add, call, start
from waiting import cancelled_once_blocked

from trio_agent import (
    Cancelled,
    FatalToolError,
    Tool,
    ToolArgumentsError,
    ToolError,
    ToolRegistry,
    ToolResultMessage,
    ToolSpec,
    execute_tool_call,
    tool,
)
from trio_agent.testing import scripted_response


def test_tool_takes_name_docstring_and_signature():
    @tool
    async def search(query: str, limit: int = 10, exact: bool = False) -> list[str]:
        """Search the index.

        Returns matching titles.
        """
        return []

    assert search.name == "search"
    assert search.description == "Search the index.\n\nReturns matching titles."
    assert search.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "limit": {"type": "integer", "default": 10},
            "exact": {"type": "boolean", "default": False},
        },
        "required": ["query"],
        "additionalProperties": False,
    }


def test_tool_overrides_name_and_description():
    @tool(name="sum_two", description="Adds.")
    async def whatever(left: int, right: int) -> int:
        return left + right

    assert (whatever.name, whatever.description) == ("sum_two", "Adds.")


def test_any_and_object_parameters_accept_any_json():
    @tool
    async def store(key: str, value: Any, extra: object = None) -> str:
        return "ok"

    assert store.parameters["properties"]["value"] == {}
    assert store.parameters["properties"]["extra"] == {"default": None}


class Point(msgspec.Struct):
    x: int
    y: int


def test_nested_types_and_constraints_reach_the_schema():
    @tool
    async def draw(points: list[Point], width: Annotated[int, msgspec.Meta(ge=1)]) -> str:
        return "drawn"

    params = draw.parameters
    assert params["properties"]["points"] == {
        "type": "array",
        "items": {"$ref": "#/$defs/Point"},
    }
    assert params["properties"]["width"] == {"type": "integer", "minimum": 1}
    assert params["$defs"]["Point"]["required"] == ["x", "y"]


def test_tool_rejects_what_is_not_a_function_returning_a_result():
    async def agen(x: int):
        yield x

    def gen(x: int):
        yield x

    class Klass:
        pass

    for bad in (agen, gen, Klass, 42):
        with pytest.raises(TypeError, match="@tool needs a function"):
            tool(bad)
    with pytest.raises(TypeError, match="cannot read the signature"):
        tool(name="smallest")(min)  # a builtin without a signature
    with pytest.raises(TypeError, match="cannot take"):
        tool(print)
    with pytest.raises(ValueError, match="tool name must be"):
        tool(lambda x: x)  # "<lambda>" is not a tool name
    assert tool(name="ident")(lambda x: x).name == "ident"


def test_unresolvable_annotations_raise_a_clear_error():
    class Local(msgspec.Struct):
        x: int

    async def uses_local(value: Local) -> str:  # a string annotation: __future__ is on
        return "ok"

    with pytest.raises(TypeError, match="cannot resolve the annotations of"):
        tool(uses_local)


def test_tool_rejects_var_args_and_positional_only():
    async def varargs(*items: int) -> int:
        return 0

    async def posonly(x: int, /) -> int:
        return x

    with pytest.raises(TypeError, match=r"\*args"):
        tool(varargs)
    with pytest.raises(TypeError, match="positional-only"):
        tool(posonly)


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "dots.not.ok", 3])
def test_tool_names_must_suit_providers(name):
    async def execute(arguments):
        return ""

    with pytest.raises(ValueError, match="tool name"):
        Tool(name=name, description="", parameters={}, execute=execute)


def test_registry_register_get_specs():
    registry = ToolRegistry()
    registry.register(add)
    assert registry.get("add") is add
    assert registry.get("missing") is None
    assert "add" in registry and len(registry) == 1 and list(registry) == [add]
    assert registry.specs() == (ToolSpec("add", "Add two integers.", add.parameters),)


def test_registry_says_whether_a_tool_has_an_approval_rule_after_every_register():
    # Asked once per batch instead of per call: the answer must follow registers,
    # on the registry and on a copy, each on its own.
    @tool(requires_approval=lambda arguments: arguments.get("n") == 1)
    async def ruled(n: int) -> int:
        """Needs approval for n == 1."""
        return n

    registry = ToolRegistry([add])
    assert registry.has_approval_rules() is False
    copy = registry.copy()
    registry.register(ruled)
    assert registry.has_approval_rules() is True
    assert copy.has_approval_rules() is False
    copy.register(tool(requires_approval=True)(ruled.function))
    assert copy.has_approval_rules() is True
    assert ToolRegistry([add]).copy().has_approval_rules() is False


def test_registry_refuses_duplicates_and_non_tools():
    registry = ToolRegistry([add])
    with pytest.raises(ValueError, match="already registered"):
        registry.register(add)
    with pytest.raises(TypeError, match="Tool"):
        registry.register(lambda: None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="already registered"):
        ToolRegistry([add, add])


async def test_str_return_is_the_content_and_other_returns_are_compact_json():
    @tool
    async def text() -> str:
        return "plain text"

    @tool
    async def structured() -> dict:
        return {"sum": 42, "items": [1, 2]}

    @tool
    async def nothing() -> None:
        return None

    registry = ToolRegistry([text, structured, nothing])
    assert await execute_tool_call(registry, call("text", "c1")) == ToolResultMessage(
        "tool-result-c1", "c1", "text", "plain text", False
    )
    result = await execute_tool_call(registry, call("structured", "c2"))
    assert result.content == '{"sum":42,"items":[1,2]}' and not result.is_error
    assert (await execute_tool_call(registry, call("nothing", "c3"))).content == "null"


async def test_validation_errors_carry_the_json_path():
    result = await execute_tool_call(
        ToolRegistry([add]), call("add", "c1", {"left": "20", "right": 22})
    )
    assert result.is_error
    assert result.content == (
        'Invalid arguments for tool "add": Expected `int`, got `str` - at `$.left`'
    )
    missing = await execute_tool_call(ToolRegistry([add]), call("add", "c2", {"left": 1}))
    assert missing.is_error and "missing required field `right`" in missing.content
    extra = await execute_tool_call(
        ToolRegistry([add]), call("add", "c3", {"left": 1, "right": 2, "third": 3})
    )
    assert extra.is_error and "unknown field `third`" in extra.content


async def test_recoverable_errors_name_the_tool_and_the_exception():
    @tool
    async def refuses(path: str) -> str:
        raise ToolError(f"no such file: {path}")

    @tool
    async def crashes() -> str:
        raise ZeroDivisionError("division by zero")

    registry = ToolRegistry([refuses, crashes])
    refused = await execute_tool_call(registry, call("refuses", "c1", {"path": "/x"}))
    assert refused.is_error and refused.content == 'Tool "refuses" failed: no such file: /x'
    crashed = await execute_tool_call(registry, call("crashes", "c2"))
    assert crashed.is_error
    assert crashed.content == 'Tool "crashes" raised ZeroDivisionError: division by zero'
    unknown = await execute_tool_call(registry, call("nope", "c3"))
    assert unknown.is_error
    assert unknown.content == 'Unknown tool "nope". Available tools: refuses, crashes.'
    assert unknown.tool_name == "nope" and unknown.id == "tool-result-c3"


async def test_unencodable_return_is_an_error_result():
    @tool
    async def weird() -> object:
        return object()

    result = await execute_tool_call(ToolRegistry([weird]), call("weird", "c1"))
    assert result.is_error and 'Tool "weird" returned a object' in result.content


async def test_lone_surrogates_in_results_are_replaced():
    @tool
    async def bad_text() -> str:
        return "ok \udcff end"

    result = await execute_tool_call(ToolRegistry([bad_text]), call("bad_text", "c1"))
    assert result.content == "ok \ufffd end"
    msgspec.json.encode(result)


async def test_fatal_errors_and_base_exceptions_propagate():
    @tool
    async def fatal() -> str:
        raise FatalToolError("disk on fire")

    @tool
    async def interrupt() -> str:
        raise KeyboardInterrupt

    registry = ToolRegistry([fatal, interrupt])
    with pytest.raises(FatalToolError, match="disk on fire"):
        await execute_tool_call(registry, call("fatal", "c1"))
    with pytest.raises(KeyboardInterrupt):
        await execute_tool_call(registry, call("interrupt", "c2"))


async def test_cancellation_is_never_turned_into_a_result():
    @tool
    async def slow() -> str:
        await trio.sleep_forever()
        return "never"

    @tool
    async def converts_cancel() -> str:
        try:
            await trio.sleep_forever()
        finally:
            raise RuntimeError("cleanup failed")

    registry = ToolRegistry([slow, converts_cancel])
    for name in ("slow", "converts_cancel"):
        async with cancelled_once_blocked() as scope:  # the tool runs, and waits
            await execute_tool_call(registry, call(name, "c1"))
            pytest.fail("a result was made for a cancelled call")
        assert scope.cancelled_caught


async def test_nested_validation_errors_carry_the_full_path():
    @tool
    async def draw(points: list[Point]) -> str:
        return "drawn"

    result = await execute_tool_call(
        ToolRegistry([draw]), call("draw", "c1", {"points": [{"x": 1, "y": 2}, {"x": 1, "y": "2"}]})
    )
    assert result.content.endswith("Expected `int`, got `str` - at `$.points[1].y`")


def test_a_tool_is_fixed_when_built_and_its_spec_is_built_once():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}

    async def execute(arguments):
        return "ok"

    built = Tool(name="t", description="d", parameters=schema, execute=execute)
    schema["properties"]["injected"] = {"type": "string"}
    assert built.parameters == {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert built.spec() is built.spec()  # shared by every request and run
    built.parameters["properties"]["later"] = {}
    assert "later" not in built.spec().parameters["properties"]
    assert built == Tool(name="t", description="d", parameters=built.parameters, execute=execute)


def test_registry_copies_share_nothing_a_register_can_change():
    @tool
    async def one() -> str:
        """One."""
        return "1"

    @tool
    async def two() -> str:
        """Two."""
        return "2"

    original = ToolRegistry([add])
    specs = original.specs()
    assert original.specs() is specs  # built once until the next register
    twin = original.copy()
    original.register(one)
    assert twin.names() == ("add",) and twin.specs() == specs
    assert original.names() == ("add", "one") and [s.name for s in original.specs()] == [
        "add",
        "one",
    ]
    twin.register(two)
    assert original.names() == ("add", "one") and twin.names() == ("add", "two")
    third = twin.copy()
    third.register(one)
    assert twin.names() == ("add", "two") and third.names() == ("add", "two", "one")


def test_copies_of_a_registry_share_its_specs_until_one_registers():
    """An agent copies its registry: every copy shares the original's specs, made
    once (48 bytes and a tuple's making less an agent), and a register on a copy
    gives that copy its own."""

    @tool
    async def one() -> str:
        """One."""
        return "1"

    original = ToolRegistry([add])
    copies = [original.copy() for _ in range(3)]
    assert all(copy.specs() is original.specs() for copy in copies)
    copies[0].register(one)
    assert [spec.name for spec in copies[0].specs()] == ["add", "one"]
    assert copies[1].specs() is original.specs() and [s.name for s in original.specs()] == ["add"]


def test_regression_a_tool_can_be_rebuilt_from_a_spec_it_handed_out():
    # Review finding: the spec's read-only schema was refused as "not a dict".
    spec = add.spec()
    twin = Tool(
        name="plus", description=spec.description, parameters=spec.parameters, execute=add.execute
    )
    assert twin.parameters == add.parameters and type(twin.parameters) is dict
    assert twin.spec().parameters == spec.parameters


def test_regression_a_shared_schema_cannot_be_reinitialised_in_place():
    import pytest

    parameters = add.spec().parameters
    with pytest.raises(TypeError, match="read-only"):
        parameters.__init__(injected=True)
    with pytest.raises(TypeError, match="read-only"):
        parameters["required"].__init__(["zzz"])
    assert "injected" not in parameters and parameters["required"] == ["left", "right"]


async def test_fatal_error_raised_on_cancellation_is_cancellation_not_tool_fatal():
    """A FatalToolError raised while the tool was being cancelled turned the cancellation into
    TOOL_FATAL; the run is cancelled."""

    @tool
    async def converts() -> str:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            raise FatalToolError("cleanup failed") from None
        return "never"

    run, _ = start(
        [scripted_response("r1", [call("converts", "c1")])], tools=ToolRegistry([converts])
    )
    async with run:
        async for event in run:
            if event.type == "tool.started":
                run.cancel()
    assert isinstance(run.result, Cancelled)


async def test_fatal_error_inside_a_tool_nursery_fails_the_run_with_its_message():
    """A FatalToolError raised in a tool's nursery came out in an exception group and was taken for
    a plain error; it fails the run with its message."""

    @tool
    async def grouped() -> str:
        async def boom() -> None:
            raise FatalToolError("quota exhausted")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(boom)
        return "never"

    run, model = start(
        [scripted_response("r1", [call("grouped", "c1")]), scripted_response("r2", "no")],
        tools=ToolRegistry([grouped]),
    )
    result = await run.wait()
    assert result.code == "TOOL_FATAL" and "quota exhausted" in result.detail
    assert model.call_count == 1


async def test_plain_error_groups_from_a_tool_name_their_leaves():
    """A plain exception group from a tool told the model only its own message; the result names its
    leaves."""

    @tool
    async def several() -> str:
        raise ExceptionGroup("batch", [ValueError("bad row"), KeyError("id")])

    run, _ = start(
        [scripted_response("r1", [call("several", "c1")]), scripted_response("r2", "ok")],
        tools=ToolRegistry([several]),
    )
    result = await run.wait()
    assert result.messages[2].content == (
        "Tool \"several\" raised ExceptionGroup (ValueError: bad row; KeyError: 'id')"
    )


def test_tool_with_unencodable_parameters_is_refused_at_construction():
    """A ``Tool`` whose parameters cannot be JSON-encoded was made, and failed only when its spec
    was sent; it is refused when made."""

    async def execute(arguments: dict[str, Any]) -> str:
        return ""

    with pytest.raises(TypeError, match="JSON-encodable"):
        Tool(name="t", description="", parameters={"x": object()}, execute=execute)


def test_tool_with_a_sync_execute_is_refused_at_construction():
    """A ``Tool`` with a sync ``execute`` was made, and failed when called; it is refused when
    made."""
    with pytest.raises(TypeError, match="async function"):
        Tool(name="t", description="", parameters={}, execute=lambda arguments: "sync")


async def test_tool_execute_may_be_an_async_callable_object():
    """An ``execute`` that is an object with an async ``__call__`` was refused as not an async
    function; it is taken."""

    class Execute:
        async def __call__(self, arguments: dict[str, Any]) -> str:
            return "called"

    registry = ToolRegistry([Tool(name="obj", description="", parameters={}, execute=Execute())])
    run, _ = start(
        [scripted_response("r1", [call("obj", "c1")]), scripted_response("r2", "ok")],
        tools=registry,
    )
    assert (await run.wait()).messages[2].content == "called"


async def test_a_dict_with_int_keys_is_filled_from_json_object_keys():
    """A ``dict[int, ...]`` parameter refused its JSON object's keys, which are strings: "1" must
    read as the int key 1, as msgspec's JSON decoder would (before: "Expected `int`, got `str` - at
    `key` in `$.scores`")."""

    @tool
    async def total(scores: dict[int, float]) -> float:
        """Adds the scores by player number."""
        assert all(type(key) is int for key in scores)
        return sum(scores.values())

    assert await total.execute({"scores": {"1": 2.5, "7": 1.0}}) == 3.5
    with pytest.raises(ToolArgumentsError, match="key"):
        await total.execute({"scores": {"one": 2.5}})


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"description": 5}, "tool description must be a str, got 5"),
        ({"exclusive": 1}, "tool exclusive must be a bool, got 1"),
    ],
)
def test_a_field_of_the_wrong_type_is_named_in_one_line(options, said):
    """Review of issue 38: ``@tool(description=5)`` (and ``as_tool``) raised attrs'
    own error, a tuple of its internals; it says which field and what it must be."""

    with pytest.raises(TypeError) as caught:

        @tool(**options)
        async def f(x: int) -> int:
            """Return x."""
            return x

    assert str(caught.value) == said
    with pytest.raises(TypeError, match=r"^tool progress must be a bool, got 'yes'$"):
        Tool("t", "d", {"type": "object"}, f_execute, progress="yes")  # type: ignore[arg-type]


async def f_execute(arguments: dict) -> str:
    return ""
