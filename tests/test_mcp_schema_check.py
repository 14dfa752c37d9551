"""The arguments check of MCP tools (issue 20): the quick test for common schemas
never passes what the full JSON Schema validator refuses, and refused arguments
get the validator's message with the JSON path."""

from __future__ import annotations

import jsonschema
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("mcp")

from trio_agent.mcp._tools import check_call, validator
from trio_agent.tools import ToolArgumentsError

TYPES = ["string", "integer", "number", "boolean", "null", "object", "array"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
names = st.sampled_from(["a", "b", "c", "d"])


@st.composite
def schemas(draw):
    properties = draw(
        st.dictionaries(
            names,
            st.fixed_dictionaries({"type": st.sampled_from(TYPES)}, optional={"title": st.text()}),
        )
    )
    schema = {"type": "object", "properties": properties}
    if draw(st.booleans()):
        schema["required"] = draw(st.lists(names, unique=True))
    return schema


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(schemas(), st.dictionaries(names, json_values))
def test_the_quick_check_agrees_with_json_schema(schema, arguments):
    check = validator(schema)
    assert check is not None
    valid = jsonschema.Draft202012Validator(schema).is_valid(arguments)
    pending = check(arguments)  # None: passed by the quick test
    try:
        if pending is not None:
            trio.run(lambda: pending)
    except ToolArgumentsError:
        assert not valid
    else:
        assert valid


async def test_refused_arguments_name_the_json_path():
    check = validator(
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        }
    )
    with pytest.raises(ToolArgumentsError, match=r"'x' is not of type 'integer' - at `\$.a`"):
        await check_call({"a": "x", "b": 1}, check)
    with pytest.raises(ToolArgumentsError, match="'b' is a required property"):
        await check_call({"a": 1}, check)
    with pytest.raises(ToolArgumentsError, match=r"True is not of type 'integer'"):
        await check_call({"a": True, "b": 1}, check)
    assert await check_call({"a": 1.0, "b": 2}, check) == {"a": 1.0, "b": 2}  # 1.0 is an integer
