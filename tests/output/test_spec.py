"""Typed final output (issue 18, DESIGN 11.4) with the scripted model: the answer
decoded as ``output_type``, errors with their JSON path back to the model, the
retries, text where a typed answer was due, big outputs, both modes."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Literal, TypedDict

import attrs
import msgspec
import pytest

from trio_agent import (
    MAX_ARGUMENT_CHARS,
    MAX_ARGUMENT_DEPTH,
    OUTPUT_INVALID,
    OUTPUT_TOOL_NAME,
    Agent,
    OutputError,
    ToolCall,
    ToolRegistry,
    UserMessage,
    run_agent_loop,
    tool,
    validate_transcript,
)
from trio_agent.limits import json_depth
from trio_agent.testing import (
    ScriptedModel,
    assert_run_invariants,
    explore_cancellation,
    scripted_response,
)


class Person(msgspec.Struct):
    name: str
    age: int


def answer(rid: str, cid: str, arguments: dict[str, Any]) -> Any:
    return scripted_response(rid, [ToolCall(cid, OUTPUT_TOOL_NAME, arguments)])


def loop(script: list[Any], output_type: Any = Person, max_steps: int = 8, **options: Any) -> Any:
    return run_agent_loop(
        messages=[UserMessage("u1", "who is it?")],
        model=ScriptedModel(script),
        tools=options.pop("tools", ToolRegistry()),
        max_steps=max_steps,
        output_type=output_type,
        **options,
    )


async def record(run: Any) -> tuple[list[Any], Any]:
    events = []
    async with run:
        async for event in run:
            events.append(event)
    assert_run_invariants(events, run.result)
    return events, run.result


async def test_a_valid_answer_is_the_output_and_the_transcript_stays_valid():
    events, result = await record(loop([answer("r1", "c1", {"name": "Ann", "age": 3})]))
    assert result.status == "completed" and result.stop_reason == "stop"
    assert result.output == Person("Ann", 3)
    assert result.messages[-1].content == "final result accepted"
    assert not result.messages[-1].is_error
    validate_transcript(result.messages)
    started = [e for e in events if e.type == "tool.started"]
    assert [e.call.name for e in started] == [OUTPUT_TOOL_NAME]


async def test_the_model_is_offered_the_output_tool_with_the_types_schema():
    model = ScriptedModel([answer("r1", "c1", {"name": "Ann", "age": 3})])
    run = run_agent_loop(
        messages=[UserMessage("u1", "x")],
        model=model,
        tools=ToolRegistry(),
        max_steps=2,
        output_type=Person,
    )
    await run.wait()
    (spec,) = model.requests[0].tools
    assert spec.name == OUTPUT_TOOL_NAME
    assert spec.parameters["properties"] == {
        "name": {"type": "string"},
        "age": {"type": "integer"},
    }
    assert spec.parameters["required"] == ["name", "age"]
    assert model.requests[0].output is None  # tool mode asks through the tool only


async def test_an_invalid_answer_goes_back_with_its_json_path_then_the_fix_is_taken():
    _, result = await record(
        loop(
            [
                answer("r1", "c1", {"name": "Ann", "age": "three"}),
                answer("r2", "c2", {"name": "Ann", "age": 3}),
            ]
        )
    )
    assert result.output == Person("Ann", 3) and result.steps == 2
    refused = result.messages[2]
    assert refused.is_error
    assert "Expected `int`, got `str` - at `$.age`" in refused.content
    assert "1 retry left" in refused.content


async def test_regression_the_last_tries_refusal_does_not_ask_for_another_call():
    """The refusal of the last try said "call final_result again ... (0 retries left)"
    though the turn ended on it; it says no retries are left and the turn ends."""
    bad = {"name": "Ann", "age": "three"}
    _, result = await record(
        loop([answer(f"r{i}", f"c{i}", bad) for i in range(1, 4)], output_retries=2)
    )
    assert result.status == "failed" and result.code == OUTPUT_INVALID
    refusals = [m.content for m in result.messages if m.role == "tool_result"]
    assert len(refusals) == 3
    assert "call final_result again" in refusals[0] and "(1 retry left)" in refusals[0]
    assert "call final_result again" in refusals[1] and "(0 retries left)" in refusals[1]
    assert "again" not in refusals[2] and "retries left" not in refusals[2]
    assert "no retries are left, the turn ends without an answer" in refusals[2]
    assert "Expected `int`, got `str` - at `$.age`" in refusals[2]


async def test_invalid_past_the_retries_fails_with_output_invalid_and_the_path():
    bad = {"name": "Ann"}
    _, result = await record(
        loop([answer(f"r{i}", f"c{i}", bad) for i in range(1, 4)], output_retries=2)
    )
    assert result.status == "failed" and result.code == OUTPUT_INVALID == "OUTPUT_INVALID"
    assert "missing required field `age`" in result.detail
    assert "3 attempts" in result.detail
    assert result.steps == 3
    validate_transcript(result.messages)


async def test_no_retries_fails_at_the_first_invalid_answer():
    _, result = await record(loop([answer("r1", "c1", {})], output_retries=0))
    assert result.status == "failed" and result.code == OUTPUT_INVALID and result.steps == 1


async def test_text_where_the_output_was_due_is_a_failed_attempt_with_a_message_saying_so():
    events, result = await record(
        loop([scripted_response("r1", "Ann, 3"), answer("r2", "c2", {"name": "Ann", "age": 3})])
    )
    assert result.output == Person("Ann", 3)
    asked = result.messages[2]
    assert type(asked) is UserMessage and asked.id == "output-retry-001"
    assert "calling the final_result tool" in asked.content
    accepted = [e.message.id for e in events if e.type == "message.accepted"]
    assert accepted == ["u1", "output-retry-001"]


async def test_text_every_time_fails_after_the_retries():
    script = [scripted_response(f"r{i}", "no") for i in range(1, 4)]
    _, result = await record(loop(script))
    assert result.status == "failed" and result.code == OUTPUT_INVALID
    assert "answered with text" in result.detail
    assert type(result.messages[-1]).__name__ == "AssistantMessage"


async def test_retries_are_steps_and_count_against_max_steps():
    script = [answer(f"r{i}", f"c{i}", {}) for i in range(1, 4)]
    _, result = await record(loop(script, max_steps=2, output_retries=5))
    assert result.status == "max_steps" and result.steps == 2


async def test_an_output_far_over_the_tool_argument_limits_is_taken():
    class Essay(msgspec.Struct):
        title: str
        body: str

    body = "é" * (MAX_ARGUMENT_CHARS * 3)
    _, result = await record(
        loop([answer("r1", "c1", {"title": "t", "body": body})], output_type=Essay)
    )
    assert result.output == Essay("t", body)
    validate_transcript(result.messages)  # the transcript can be continued as it is


async def test_real_tools_still_run_and_keep_their_limits_beside_the_output_tool():
    @tool
    async def lookup(name: str) -> int:
        """Age by name."""
        return 3

    script = [
        scripted_response("r1", [ToolCall("c1", "lookup", {"name": "Ann"})]),
        answer("r2", "c2", {"name": "Ann", "age": 3}),
    ]
    _, result = await record(loop(script, tools=ToolRegistry([lookup])))
    assert result.output == Person("Ann", 3)
    assert result.messages[2].content == "3"


def test_a_registered_tool_named_like_the_output_tool_is_refused():
    @tool(name=OUTPUT_TOOL_NAME)
    async def clash() -> str:
        """Takes the name."""
        return ""

    with pytest.raises(ValueError, match="final_result"):
        loop([], tools=ToolRegistry([clash]))
    # without an output type the name is free
    run_agent_loop(
        messages=[UserMessage("u1", "x")],
        model=ScriptedModel([]),
        tools=ToolRegistry([clash]),
        max_steps=1,
    )


async def test_an_agent_with_a_tool_named_like_the_output_tool_is_refused_at_once():
    """An ``Agent`` given ``output_type=`` and a tool taking the output tool's name
    was made, then every turn failed as it started; a turn's own ``output_type=``
    made a ``TurnRun`` that failed only when entered, its message's id kept."""

    @tool(name=OUTPUT_TOOL_NAME)
    async def clash() -> str:
        """Takes the name."""
        return ""

    with pytest.raises(ValueError, match="rename the tool"):
        Agent(model=ScriptedModel([]), tools=[clash], output_type=Person)
    agent = Agent(model=ScriptedModel([scripted_response("r1", "plain")]), tools=[clash])
    with pytest.raises(ValueError, match="rename the tool"):
        agent.turn(UserMessage("u1", "hi"), output_type=Person)
    result = await agent.prompt(UserMessage("u1", "hi"))  # its id was let go
    assert result.final_text == "plain" and agent.turns == 1


