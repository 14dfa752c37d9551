"""``trio-agent run --output-schema FILE`` (issue 18 item 7): the schema goes to the
model as the output tool's parameters, the answer is checked against it (a
refusal goes back with its JSON path), and the validated JSON is printed last,
on its own line. A schema that cannot be used is a usage error (exit 2) before
any request. Run as a real subprocess against the loopback server."""

from __future__ import annotations

import json
import sys
from typing import Any

import msgspec
import pytest
from cli_runner import RecordLine, call_stream, cli, command, event_lines, text_stream
from loopback import Reply

from trio_agent import OUTPUT_TOOL_NAME
from trio_agent.cli._errors import UsageError
from trio_agent.cli._output_schema import OutputSchema, read_output_schema
from trio_agent.ledger import derive
from trio_agent.stores import parse_jsonl

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "who it is"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"$ref": "#/$defs/Tag"}},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
    "$defs": {"Tag": {"enum": ["a", "b"]}},
}


def schema_file(tmp_path, schema: Any = SCHEMA, name: str = "schema.json") -> str:
    path = tmp_path / name
    path.write_text(schema if isinstance(schema, str) else json.dumps(schema))
    return str(path)


def answer(arguments: dict[str, Any], call_id: str = "call_1") -> Reply:
    return Reply(body=call_stream(call_id, OUTPUT_TOOL_NAME, arguments))


def typed_run(loopback, tmp_path, *extra: str) -> list[str]:
    return command(
        loopback,
        tmp_path,
        "run",
        "--output-schema",
        schema_file(tmp_path),
        *extra,
        "who is it?",
    )


async def test_the_answer_is_printed_last_as_one_json_line(loopback, tmp_path):
    value = {"name": "Ann", "age": 3, "tags": ["a"]}
    loopback.replies.append(answer(value))
    done = await cli(typed_run(loopback, tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert json.loads(lines[-1]) == value
    assert lines[-1] == '{"name":"Ann","age":3,"tags":["a"]}'  # compact
    assert lines[-2].startswith("[turn 1 completed")


async def test_the_model_is_offered_the_schema_as_the_output_tools_parameters(loopback, tmp_path):
    loopback.replies.append(answer({"name": "Ann", "age": 3}))
    done = await cli(typed_run(loopback, tmp_path))
    assert done.returncode == 0, done.stderr
    tools = {t["function"]["name"]: t["function"] for t in loopback.requests[0].json()["tools"]}
    parameters = tools[OUTPUT_TOOL_NAME]["parameters"]
    assert parameters["properties"] == SCHEMA["properties"]
    assert parameters["required"] == ["name", "age"]
    assert parameters["additionalProperties"] is False and parameters["$defs"] == SCHEMA["$defs"]
    assert "read_file" in tools  # the workspace tools are still there


async def test_an_answer_that_does_not_fit_goes_back_with_its_path_then_the_fix_is_printed(
    loopback, tmp_path
):
    loopback.replies += [
        answer({"name": "Ann"}, "call_1"),
        answer({"name": "Ann", "age": 3, "tags": ["c"]}, "call_2"),
        answer({"name": "Ann", "age": 4}, "call_3"),
    ]
    done = await cli(typed_run(loopback, tmp_path))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.decode().splitlines()[-1]) == {"name": "Ann", "age": 4}
    errors = [
        m["content"]
        for request in loopback.requests[1:]
        for m in request.json()["messages"][-1:]
        if m["role"] == "tool"
    ]
    assert "Object missing required field `name`" not in errors[0]
    assert "Object missing required field `age` - at `$`" in errors[0]
    assert 'Expected one of "a", "b" - at `$.tags[0]`' in errors[1]


async def test_past_the_retries_the_run_fails_with_output_invalid_and_prints_no_json(
    loopback, tmp_path
):
    loopback.replies += [answer({"name": 1, "age": 3}, f"call_{i}") for i in range(3)]
    done = await cli(typed_run(loopback, tmp_path))
    assert done.returncode == 1
    out = done.stdout.decode()
    assert "failed: OUTPUT_INVALID" in out and "Expected `string`, got `integer`" in out
    assert out.splitlines()[-1].startswith("[turn 1 failed")


async def test_text_instead_of_the_answer_is_asked_again(loopback, tmp_path):
    loopback.replies += [
        Reply(body=text_stream("Ann, aged 3")),
        answer({"name": "Ann", "age": 3}, "call_2"),
    ]
    done = await cli(typed_run(loopback, tmp_path))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.decode().splitlines()[-1]) == {"name": "Ann", "age": 3}
    retry = loopback.requests[1].json()["messages"][-1]
    assert retry["role"] == "user" and OUTPUT_TOOL_NAME in retry["content"]


