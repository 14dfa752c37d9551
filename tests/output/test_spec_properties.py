"""Property (issue 18): for generated Struct types and values, a scripted model that
answers with the value (as JSON text, natively, or as the output tool's
arguments) gives a run whose ``output`` equals the value."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_agent import OUTPUT_TOOL_NAME, ToolCall, ToolRegistry, UserMessage, run_agent_loop
from trio_agent.testing import ScriptedModel, scripted_response

_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
_FLOAT = st.floats(allow_nan=False, allow_infinity=False, width=64).filter(math.isfinite)

# (annotation, strategy for its values)
_LEAVES: list[tuple[Any, st.SearchStrategy[Any]]] = [
    (int, st.integers(-(2**63), 2**63 - 1)),
    (str, _TEXT),
    (float, _FLOAT),
    (bool, st.booleans()),
    (list[int], st.lists(st.integers(-1000, 1000), max_size=5)),
    (str | None, st.none() | _TEXT),
    (dict[str, int], st.dictionaries(_TEXT, st.integers(0, 9), max_size=4)),
]


@st.composite
def struct_types_and_values(draw: st.DrawFn, depth: int = 0) -> tuple[type, Any]:
    """A Struct type of 1 to 5 fields (maybe one nested Struct) and a value of it."""
    count = draw(st.integers(1, 5))
    fields: list[tuple[str, Any]] = []
    values: dict[str, Any] = {}
    for index in range(count):
        name = f"f{index}"
        if depth == 0 and draw(st.booleans()) and index == count - 1:
            inner, value = draw(struct_types_and_values(depth + 1))
            fields.append((name, inner))
        else:
            annotation, strategy = draw(st.sampled_from(_LEAVES))
            fields.append((name, annotation))
            value = draw(strategy)
        values[name] = value
    kind = msgspec.defstruct(f"Generated{depth}_{count}", fields)
    return kind, kind(**values)


def _run(kind: type, script: list[Any], mode: str) -> Any:
    run = run_agent_loop(
        messages=[UserMessage("u1", "answer")],
        model=ScriptedModel(script),
        tools=ToolRegistry(),
        max_steps=2,
        output_type=kind,
        output_mode=mode,  # type: ignore[arg-type]
        output_retries=0,
    )
    return trio.run(run.wait)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(struct_types_and_values())
def test_a_native_answer_encoding_the_value_gives_the_value(generated):
    kind, value = generated
    text = msgspec.json.encode(value).decode()
    result = _run(kind, [scripted_response("r1", text)], "native")
    assert result.status == "completed", getattr(result, "detail", "")
    assert result.output == value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(struct_types_and_values())
def test_an_output_tool_call_with_the_value_gives_the_value(generated):
    kind, value = generated
    arguments = msgspec.json.decode(msgspec.json.encode(value))
    call = ToolCall("c1", OUTPUT_TOOL_NAME, arguments)
    result = _run(kind, [scripted_response("r1", [call])], "tool")
    assert result.status == "completed", getattr(result, "detail", "")
    assert result.output == value