async def test_a_second_output_call_in_the_same_answer_changes_nothing():
    script = [
        scripted_response(
            "r1",
            [
                ToolCall("c1", OUTPUT_TOOL_NAME, {"name": "Ann", "age": 3}),
                ToolCall("c2", OUTPUT_TOOL_NAME, {"name": "Bob", "age": 4}),
            ],
        )
    ]
    _, result = await record(loop(script))
    assert result.output == Person("Ann", 3)
    assert "changes nothing" in result.messages[-1].content


@dataclasses.dataclass
class Point:
    x: int
    y: int


@attrs.define
class Box:
    width: float
    label: str = ""


class Movie(TypedDict):
    title: str
    year: int


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@pytest.mark.parametrize(
    ("output_type", "arguments", "expected"),
    [
        (Point, {"x": 1, "y": 2}, Point(1, 2)),
        (Box, {"width": 2.5}, Box(2.5)),
        (Movie, {"title": "Up", "year": 2009}, {"title": "Up", "year": 2009}),
        (list[int], {"response": [1, 2, 3]}, [1, 2, 3]),
        (int, {"response": 42}, 42),
        (Literal["yes", "no"], {"response": "no"}, "no"),
        (Colour, {"response": "blue"}, Colour.BLUE),
        (Point | None, {"response": None}, None),
        (dict[str, int], {"a": 1}, {"a": 1}),
        (dict[int, str], {"1": "one", "20": "twenty"}, {1: "one", 20: "twenty"}),
    ],
)
async def test_any_type_msgspec_decodes_is_an_output(output_type, arguments, expected):
    _, result = await record(loop([answer("r1", "c1", arguments)], output_type=output_type))
    assert result.status == "completed"
    assert result.output == expected