async def test_with_json_the_last_line_is_turn_finished_carrying_the_output(loopback, tmp_path):
    loopback.replies.append(answer({"name": "Ann", "age": 3}))
    done = await cli(typed_run(loopback, tmp_path, "--json"))
    assert done.returncode == 0, done.stderr
    events = event_lines(done.stdout)  # every line is a versioned event line
    assert events[-1].type == "turn.finished"
    assert events[-1].result.output == {"name": "Ann", "age": 3}


async def test_with_a_ledger_show_prints_the_output_and_the_record_is_there(loopback, tmp_path):
    ledger = tmp_path / "s1.jsonl"
    loopback.replies.append(answer({"name": "Zoë", "age": 3}))
    done = await cli(typed_run(loopback, tmp_path, "--ledger", str(ledger)))
    assert done.returncode == 0, done.stderr
    derived = derive(parse_jsonl("s1", ledger.read_bytes()).records)
    assert derived.outputs == {1: {"name": "Zoë", "age": 3}}

    shown = await cli([sys.executable, "-m", "trio_agent", "show", str(ledger)])
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout.decode()
    assert 'output (from request-001): {"name":"Zoë","age":3}' in text
    assert text.index("output (from") < text.index("== turn 1 ended: completed")

    records = await cli([sys.executable, "-m", "trio_agent", "show", "--json", str(ledger)])
    kinds = [
        msgspec.json.decode(line, type=RecordLine).record.kind
        for line in records.stdout.splitlines()
    ]
    assert kinds[-3:] == ["turn/output", "turn/end", "session/closed"]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{not json", "not JSON"),
        ([1, 2], "a JSON Schema object is needed, got array"),
        ({"type": "array", "items": {}}, '"type": "object", got "array"'),
        ({"properties": {}}, '"type": "object", got null'),
        ({"type": "object", "required": "name"}, "#: required must be an array of strings"),
        ({"type": "object", "properties": []}, "#: properties must be an object"),
        (
            {"type": "object", "properties": {"a": {"type": "text"}}},
            "#/properties/a: type must be one of",
        ),
        ({"type": "object", "properties": {"a": 3}}, "a schema is an object or a boolean"),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/B"}}}, "points at nothing"),
        (
            {"type": "object", "properties": {"a": {"$ref": "http://x/s.json"}}},
            "only local $ref",
        ),
        ({"type": "object", "anyOf": []}, "anyOf must be a non-empty array"),
        (
            {"type": "object", "$defs": {"A": {"allOf": [{"$ref": "#/$defs/A"}]}}},
            "loop back here without end",
        ),
    ],
)
async def test_a_schema_that_cannot_be_used_is_a_usage_error_before_any_request(
    loopback, tmp_path, content, says
):
    args = command(
        loopback,
        tmp_path,
        "run",
        "--output-schema",
        schema_file(tmp_path, content),
        "who is it?",
    )
    done = await cli(args)
    assert done.returncode == 2
    err = done.stderr.decode()
    assert "trio-agent run: error: --output-schema" in err and says in err, err
    assert loopback.requests == [] and done.stdout == b""


