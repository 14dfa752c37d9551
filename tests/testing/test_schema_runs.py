"""Schema-driven runs: ``SchemaModel``, ``schema_arguments`` and ``tool_calls_for``.

The promise: an error result means the tool failed, not its arguments, so every
generated argument set must pass the tool's own msgspec validation. The special
string types, a float multipleOf, dict keys the schema says nothing of, and
degenerate schemas each once broke it; a property over signatures holds it."""

from __future__ import annotations

import datetime
import decimal
import enum
import inspect
import itertools
import math
import uuid
from typing import Annotated, Any, Literal, Optional

import msgspec
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_agent import Agent, ToolCall, ToolRegistry, UserMessage, tool
from trio_agent.model import ToolSpec
from trio_agent.testing import SchemaError, SchemaModel, schema_arguments, tool_calls_for
from trio_agent.tools import ToolArgumentsError, execute_tool_call


class Line(msgspec.Struct):
    sku: Annotated[str, msgspec.Meta(min_length=1, max_length=6)]
    quantity: Annotated[int, msgspec.Meta(ge=1, le=99)] = 1


class Order(msgspec.Struct):
    lines: list[Line]
    priority: Literal["low", "high"] = "low"


CALLS: list[tuple[str, dict[str, Any]]] = []


@tool
async def add(left: int, right: Annotated[int, msgspec.Meta(ge=0, le=10)]) -> dict[str, int]:
    """Add two numbers."""
    assert type(left) is int and 0 <= right <= 10
    CALLS.append(("add", {"left": left, "right": right}))
    return {"sum": left + right}


@tool
async def place(order: Order, note: Optional[str] = None) -> str:  # noqa: UP045 (as users write it)
    """Place an order."""
    assert isinstance(order, Order) and all(isinstance(line, Line) for line in order.lines)
    assert note is None or isinstance(note, str)
    CALLS.append(("place", {"order": order, "note": note}))
    return f"{len(order.lines)} lines"


@tool
def label(kind: Literal["a", "b", 3], text: Annotated[str, msgspec.Meta(max_length=4)]) -> str:
    """Label something (a plain def: it runs in a thread)."""
    assert kind in ("a", "b", 3) and len(text) <= 4
    CALLS.append(("label", {"kind": kind, "text": text}))
    return f"{kind}:{text}"


TOOLS = [add, place, label]


@pytest.fixture(autouse=True)
def _clear_calls():
    CALLS.clear()


async def test_schema_model_runs_every_tool_body_with_valid_arguments():
    model = SchemaModel(final_text="all done")
    agent = Agent(model=model, tools=ToolRegistry(TOOLS))
    result = await agent.prompt(UserMessage("u1", "go"))
    assert result.final_text == "all done" and result.end.reason == "completed"
    assert sorted(name for name, _ in CALLS) == ["add", "label", "place"]
    results = [m for m in result.messages if type(m).__name__ == "ToolResultMessage"]
    assert len(results) == 3 and not any(m.is_error for m in results)
    assert [c.name for c in model.calls] == ["add", "place", "label"]
    assert model.call_count == 2 and len(model.requests[1].messages) == 5


async def test_schema_model_calls_each_named_tool_calls_per_tool_times_per_turn():
    model = SchemaModel(["add", "label"], seed=3, calls_per_tool=4)
    agent = Agent(model=model, tools=ToolRegistry(TOOLS))
    await agent.prompt(UserMessage("u1", "go"))
    await agent.prompt(UserMessage("u2", "again"))
    assert sorted(name for name, _ in CALLS) == ["add"] * 8 + ["label"] * 8
    assert len({c.id for c in model.calls}) == 16  # unique across turns


async def test_schema_model_refuses_a_tool_the_request_does_not_offer():
    model = SchemaModel(["nope"])
    result = await Agent(model=model, tools=ToolRegistry(TOOLS)).prompt("go")
    assert result.end.reason != "completed" and CALLS == []


def test_tool_calls_are_deterministic_for_a_seed_and_vary_between_seeds():
    first = tool_calls_for(TOOLS, seed=11, calls_per_tool=5)
    assert first == tool_calls_for(ToolRegistry(TOOLS), seed=11, calls_per_tool=5)
    assert [c.id for c in first[:2]] == ["call-add-1", "call-add-2"]
    others = [tool_calls_for(TOOLS, seed=s, calls_per_tool=5) for s in range(3)]
    assert all(o != first for o in others)