async def test_a_non_object_type_is_asked_for_wrapped_in_response():
    model = ScriptedModel([answer("r1", "c1", {"response": [1]})])
    await run_agent_loop(
        messages=[UserMessage("u1", "x")],
        model=model,
        tools=ToolRegistry(),
        max_steps=1,
        output_type=list[int],
    ).wait()
    schema = model.requests[0].tools[0].parameters
    assert schema["required"] == ["response"]
    assert schema["properties"]["response"] == {"type": "array", "items": {"type": "integer"}}


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"output_type": object()}, TypeError),
        ({"output_type": Person, "output_mode": "json"}, ValueError),
        ({"output_type": Person, "output_retries": -1}, ValueError),
        ({"output_type": Person, "output_retries": True}, ValueError),
        ({"output_type": Person, "output_validator": "no"}, TypeError),
    ],
)
def test_bad_output_options_are_refused_before_the_run(options, error):
    with pytest.raises(error, match="output"):
        run_agent_loop(
            messages=[UserMessage("u1", "x")],
            model=ScriptedModel([]),
            tools=ToolRegistry(),
            max_steps=1,
            **options,
        )


async def test_a_validator_refusal_goes_back_to_the_model_and_its_return_replaces_the_value():
    async def adult(person: Person) -> Person:
        if person.age < 18:
            raise OutputError(f"{person.name} is {person.age}: give an adult")
        return Person(person.name.upper(), person.age)

    script = [
        answer("r1", "c1", {"name": "Ann", "age": 3}),
        answer("r2", "c2", {"name": "Bo", "age": 40}),
    ]
    _, result = await record(loop(script, output_validator=adult))
    assert "Ann is 3: give an adult" in result.messages[2].content
    assert result.output == Person("BO", 40)


