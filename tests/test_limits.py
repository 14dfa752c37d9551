"""check_arguments: plain JSON within the limits, returned as a private copy (DESIGN 4)."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from trio_agent import (
    MAX_AGENT_STEPS,
    MAX_ARGUMENT_CHARS,
    MAX_ARGUMENT_DEPTH,
    MAX_ARGUMENT_ENTRIES,
    MAX_ARGUMENT_VALUES,
    MAX_ASSISTANT_BLOCKS,
    MAX_INITIAL_MESSAGES,
    MAX_STEP_CHUNKS,
    MAX_STEP_TEXT,
    ArgumentsError,
    check_arguments,
)


def test_contract_values():
    assert (MAX_AGENT_STEPS, MAX_INITIAL_MESSAGES, MAX_STEP_CHUNKS, MAX_STEP_TEXT) == (
        64,
        4096,
        1024,
        65536,
    )
    assert (MAX_ASSISTANT_BLOCKS, MAX_ARGUMENT_DEPTH, MAX_ARGUMENT_VALUES) == (1024, 32, 257)
    assert (MAX_ARGUMENT_ENTRIES, MAX_ARGUMENT_CHARS) == (256, 4096)


def test_returns_an_equal_deep_copy():
    original = {
        "a": [1, {"b": None}],
        "c": "x",
        "d": 1.5,
        "e": True,
        "big": 2**64 - 1,
        "small": -(2**63),
    }
    copy = check_arguments(original)
    assert copy == original
    assert copy is not original and copy["a"] is not original["a"]
    assert copy["a"][1] is not original["a"][1]


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"a": {"b": [1, math.nan]}}, "$.a.b[1]"),
        ({"key with space": b"x"}, '$["key with space"]'),
        ({"a": [[{"b": ()}]]}, "$.a[0][0].b"),
    ],
)
def test_errors_carry_a_json_path(value, path):
    with pytest.raises(ArgumentsError) as info:
        check_arguments(value)
    assert info.value.path == path
    assert str(info.value).endswith(f"- at `{path}`")


@pytest.mark.parametrize(
    "value", [2**64, -(2**63) - 1, 2**20000], ids=["2**64", "-2**63-1", "huge"]
)
def test_integers_outside_64_bits_are_refused(value):
    with pytest.raises(ArgumentsError, match="64-bit range"):
        check_arguments({"n": value})


def test_subclasses_of_json_types_are_not_plain_json():
    class MyDict(dict):
        pass

    class MyStr(str):
        pass

    with pytest.raises(ArgumentsError, match="MyDict"):
        check_arguments(MyDict())
    with pytest.raises(ArgumentsError, match="MyStr"):
        check_arguments({"x": MyStr("y")})


def test_keys_count_toward_the_character_limit():
    check_arguments({"k" * 2048: "v" * 2048})
    with pytest.raises(ArgumentsError, match="4096 characters"):
        check_arguments({"k" * 2049: "v" * 2048})


def test_empty_containers_count_for_depth_but_not_entries():
    deep: dict = {}
    for _ in range(MAX_ARGUMENT_DEPTH - 1):
        deep = {"x": deep}
    check_arguments(deep)
    with pytest.raises(ArgumentsError, match="deeper"):
        check_arguments({"x": deep})


def test_deep_hostile_input_is_refused_without_recursion_error():
    hostile: list = []
    for _ in range(5000):
        hostile = [hostile]
    with pytest.raises(ArgumentsError, match="deeper"):
        check_arguments({"x": hostile})


json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=8)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=5)
    ),
    max_leaves=30,
)


def measure(value, depth=1):
    """(max depth, entries, chars) of a JSON value by the contract's definitions."""
    if isinstance(value, dict):
        parts = [measure(v, depth + 1) for v in value.values()]
        return (
            max([depth, *(p[0] for p in parts)]),
            len(value) + sum(p[1] for p in parts),
            sum(len(k) for k in value) + sum(p[2] for p in parts),
        )
    if isinstance(value, list):
        parts = [measure(v, depth + 1) for v in value]
        return (
            max([depth, *(p[0] for p in parts)]),
            len(value) + sum(p[1] for p in parts),
            sum(p[2] for p in parts),
        )
    return (depth - 1, 0, len(value) if isinstance(value, str) else 0)


@given(st.dictionaries(st.text(max_size=5), json_value, max_size=6))
def test_accepts_exactly_what_is_within_the_limits(arguments):
    depth, entries, chars = measure(arguments)
    within = (
        depth <= MAX_ARGUMENT_DEPTH
        and entries <= MAX_ARGUMENT_ENTRIES
        and chars <= MAX_ARGUMENT_CHARS
        and all(c < "\ud800" or c > "\udfff" for c in _strings(arguments))
    )
    if within:
        assert check_arguments(arguments) == arguments
    else:
        with pytest.raises(ArgumentsError):
            check_arguments(arguments)


def _strings(value):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, str):
        yield from value


class _Text(str):
    pass


flat_leaf = (
    json_leaf
    | st.text(alphabet="ab", min_size=2040, max_size=2060)  # two are past the character limit
    | st.sampled_from([math.nan, math.inf, -math.inf, 2**64, -(2**63) - 1, _Text("x"), (1,)])
)


@given(
    st.dictionaries(
        st.text(st.characters(exclude_categories=("Cs",)), max_size=5), flat_leaf, max_size=8
    )
)
@example({"a": "x" * 2048, "b": "y" * 2048})
@example({"a": "x" * 2047, "b": "y" * 2047})
def test_a_flat_object_is_checked_as_the_walk_checks_it(arguments):
    """Flat arguments (most tool calls') take a fast path: what it accepts and refuses,
    and the copy it returns, are the walk's. Its values: every kind of leaf, the
    ones past a limit and the ones that are not plain JSON among them."""
    plain = all(
        type(v) in (str, int, float, bool, type(None))
        and not (type(v) is float and not math.isfinite(v))
        and not (type(v) is int and not -(2**63) <= v <= 2**64 - 1)
        for v in arguments.values()
    )
    within = plain and measure(arguments)[2] <= MAX_ARGUMENT_CHARS
    if within:
        copy = check_arguments(arguments)
        assert copy == arguments and copy is not arguments
    else:
        with pytest.raises(ArgumentsError) as raised:
            check_arguments(arguments)
        assert raised.value.path.startswith("$")  # the walk names what is wrong


async def test_regression_a_huge_key_is_named_by_its_head_not_whole():
    """A streamed call whose arguments held a key of 100,000 characters failed the turn
    with the whole key in its path: a ``MODEL_PROTOCOL_ERROR`` detail of 100 KB, in
    the events and the ledger. A path shows a long key's head and its length."""
    from trio_agent import ToolCall, ToolRegistry, UserMessage, run_agent_loop, tool
    from trio_agent.testing import ScriptedModel, scripted_response

    @tool
    async def f(x: int = 0) -> str:
        """F."""
        return "ok"

    call = ToolCall("c1", "f", {"k" * 100_000: 1})
    run = run_agent_loop(
        messages=[UserMessage("u1", "go")],
        model=ScriptedModel([scripted_response("r1", [call])]),
        tools=ToolRegistry([f]),
        max_steps=2,
    )
    failed = await run.wait()
    assert failed.code == "MODEL_PROTOCOL_ERROR" and len(failed.detail) < 400, len(failed.detail)
    assert f'$["{"k" * 64}... (100000 characters)"]' in failed.detail
    from trio_agent.limits import json_path

    assert json_path(["a" * 64, 0]) == f"$.{'a' * 64}[0]"  # up to the bound: as it is