async def test_two_schema_models_with_one_seed_make_the_same_run():
    runs = []
    for _ in range(2):
        model = SchemaModel(seed="s", calls_per_tool=2)
        await Agent(model=model, tools=ToolRegistry(TOOLS)).prompt("go")
        runs.append(model.calls)
    assert runs[0] == runs[1] and len(runs[0]) == 6


def test_a_required_pattern_is_a_schema_error_naming_the_tool():
    @tool
    async def coded(code: Annotated[str, msgspec.Meta(pattern="^[A-Z]{3}$")]) -> str:
        return code

    with pytest.raises(SchemaError, match=r"'coded'.*pattern"):
        tool_calls_for([coded])


@given(st.data())
@settings(max_examples=150, deadline=None)
def test_schema_arguments_pass_each_tools_own_validation(data):
    chosen = data.draw(st.sampled_from(TOOLS))
    arguments = data.draw(schema_arguments(chosen.parameters))
    CALLS.clear()
    result = trio.run(
        execute_tool_call, ToolRegistry(TOOLS), ToolCall("c1", chosen.name, arguments)
    )
    assert not result.is_error, result.content
    assert [name for name, _ in CALLS] == [chosen.name]


_names = itertools.count()


def _leaf_types() -> st.SearchStrategy[Any]:
    bounded = st.integers(-5, 5).flatmap(
        lambda low: st.integers(low, low + 20).map(
            lambda high: Annotated[int, msgspec.Meta(ge=low, le=high)]
        )
    )
    sized = st.integers(0, 4).map(
        lambda low: Annotated[str, msgspec.Meta(min_length=low, max_length=low + 3)]
    )
    literal = st.lists(st.sampled_from(["x", "y", 1, 2]), min_size=1, unique=True).map(
        lambda values: Literal[tuple(values)]  # type: ignore[misc]
    )
    positive = st.just(Annotated[float, msgspec.Meta(gt=0, lt=1)])
    return (
        st.sampled_from([int, float, str, bool, Any, bytes]) | bounded | sized | literal | positive
    )


def _struct_of(fields: list[Any]) -> Any:
    return msgspec.defstruct(f"S{next(_names)}", [(f"f{i}", t) for i, t in enumerate(fields)])


def _types() -> st.SearchStrategy[Any]:
    return st.recursive(
        _leaf_types(),
        lambda inner: st.one_of(
            inner.map(lambda t: list[t]),  # type: ignore[valid-type]
            inner.map(lambda t: Optional[t]),  # noqa: UP045
            inner.map(lambda t: dict[str, t]),  # type: ignore[valid-type]
            st.lists(inner, min_size=1, max_size=3).map(_struct_of),
        ),
        max_leaves=6,
    )


def _tool_taking(types: list[Any], ran: list[dict[str, Any]]) -> Any:
    """A ``@tool`` whose keyword parameters have ``types``; its body records its arguments."""

    async def body(**kwargs: Any) -> str:
        ran.append(kwargs)
        return "ran"

    parameters = [
        inspect.Parameter(f"p{i}", inspect.Parameter.KEYWORD_ONLY, annotation=t)
        for i, t in enumerate(types)
    ]
    body.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    body.__annotations__ = {p.name: p.annotation for p in parameters}
    return tool(name="generated")(body)


@given(st.lists(_types(), min_size=1, max_size=4), st.data(), st.integers(0, 2**32))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_arguments_for_any_generated_signature_reach_the_tool_body(types, data, seed):
    ran: list[dict[str, Any]] = []
    generated = _tool_taking(types, ran)
    calls = [ToolCall("c0", "generated", data.draw(schema_arguments(generated.parameters)))]
    calls += tool_calls_for([generated], seed=seed, calls_per_tool=2)

    async def run_all() -> list[Any]:
        return [await execute_tool_call(ToolRegistry([generated]), c) for c in calls]

    results = trio.run(run_all)
    assert [r.content for r in results if r.is_error] == []
    assert len(ran) == 3


SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def tool_taking(annotation: Any, name: str = "probe", seen: list[Any] | None = None) -> Any:
    """A ``@tool`` with one keyword parameter ``v`` of ``annotation``; its body records ``v``."""

    async def body(**kwargs: Any) -> str:
        if seen is not None:
            seen.append(kwargs["v"])
        return "ran"

    parameter = inspect.Parameter("v", inspect.Parameter.KEYWORD_ONLY, annotation=annotation)
    body.__signature__ = inspect.Signature([parameter])  # type: ignore[attr-defined]
    body.__annotations__ = {"v": annotation}
    return tool(name=name)(body)


def accepts(probe: Any, arguments: dict[str, Any]) -> bool:
    """Whether the tool's own validation takes ``arguments`` (the body then runs)."""
    try:
        trio.run(probe.execute, arguments)
    except ToolArgumentsError:
        return False
    return True


def arguments_struct(annotation: Any) -> Any:
    """The Struct ``@tool`` validates a one-parameter tool with (for JSON-level checks)."""
    return msgspec.defstruct("Arguments", [("v", annotation)], forbid_unknown_fields=True)


NAIVE = Annotated[datetime.datetime, msgspec.Meta(tz=False)]
AWARE = Annotated[datetime.datetime, msgspec.Meta(tz=True)]
NAIVE_TIME = Annotated[datetime.time, msgspec.Meta(tz=False)]
AWARE_TIME = Annotated[datetime.time, msgspec.Meta(tz=True)]
TWO_BYTES = Annotated[bytes, msgspec.Meta(min_length=2, max_length=2)]

# What msgspec (the installed version) writes for each: a datetime or time that may
# be naive is a plain string, so the schema alone cannot tell it from a str.
EMITTED = [
    (datetime.datetime, {"type": "string"}),
    (NAIVE, {"type": "string"}),
    (AWARE, {"type": "string", "format": "date-time"}),
    (datetime.time, {"type": "string"}),
    (NAIVE_TIME, {"type": "string", "format": "partial-time"}),
    (AWARE_TIME, {"type": "string", "format": "time"}),
    (datetime.date, {"type": "string", "format": "date"}),
    (uuid.UUID, {"type": "string", "format": "uuid"}),
    (decimal.Decimal, {"type": "string", "format": "decimal"}),
    (bytes, {"type": "string", "contentEncoding": "base64"}),
    (TWO_BYTES, {"type": "string", "contentEncoding": "base64", "minLength": 4, "maxLength": 4}),
    (datetime.timedelta, {"type": "string", "format": "duration"}),
]
FROM_SCHEMA = [t for t, schema in EMITTED if "format" in schema or t is bytes]
"""The types whose schema alone says what msgspec takes."""


@pytest.mark.parametrize(("annotation", "schema"), EMITTED, ids=str)
def test_msgspec_writes_these_schemas_for_the_special_string_types(annotation, schema):
    # the limit the docstrings state: if msgspec starts writing a format for naive
    # datetimes, the schema-only path could read it too
    """The schemas msgspec writes for the special string types: a datetime or time that may be naive
    is a plain string, so the schema alone cannot tell it from a str (the limit the docstrings
    state)."""
    assert tool_taking(annotation).parameters["properties"]["v"] == schema


@pytest.mark.parametrize("annotation", FROM_SCHEMA, ids=str)
@SETTINGS
@given(data=st.data())
def test_special_string_types_with_a_format_get_valid_values_from_the_schema_alone(
    annotation, data
):
    """Datetime, date, uuid, decimal, bytes and timedelta parameters once got plain strings their
    tool refused; from the schema alone, a type with a format gets values of that format."""
    probe = tool_taking(annotation)
    arguments = data.draw(schema_arguments(probe.parameters))
    assert accepts(probe, arguments), arguments


@pytest.mark.parametrize(("annotation", "_"), EMITTED, ids=str)
@SETTINGS
@given(data=st.data())
def test_every_special_string_type_gets_valid_values_given_the_tool(annotation, _, data):
    """Given the tool itself, even a special string type whose schema has no format (a plain
    datetime or time) gets values its validation takes."""
    seen: list[Any] = []
    probe = tool_taking(annotation, seen=seen)
    arguments = data.draw(schema_arguments(probe))
    assert accepts(probe, arguments), arguments
    assert len(seen) == 1