@pytest.mark.parametrize("mode", ["tool", "native"])
async def test_a_validator_that_breaks_ends_the_run_with_hook_error(mode):
    async def broken(person: Person) -> None:
        raise KeyError("oops")

    script = (
        [answer("r1", "c1", {"name": "Ann", "age": 3})]
        if mode == "tool"
        else [scripted_response("r1", '{"name": "Ann", "age": 3}')]
    )
    _, result = await record(loop(script, output_validator=broken, output_mode=mode))
    assert result.status == "failed" and result.code == "HOOK_ERROR"
    assert "output_validator raised KeyError" in result.detail
    validate_transcript(result.messages)


@pytest.mark.parametrize("mode", ["tool", "native"])
async def test_a_plain_function_validator_is_called_not_awaited(mode):
    """A validator written as a plain ``def`` (as pydantic-ai takes, and as hooks
    are) ended every turn ``HOOK_ERROR``: "object NoneType can't be used in
    'await' expression", after the model had answered."""
    seen = []

    def adult(person: Person) -> Person | None:
        seen.append(person)
        if person.age < 18:
            raise OutputError("give an adult")
        return Person(person.name.upper(), person.age) if person.name == "bo" else None

    script = (
        [
            answer("r1", "c1", {"name": "Ann", "age": 3}),
            answer("r2", "c2", {"name": "bo", "age": 4_0}),
        ]
        if mode == "tool"
        else [
            scripted_response("r1", '{"name": "Ann", "age": 3}'),
            scripted_response("r2", '{"name": "bo", "age": 40}'),
        ]
    )
    _, result = await record(loop(script, output_validator=adult, output_mode=mode))
    assert result.status == "completed", result
    assert result.output == Person("BO", 40)
    assert len(seen) == 2


async def test_a_plain_function_validator_checks_str_output():
    def short(text: str) -> None:
        if len(text) > 5:
            raise OutputError("at most 5 characters")

    script = [scripted_response("r1", "far too long"), scripted_response("r2", "ok")]
    _, result = await record(loop(script, output_type=str, output_validator=short))
    assert result.status == "completed" and result.output == "ok"
    assert "at most 5 characters" in result.messages[-2].content


async def test_native_mode_reads_the_final_text_as_json_and_sends_the_schema():
    model = ScriptedModel([scripted_response("r1", '{"name": "Ann", "age": 3}')])
    run = run_agent_loop(
        messages=[UserMessage("u1", "x")],
        model=model,
        tools=ToolRegistry(),
        max_steps=2,
        output_type=Person,
        output_mode="native",
    )
    _, result = await record(run)
    assert result.output == Person("Ann", 3)
    request = model.requests[0]
    assert request.tools == ()
    assert request.output is not None
    assert not request.output.strict  # Person allows unknown fields: strict mode would 400
    assert request.output.schema["required"] == ["name", "age"]


async def test_native_mode_sends_back_not_json_and_wrong_shape_with_the_reason():
    script = [
        scripted_response("r1", "Ann is 3"),
        scripted_response("r2", '{"name": "Ann", "age": "3"}'),
        scripted_response("r3", '{"name": "Ann", "age": 3}'),
    ]
    _, result = await record(loop(script, output_mode="native"))
    assert result.output == Person("Ann", 3)
    first, second = (m for m in result.messages if type(m) is UserMessage and m.id != "u1")
    assert "not JSON" in first.content
    assert "Expected `int`, got `str` - at `$.age`" in second.content