async def test_a_missing_schema_file_is_a_usage_error(loopback, tmp_path):
    missing = str(tmp_path / "nowhere.json")
    done = await cli(command(loopback, tmp_path, "run", "--output-schema", missing, "x"))
    assert done.returncode == 2
    assert f"--output-schema {missing}: cannot read it" in done.stderr.decode()


def checked(schema: dict[str, Any]) -> OutputSchema:
    return OutputSchema(schema)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"name": "A", "age": 3}, None),
        ({"name": "A", "age": 3.0}, None),  # 3.0 is an integer to JSON Schema
        ({"name": "A", "age": True}, "Expected `integer`, got `boolean` - at `$.age`"),
        ({"name": "A"}, "Object missing required field `age` - at `$`"),
        ({"name": "A", "age": 1, "x": 1}, "Object contains unknown field `x` - at `$`"),
        ({"name": "A", "age": 1, "tags": ["a", 2]}, 'Expected one of "a", "b" - at `$.tags[1]`'),
        ({"name": "A", "age": 1, "tags": "a"}, "Expected `array`, got `string` - at `$.tags`"),
    ],
)
def test_the_check_names_the_first_problem_with_its_json_path(value, problem):
    assert checked(SCHEMA).problem(value) == problem


def test_combinations_const_and_recursive_refs():
    schema = {
        "type": "object",
        "properties": {
            "kind": {"const": "tree"},
            "size": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "pick": {"oneOf": [{"type": "number"}, {"type": "integer"}]},
            "child": {"$ref": "#"},
            "odd key": {"type": "boolean"},
        },
    }
    check = checked(schema)
    assert check.problem({"kind": "tree", "size": None, "child": {"child": {}}}) is None
    assert check.problem({"kind": 1}) == 'Expected "tree" - at `$.kind`'
    assert check.problem({"size": "big"}) == (
        "The value fits none of the anyOf alternatives - at `$.size`"
    )
    assert check.problem({"pick": 2}) == (
        "The value fits 2 of the oneOf alternatives, not one - at `$.pick`"
    )
    assert check.problem({"child": {"child": {"kind": "x"}}}) == (
        'Expected "tree" - at `$.child.child.kind`'
    )
    assert check.problem({"odd key": 1}) == 'Expected `boolean`, got `integer` - at `$["odd key"]`'
    assert check.problem({"kind": True}) == 'Expected "tree" - at `$.kind`'


async def test_the_validator_refuses_with_output_error_and_the_type_carries_the_schema():
    from trio_agent import OutputError
    from trio_agent.output._spec import output_spec

    answer_schema = checked(SCHEMA)
    with pytest.raises(OutputError, match="missing required field `age`"):
        await answer_schema.validate({"name": "A"})
    await answer_schema.validate({"name": "A", "age": 2})
    spec = output_spec(answer_schema.output_type)
    assert spec is not None and not spec.wrapped
    assert spec.schema["properties"] == SCHEMA["properties"]
    assert spec.schema["required"] == SCHEMA["required"]


def test_read_output_schema_reads_a_good_file(tmp_path):
    assert read_output_schema(schema_file(tmp_path)).schema == SCHEMA
    with pytest.raises(UsageError, match="not JSON"):
        read_output_schema(schema_file(tmp_path, "\xff", "bad.json"))


def test_a_schema_file_nested_too_deeply_to_read_is_a_usage_error(tmp_path):
    """A schema file nested deeper than the JSON reader goes is a usage error naming
    the file (the bug: the reader's RecursionError escaped as a traceback, exit 1)."""
    deep = tmp_path / "deep.json"
    deep.write_text('{"type": "object", "properties": {"a": ' * 3000 + "{}" + "}}" * 3000)
    with pytest.raises(UsageError, match=r"^--output-schema .*deep\.json: not JSON: nested"):
        read_output_schema(str(deep))