def test_a_datetime_that_may_be_naive_gets_both_naive_and_aware_values():
    """A datetime that may be naive gets both naive and aware values, each valid."""
    seen: list[Any] = []
    probe = tool_taking(datetime.datetime, seen=seen)
    for call in tool_calls_for([probe], seed="zones", calls_per_tool=40):
        assert accepts(probe, call.arguments), call.arguments
    zones = {value.tzinfo is None for value in seen}
    assert zones == {True, False}


@pytest.mark.parametrize(
    ("annotation", "naive"),
    [(NAIVE, True), (AWARE, False), (NAIVE_TIME, True), (AWARE_TIME, False)],
)
def test_a_datetime_or_time_with_tz_set_gets_only_values_of_that_kind(annotation, naive):
    """A datetime or time with ``tz`` set once got values of the other kind, which msgspec
    refuses."""
    seen: list[Any] = []
    probe = tool_taking(annotation, seen=seen)
    for call in tool_calls_for([probe], seed=5, calls_per_tool=30):
        assert accepts(probe, call.arguments), call.arguments
    assert {value.tzinfo is None for value in seen} == {naive}


def test_bytes_of_an_exact_length_get_exactly_that_many_given_the_tool():
    """Bytes of an exact length once got base64 text of that length instead of that many bytes."""
    seen: list[Any] = []
    probe = tool_taking(TWO_BYTES, seen=seen)
    for call in tool_calls_for([probe], seed=1, calls_per_tool=30):
        assert accepts(probe, call.arguments), call.arguments
    assert {len(value) for value in seen} == {2}


async def test_schema_model_given_the_tools_runs_a_plain_datetime_tool_body():
    """``SchemaModel`` once sent a plain datetime parameter strings the tool refused; given the
    tools, every call reaches the body."""
    when: list[datetime.datetime] = []

    @tool
    async def remind(at: datetime.datetime, every: datetime.time) -> str:
        """Remind at a time."""
        when.append(at)
        return "set"

    model = SchemaModel(ToolRegistry([remind]), calls_per_tool=3)
    result = await Agent(model=model, tools=ToolRegistry([remind])).prompt(UserMessage("u", "go"))
    errors = [m.content for m in result.messages if getattr(m, "is_error", False)]
    assert errors == [] and len(when) == 3
    assert result.end.reason == "completed"


def test_schema_model_refuses_two_different_tools_with_one_name():
    """``SchemaModel`` took two different tools of one name, one shadowing the other; it refuses
    them."""
    with pytest.raises(ValueError, match="two different tools"):
        SchemaModel([tool_taking(int), tool_taking(str)])


TENTHS = Annotated[float, msgspec.Meta(multiple_of=0.1, ge=0, le=1)]


def test_float_multiple_of_a_tenth_between_0_and_1_is_a_value_msgspec_accepts():
    """A float ``multipleOf: 0.1`` once gave values such as 0.7000000000000001, which msgspec's fmod
    check refuses."""
    probe = tool_taking(TENTHS)
    calls = tool_calls_for([probe], seed=0, calls_per_tool=50)
    values = {call.arguments["v"] for call in calls}
    assert all(accepts(probe, call.arguments) for call in calls), values
    assert 0.7000000000000001 not in values and len(values) > 1


@SETTINGS
@given(data=st.data())
def test_float_multiple_of_a_tenth_drawn_by_hypothesis_passes_the_tool(data):
    """The same float multipleOf, drawn by hypothesis: every value passes the tool."""
    probe = tool_taking(TENTHS)
    assert accepts(probe, data.draw(schema_arguments(probe.parameters)))


@settings(max_examples=150, deadline=None)
@given(
    step=st.sampled_from([0.1, 0.3, 0.7, 0.25, 2.5, 1e-3, 0.05, 1 / 3, 3.0]),
    low=st.integers(-50, 50),
    width=st.integers(0, 40),
    seed=st.integers(0, 2**16),
)
def test_a_float_multiple_of_is_accepted_or_a_schema_error_only_when_none_exists(
    step, low, width, seed
):
    """A float multipleOf in a range gives a value msgspec accepts, or a SchemaError only when no
    such value exists."""
    annotation = Annotated[
        float, msgspec.Meta(multiple_of=step, ge=low / 10, le=(low + width) / 10)
    ]
    probe = tool_taking(annotation)
    try:
        calls = tool_calls_for([probe], seed=seed)
    except SchemaError:
        first, last = math.ceil(low / 10 / step), math.floor((low + width) / 10 / step)
        exists = [k for k in range(first, last + 1) if accepts(probe, {"v": k * step})]
        assert exists == []
        return
    assert accepts(probe, calls[0].arguments), calls[0].arguments