async def test_native_mode_takes_an_answer_of_max_step_text():
    value = {"response": ["x" * 100] * 600}
    text = msgspec.json.encode(value).decode()
    assert len(text) > 60_000
    _, result = await record(
        loop([scripted_response("r1", text)], output_type=list[str], output_mode="native")
    )
    assert result.output == value["response"]


class Holder(msgspec.Struct):
    data: Any


@pytest.mark.parametrize("depth", [32, 1_200, 30_000])
async def test_a_native_answer_nested_too_deep_goes_back_to_the_model_not_a_recursion_error(depth):
    """An ``Any`` output answered natively with arrays nested ~1,200 deep (2.4 KB)
    raised a raw ``RecursionError`` from ``agent.prompt()`` and ``run.wait()``
    (issue 32): the answer is held to the output tool's nesting limit in both modes,
    and one past it goes back to the model with the reason."""
    deep = '{"data": ' + "[" * depth + "]" * depth + "}"
    script = [scripted_response("r1", deep), scripted_response("r2", '{"data": [[1]]}')]
    _, result = await record(loop(script, output_type=Holder, output_mode="native"))
    assert result.status == "completed"
    assert result.output == Holder([[1]])
    (retry,) = (m for m in result.messages if type(m) is UserMessage and m.id != "u1")
    assert f"nests deeper than {MAX_ARGUMENT_DEPTH} containers" in retry.content
    agent = Agent(model=ScriptedModel(script), output_type=Holder, output_mode="native")
    turn = await agent.prompt("who is it?")
    assert turn.output == Holder([[1]])


async def test_a_native_answer_at_the_nesting_limit_is_taken():
    """The limit's edge: 32 containers, the root included, decode as they are."""
    text = '{"data": ' + "[" * 31 + "]" * 31 + "}"
    _, result = await record(
        loop([scripted_response("r1", text)], output_type=Holder, output_mode="native")
    )
    assert result.status == "completed"
    assert json_depth(text, 0) == MAX_ARGUMENT_DEPTH


def test_json_depth_skips_strings_and_counts_the_root():
    """Brackets inside strings (escaped quotes too) are not containers."""
    cases = [
        ({"a": '\\"[['}, 1),
        (["]", {"x": "}{"}], 2),
        ({'k"[': [[[]]]}, 4),
        ([], 1),
        ("[", 0),
        ([[["\\\\"]]], 3),
    ]
    for value, depth in cases:
        assert json_depth(msgspec.json.encode(value).decode(), 0) == depth, value
    # few brackets: their count, no scan (an upper bound)
    assert json_depth('"[[["') == 3


async def test_str_output_is_the_final_text_and_a_validator_may_refuse_it():
    async def short(text: str) -> None:
        if len(text) > 5:
            raise OutputError("at most 5 characters")

    script = [scripted_response("r1", "too long"), scripted_response("r2", "ok")]
    _, result = await record(loop(script, output_type=str, output_validator=short))
    assert result.output == "ok" and result.final_text == "ok"
    assert "at most 5 characters" in result.messages[2].content


async def test_without_output_type_the_output_is_none_and_nothing_changes():
    model = ScriptedModel([scripted_response("r1", "hi")])
    result = await run_agent_loop(
        messages=[UserMessage("u1", "x")], model=model, tools=ToolRegistry(), max_steps=1
    ).wait()
    assert result.output is None and model.requests[0].output is None
    assert model.requests[0].tools == ()


async def test_a_refusal_ends_the_run_as_refused_with_no_output():
    script = [scripted_response("r1", "I can't", stop_reason="refusal")]
    _, result = await record(loop(script))
    assert result.status == "completed" and result.stop_reason == "refusal"
    assert result.output is None


async def test_cancelled_at_every_checkpoint_of_an_output_retry_the_transcript_stays_valid(
    autojump_clock,
):
    def scenario() -> Any:
        return loop(
            [
                scripted_response("r1", "text first"),
                answer("r2", "c2", {"name": "Ann", "age": "x"}),
                answer("r3", "c3", {"name": "Ann", "age": 3}),
            ]
        )

    def check(events: Any, result: Any) -> None:
        assert_run_invariants(events, result)
        if result.status == "completed":
            assert result.output == Person("Ann", 3)

    report = await explore_cancellation(scenario, check)
    assert report.checkpoints > 10 and report.outcomes[-1] == "completed"
    assert set(report.outcomes) == {"cancelled", "completed"}


async def test_an_agent_gives_typed_turns_and_a_turn_may_ask_for_another_type():
    model = ScriptedModel(
        [
            answer("r1", "c1", {"name": "Ann", "age": 3}),
            scripted_response("r2", "plain words"),
            answer("r3", "c3", {"response": [1, 2]}),
        ]
    )
    agent = Agent(model=model, output_type=Person)
    first = await agent.prompt("who?")
    assert first.output == Person("Ann", 3) and first.end.reason == "completed"
    second = await agent.prompt("say it", output_type=str)
    assert second.output == "plain words"
    third = await agent.prompt("numbers", output_type=list[int])
    assert third.output == [1, 2]
    validate_transcript(agent.messages)


async def test_an_agent_turn_fails_with_output_invalid_past_the_retries():
    agent = Agent(
        model=ScriptedModel([scripted_response(f"r{i}", "no") for i in range(1, 3)]),
        output_type=Person,
        output_retries=1,
    )
    result = await agent.prompt("who?")
    assert result.end.reason == "failed" and result.end.code == OUTPUT_INVALID
    assert result.output is None


def test_an_input_message_may_not_take_the_retry_id_prefix():
    agent = Agent(model=ScriptedModel([]))
    with pytest.raises(ValueError, match="output-retry-"):
        agent.turn(UserMessage("output-retry-001", "hi"))


async def test_a_retry_id_the_caller_used_is_not_taken_again():
    run = run_agent_loop(
        messages=[UserMessage("output-retry-001", "who?")],
        model=ScriptedModel(
            [scripted_response("r1", "no"), answer("r2", "c2", {"name": "A", "age": 1})]
        ),
        tools=ToolRegistry(),
        max_steps=3,
        output_type=Person,
    )
    _, result = await record(run)
    assert result.output == Person("A", 1)
    assert [m.id for m in result.messages if type(m) is UserMessage] == [
        "output-retry-001",
        "output-retry-001-",
    ]


async def test_msgspec_encodes_a_result_with_an_output():
    _, result = await record(loop([answer("r1", "c1", {"name": "Ann", "age": 3})]))
    assert b'"output":{"name":"Ann","age":3}' in msgspec.json.encode(result)


async def test_a_tool_running_a_typed_turn_of_another_agent_leaves_the_outer_output_alone():
    class Age(msgspec.Struct):
        years: int

    inner = Agent(model=ScriptedModel([answer("i1", "ic1", {"years": 3})]), output_type=Age)

    @tool
    async def ask_inner(name: str) -> int:
        """Asks another agent, in this very task (prompt runs inline)."""
        result = await inner.prompt(f"age of {name}?")
        return result.output.years

    script = [
        scripted_response("r1", [ToolCall("c1", "ask_inner", {"name": "Ann"})]),
        answer("r2", "c2", {"name": "Ann", "age": 3}),
    ]
    _, result = await record(loop(script, tools=ToolRegistry([ask_inner])))
    assert result.messages[2].content == "3"
    assert result.output == Person("Ann", 3)