def test_exclusive_bounds_hold_with_a_multiple_of():
    """Exclusive bounds hold when the value is rounded to a multiple."""
    probe = tool_taking(Annotated[float, msgspec.Meta(multiple_of=0.5, gt=0, lt=1)])
    assert {c.arguments["v"] for c in tool_calls_for([probe], calls_per_tool=10)} == {0.5}


@SETTINGS
@given(data=st.data())
def test_dict_int_str_keys_are_digit_strings_that_an_int_key_reads(data):
    """``dict[int, str]`` (no propertyNames in its schema) once got keys that are not digit strings,
    which the tool's int keys refuse."""
    probe = tool_taking(dict[int, str])
    assert "propertyNames" not in probe.parameters["properties"]["v"]  # msgspec writes none
    arguments = data.draw(schema_arguments(probe.parameters))
    assert all(key.isdigit() for key in arguments["v"])
    # as JSON (what a model sends) the keys are valid ints
    msgspec.json.decode(msgspec.json.encode(arguments), type=arguments_struct(dict[int, str]))
    msgspec.convert(arguments, arguments_struct(dict[int, str]), str_keys=True)
    assert accepts(probe, arguments), arguments


@pytest.mark.parametrize("key", [int, float, decimal.Decimal, str])
def test_dict_keys_unconstrained_by_the_schema_pass_the_tools_own_validation(key):
    # tools.py reads JSON object keys as the key type (msgspec.convert with str_keys=True)
    """Dict keys the schema says nothing of (int, float, Decimal) once got keys the tool's own
    validation (``str_keys=True``) refused."""
    seen: list[Any] = []
    probe = tool_taking(dict[key, str], seen=seen)  # type: ignore[valid-type]
    calls = tool_calls_for([probe.spec()], calls_per_tool=20)
    assert all(accepts(probe, call.arguments) for call in calls), calls
    assert any(seen) and all(type(k) is key for value in seen for k in value)


@pytest.mark.parametrize(
    "annotation",
    [dict[Annotated[int, msgspec.Meta(ge=1000)], str], dict[Literal[3, 7], str]],
    ids=["bounded-int", "int-literal"],
)
@SETTINGS
@given(data=st.data())
def test_int_keys_the_schema_does_not_describe_are_valid_given_the_tool(annotation, data):
    """Bounded-int and int-literal keys, which the schema does not describe, are valid given the
    tool."""
    probe = tool_taking(annotation)
    arguments = data.draw(schema_arguments(probe))
    assert accepts(probe, arguments), arguments


@pytest.mark.parametrize("key", [uuid.UUID, datetime.date, datetime.datetime, decimal.Decimal, str])
@SETTINGS
@given(data=st.data())
def test_dict_keys_of_a_string_like_type_are_valid_given_the_tool(key, data):
    """Dict keys of a string-like type (uuid, date, datetime, Decimal) are valid given the tool."""
    probe = tool_taking(dict[key, int])  # type: ignore[valid-type]
    arguments = data.draw(schema_arguments(probe))
    assert accepts(probe, arguments), arguments


@pytest.mark.parametrize(
    ("annotation", "valid"),
    [
        (dict[Literal["a", "b"], int], lambda key: key in ("a", "b")),
        (
            dict[Annotated[str, msgspec.Meta(min_length=2, max_length=3)], int],
            lambda key: 2 <= len(key) <= 3,
        ),
    ],
    ids=["literal", "lengths"],
)
@SETTINGS
@given(data=st.data())
def test_property_names_in_the_schema_are_honoured(annotation, valid, data):
    """``propertyNames`` in the schema (a literal, lengths) once was ignored."""
    probe = tool_taking(annotation)
    assert "propertyNames" in probe.parameters["properties"]["v"]
    arguments = data.draw(schema_arguments(probe.parameters))
    assert all(valid(key) for key in arguments["v"])
    assert accepts(probe, arguments), arguments


def spec_of(value_schema: Any) -> ToolSpec:
    schema = {"type": "object", "properties": {"v": value_schema}, "required": ["v"]}
    return ToolSpec("degenerate", "", schema)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "number", "multipleOf": 0}, "multipleOf must be > 0"),
        ({"type": "integer", "multipleOf": 0}, "multipleOf must be > 0"),
        ({"type": "number", "multipleOf": -0.5}, "multipleOf must be > 0"),
        ({"type": "number", "minimum": 5, "maximum": 1}, "no number between 5 and 1"),
        ({"type": "integer", "minimum": 1.2, "maximum": 1.8}, "no integer between"),
        ({"type": "number", "exclusiveMinimum": 1, "exclusiveMaximum": 1}, "no number"),
        ({"type": "number", "minimum": "0"}, "minimum must be a finite number"),
        ({"type": "string", "minLength": 5, "maxLength": 2}, "minLength 5 > maxLength 2"),
        ({"type": "string", "minLength": -1}, "non-negative integer"),
        ({"type": "array", "minItems": 3, "maxItems": 1}, "minItems 3 > maxItems 1"),
        ({"type": "object", "minProperties": 3, "maxProperties": 1}, "minProperties 3 >"),
        ({"enum": []}, "empty enum"),
        ({"anyOf": []}, "empty anyOf"),
        ({"type": []}, "empty type list"),
        ({"type": "array", "items": {"const": 1}, "uniqueItems": True, "minItems": 2}, "unique"),
        (
            {"type": "object", "properties": {}, "required": ["x"], "additionalProperties": False},
            "required 'x'",
        ),
        ({"type": "number", "multipleOf": 0.1, "minimum": 0.5, "maximum": 0.7}, "fmod"),
        ({"type": "integer", "minimum": 2**70}, "no integer"),
    ],
)
def test_a_degenerate_schema_is_a_schema_error_with_a_clear_message(schema, message):
    """A degenerate schema (multipleOf 0, an empty range, an empty enum, an unsatisfiable required,
    ...) once crashed or looped; it is a SchemaError saying why."""
    with pytest.raises(SchemaError, match=message):
        tool_calls_for([spec_of(schema)])


@SETTINGS
@given(data=st.data())
def test_a_degenerate_schema_is_a_schema_error_under_hypothesis_too(data):
    """Under hypothesis too, a degenerate schema is a SchemaError, not a crash."""
    with pytest.raises(SchemaError, match="multipleOf must be > 0"):
        data.draw(schema_arguments(spec_of({"type": "number", "multipleOf": 0})))


def test_min_properties_is_met_from_optional_properties_when_no_extra_is_allowed():
    """``minProperties`` with no extra property allowed once went unmet; it is met from the optional
    properties."""
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "additionalProperties": False,
        "minProperties": 2,
    }
    for call in tool_calls_for([spec_of(schema)], calls_per_tool=10):
        assert set(call.arguments["v"]) == {"a", "b"}


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Size(enum.IntEnum):
    S = 1
    L = 3


class Point(msgspec.Struct):
    x: Annotated[int, msgspec.Meta(ge=-5, le=5)]
    y: float = 0.0
    label: Optional[str] = None  # noqa: UP045 (as users write it)


class Cat(msgspec.Struct, tag=True):
    lives: Annotated[int, msgspec.Meta(ge=1, le=9)]


class Dog(msgspec.Struct, tag=True):
    weight: Annotated[float, msgspec.Meta(gt=0, le=80, multiple_of=0.5)]


RAN: list[str] = []


@tool
async def numbers(
    count: Annotated[int, msgspec.Meta(ge=0, lt=10)],
    ratio: Annotated[float, msgspec.Meta(gt=0, lt=1)],
    tenths: TENTHS,
    even: Annotated[int, msgspec.Meta(multiple_of=2, ge=-4, le=4)],
    flag: bool = False,
) -> str:
    """Numbers with bounds."""
    assert 0 <= count < 10 and 0 < ratio < 1 and 0 <= tenths <= 1 and even % 2 == 0
    RAN.append("numbers")
    return "ok"