def test_native_mode_asks_for_strict_only_when_the_schema_allows_it():
    from trio_agent.output._spec import output_spec

    class Loose(msgspec.Struct):
        name: str
        age: int = 0

    class Strict(msgspec.Struct, forbid_unknown_fields=True):
        name: str
        inner: Person

    class Sealed(msgspec.Struct, forbid_unknown_fields=True):
        name: str
        age: int

    loose, nested, sealed = (output_spec(kind, "native") for kind in (Loose, Strict, Sealed))
    assert loose is not None and loose.format is not None and not loose.format.strict
    assert nested is not None and nested.format is not None
    assert not nested.format.strict  # Person inside allows unknown fields
    assert sealed is not None and sealed.format is not None and sealed.format.strict
    wrapped = output_spec(list[Sealed], "native")
    assert wrapped is not None and wrapped.format is not None and wrapped.format.strict


class Node(msgspec.Struct):
    name: str
    children: list[Node] = []


def _refs(value: Any) -> set[str]:
    if isinstance(value, dict):
        found = {value["$ref"]} if isinstance(value.get("$ref"), str) else set()
        return found.union(*(_refs(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_refs(v) for v in value))
    return set()


@pytest.mark.parametrize("mode", ["tool", "native"])
async def test_a_recursive_output_type_has_a_self_contained_schema(mode):
    from trio_agent.output._spec import output_spec

    spec = output_spec(Node, mode)
    assert spec is not None
    schema = spec.schema
    assert schema["type"] == "object" and "name" in schema["properties"]
    for ref in _refs(schema):  # every reference points at a definition it carries
        assert ref.removeprefix("#/$defs/") in schema["$defs"], ref
    tree = {"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}]}
    script = (
        [answer("r1", "c1", tree)]
        if mode == "tool"
        else [scripted_response("r1", msgspec.json.encode(tree).decode())]
    )
    _, result = await record(loop(script, output_type=Node, output_mode=mode))
    assert result.output == Node("a", [Node("b", [Node("c")])])


def test_a_plain_struct_schema_keeps_no_definition_of_itself():
    from trio_agent.output._spec import output_spec

    spec = output_spec(Person)
    assert spec is not None and "$defs" not in spec.schema


async def test_an_agents_output_retries_are_not_cut_short_by_repeated_failures():
    # max_repeated_failures (3) counts a tool's identical failures; refused answers
    # count against output_retries instead
    bad = [answer(f"r{i}", f"c{i}", {"name": "Ann", "age": "x"}) for i in range(1, 5)]
    agent = Agent(
        model=ScriptedModel([*bad, answer("r5", "c5", {"name": "Ann", "age": 3})]),
        output_type=Person,
        output_retries=5,
    )
    result = await agent.prompt("who?")
    assert result.end.reason == "completed" and result.output == Person("Ann", 3)
    assert result.steps == 5


async def test_steering_queued_during_a_typed_step_goes_with_the_request_to_answer_again():
    model = ScriptedModel(
        [scripted_response("r1", "plain text"), answer("r2", "c2", {"name": "Ann", "age": 3})]
    )
    agent = Agent(model=model, output_type=Person)
    async with agent.turn("who?") as run:
        async for event in run:
            if event.type == "model.chunk" and event.request_id == "request-001":
                agent.steer("Ann is three")
    assert run.result is not None and run.result.output == Person("Ann", 3)
    second = model.requests[1].messages
    assert [m.content for m in second if type(m) is UserMessage][-1] == "Ann is three"
    assert any(type(m) is UserMessage and m.id.startswith("output-retry-") for m in second)


@pytest.mark.parametrize("where", ["loop", "agent"])
async def test_tool_choice_may_force_the_output_tool(where):
    from trio_agent import ModelSettings

    forced = ModelSettings(tool_choice=OUTPUT_TOOL_NAME)
    model = ScriptedModel([answer("r1", "c1", {"name": "Ann", "age": 3})])
    if where == "loop":
        result = await run_agent_loop(
            messages=[UserMessage("u1", "x")],
            model=model,
            tools=ToolRegistry(),
            max_steps=1,
            output_type=Person,
            settings=forced,
        ).wait()
    else:
        result = await Agent(model=model, output_type=Person, settings=forced).prompt("x")
    assert result.output == Person("Ann", 3)
    assert model.requests[0].settings is not None
    assert model.requests[0].settings.tool_choice == OUTPUT_TOOL_NAME
    with pytest.raises(ValueError, match="not one of the tools"):  # no output tool: refused
        run_agent_loop(
            messages=[UserMessage("u1", "x")],
            model=model,
            tools=ToolRegistry(),
            max_steps=1,
            settings=forced,
        )


async def test_a_turns_own_output_type_does_not_take_the_agents_validator():
    async def adult(person: Person) -> None:
        if person.age < 18:
            raise OutputError("an adult, please")

    async def short(text: str) -> None:
        if len(text) > 5:
            raise OutputError("five characters at most")

    agent = Agent(
        model=ScriptedModel(
            [
                scripted_response("r1", "plain words"),
                scripted_response("r2", "a long answer"),
                scripted_response("r3", "ok"),
            ]
        ),
        output_type=Person,
        output_validator=adult,
    )
    plain = await agent.prompt("say it", output_type=str)
    assert plain.end.reason == "completed" and plain.output == "plain words"
    checked = await agent.prompt("again", output_type=str, output_validator=short)
    assert checked.output == "ok" and checked.steps == 2


async def test_a_turns_own_validator_checks_the_agents_output_type():
    """A turn given ``output_validator=`` without ``output_type=`` dropped it without
    a word: the agent's answer was taken unchecked (or its own validator ran)."""
    seen: list[Person] = []

    async def adult(person: Person) -> None:
        seen.append(person)
        if person.age < 18:
            raise OutputError("an adult, please")

    agent = Agent(
        model=ScriptedModel(
            [
                answer("r1", "c1", {"name": "Kim", "age": 9}),
                answer("r2", "c2", {"name": "Kim", "age": 39}),
            ]
        ),
        output_type=Person,
    )
    result = await agent.prompt("who?", output_validator=adult)
    assert result.output == Person("Kim", 39) and result.steps == 2
    assert [person.age for person in seen] == [9, 39]


async def test_a_validator_for_a_turn_with_no_output_type_is_refused():
    """``output_validator=`` on a turn of an agent with no output type was dropped
    without a word (nothing to check, nothing said); its message's id stays free."""

    async def never(value: object) -> None:
        raise OutputError("no")

    agent = Agent(model=ScriptedModel([scripted_response("r1", "plain")]))
    with pytest.raises(ValueError, match="output_validator"):
        agent.turn(UserMessage("u1", "hi"), output_validator=never)
    with pytest.raises(ValueError, match="output_validator"):
        await agent.prompt("hi", output_validator=never)
    result = await agent.prompt(UserMessage("u1", "hi"))
    assert result.final_text == "plain" and agent.turns == 1


async def test_a_hook_blocking_the_answers_call_is_named_when_the_turn_fails():
    """Review of issue 38: ``before_tool_call`` sees the output tool's call too; an
    allow-list hook that blocked it failed the turn with OUTPUT_INVALID saying
    "the answer's arguments were refused", though they were never looked at.
    The failure names the hook and its reason."""
    from trio_agent import block

    async def only_add(call):
        return None if call.name == "add" else block(f"{call.name} is not allowed")

    good = {"name": "Ann", "age": 3}
    agent = Agent(
        model=ScriptedModel([answer("r1", "c1", good), answer("r2", "c2", good)]),
        output_type=Person,
        output_retries=1,
        before_tool_call=only_add,
    )
    result = await agent.prompt("who is it?")
    assert result.end.code == OUTPUT_INVALID, result.end
    assert result.end.detail == (
        "before_tool_call blocked the answer's call: "
        f"{OUTPUT_TOOL_NAME} is not allowed (2 attempts)"
    )
    validate_transcript(result.messages)