@tool
async def texts(
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=5)],
    tags: Annotated[list[str], msgspec.Meta(max_length=3)],
    scores: dict[str, float],
    unique: frozenset[int],
    pair: tuple[int, str],
    note: Optional[str] = None,  # noqa: UP045
) -> str:
    """Strings and containers."""
    assert 1 <= len(name) <= 5 and len(tags) <= 3 and isinstance(pair, tuple)
    RAN.append("texts")
    return "ok"


@tool
async def choices(
    mode: Literal["fast", "slow", 3],
    colour: Colour,
    size: Size,
    point: Point,
    pets: list[Cat | Dog],
    anything: Any = None,
) -> str:
    """Literals, enums and Structs."""
    assert isinstance(colour, Colour) and isinstance(size, Size) and isinstance(point, Point)
    assert all(isinstance(pet, Cat | Dog) for pet in pets)
    RAN.append("choices")
    return "ok"


@tool
async def moments(
    at: AWARE,
    day: datetime.date,
    clock: NAIVE_TIME,
    wait: datetime.timedelta,
    ident: uuid.UUID,
    amount: decimal.Decimal,
    blob: bytes,
    later: Optional[AWARE] = None,  # noqa: UP045
) -> str:
    """The string-encoded types whose schema has a format."""
    assert at.tzinfo is not None and clock.tzinfo is None and isinstance(ident, uuid.UUID)
    RAN.append("moments")
    return "ok"


@tool
async def plain_moments(
    at: datetime.datetime,
    clock: datetime.time,
    naive: NAIVE,
    by_id: dict[uuid.UUID, int],
    key: TWO_BYTES,
) -> str:
    """The types whose schema is not enough: needs the tool itself."""
    assert naive.tzinfo is None and len(key) == 2
    RAN.append("plain_moments")
    return "ok"


SCHEMA_TOOLS = [numbers, texts, choices, moments]
ALL_TOOLS = [*SCHEMA_TOOLS, plain_moments]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_every_argument_set_drawn_from_a_tools_schema_passes_the_tool(data):
    chosen = data.draw(st.sampled_from(SCHEMA_TOOLS))
    arguments = data.draw(schema_arguments(chosen.parameters))
    RAN.clear()
    trio.run(chosen.execute, arguments)  # a ToolArgumentsError fails the test
    assert RAN == [chosen.name]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_every_argument_set_drawn_for_a_tool_itself_passes_the_tool(data):
    chosen = data.draw(st.sampled_from(ALL_TOOLS))
    arguments = data.draw(schema_arguments(chosen))
    RAN.clear()
    trio.run(chosen.execute, arguments)
    assert RAN == [chosen.name]


async def test_schema_model_given_the_registry_runs_every_body_without_an_argument_error():
    RAN.clear()
    registry = ToolRegistry(ALL_TOOLS)
    model = SchemaModel(registry, seed="review", calls_per_tool=5)
    result = await Agent(model=model, tools=registry).prompt(UserMessage("u", "go"))
    errors = [m.content for m in result.messages if getattr(m, "is_error", False)]
    assert errors == []
    assert sorted(RAN) == sorted(t.name for t in ALL_TOOLS for _ in range(5))


class _Forecast(msgspec.Struct):
    city: str
    days: Annotated[int, msgspec.Meta(ge=1, le=7)]
    sky: Literal["clear", "cloudy"]


async def test_a_native_typed_answer_is_generated_from_its_schema():
    """With ``output_mode="native"`` the model answered ``final_text`` ("done") where
    the JSON was due: every turn ended ``OUTPUT_INVALID`` after three tries, each
    calling every tool again, so an agent with a native typed answer could not
    be tested with ``SchemaModel`` (tool mode worked: ``final_result`` is a tool)."""

    @tool
    async def lookup(city: str) -> str:
        """Look a city up."""
        return city

    for seed in range(5):
        model = SchemaModel([lookup], seed=seed)
        agent = Agent(model=model, tools=[lookup], output_type=_Forecast, output_mode="native")
        result = await agent.prompt("Forecast?")
        assert result.end.reason == "completed", result.end
        assert type(result.output) is _Forecast and 1 <= result.output.days <= 7
        assert [call.name for call in model.calls] == ["lookup"]
    model = SchemaModel([lookup], seed=4)
    agent = Agent(model=model, tools=[lookup], output_type=_Forecast, output_mode="native")
    again = await agent.prompt("Forecast?")
    assert again.output == result.output  # the seed decides the answer
