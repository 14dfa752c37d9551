"""A ``@tool``'s arguments (``tools/_arguments.py``): a tool whose parameters are
all ints, floats, strs and bools converts a call's arguments with msgspec's
plain conversion, without the dict-key and decode-hook options the other tools
need (issue 38: those options were two thirds of a small call's conversion);
whatever the model sends, it gets what the full conversion would give, and the
same error."""

from __future__ import annotations

import enum
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_agent import tool
from trio_agent.tools._arguments import Arguments
from trio_agent.tools._types import TypeMismatch


@tool
async def scalars(count: int, ratio: float, name: str, flag: bool = False, note: str = "") -> str:
    """Every parameter a scalar."""
    return name


@tool
async def mixed(count: int, tags: list[str], extra: dict[int, str] | None = None) -> str:
    """A list and a dict with int keys: the full conversion."""
    return ""


def _both(checked: Arguments) -> tuple[Arguments, Arguments]:
    full = Arguments(checked._struct, checked.parameters, None)
    full._plain = False  # the path every other tool takes
    return checked, full


def _outcome(arguments: Arguments, given: dict[str, Any]) -> tuple[str, Any]:
    try:
        kwargs = arguments.convert(given)
    except TypeMismatch as exc:
        return "refused", str(exc)
    return "kwargs", [(key, type(value), value) for key, value in sorted(kwargs.items())]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
_KEYS = st.sampled_from(["count", "ratio", "name", "flag", "note", "other"])


def test_only_a_tool_of_scalars_takes_the_plain_conversion():
    assert scalars._arguments._plain and not mixed._arguments._plain


@given(st.dictionaries(_KEYS, _JSON | st.integers() | st.text(max_size=3), max_size=6))
def test_the_plain_conversion_gives_what_the_full_one_gives(given: dict[str, Any]):
    plain, full = _both(scalars._arguments)
    assert _outcome(plain, given) == _outcome(full, given)


_SCALAR = st.integers() | st.floats(allow_nan=False) | st.text(max_size=3) | st.booleans()


@given(
    st.fixed_dictionaries(
        {"count": _SCALAR, "ratio": _SCALAR, "name": _SCALAR},
        optional={"flag": _SCALAR, "note": _SCALAR, "other": _SCALAR},
    )
)
def test_every_scalar_in_every_place_converts_as_the_full_conversion_does(given: dict[str, Any]):
    plain, full = _both(scalars._arguments)
    assert _outcome(plain, given) == _outcome(full, given)


@pytest.mark.parametrize(
    "given",
    [
        {"count": 1, "ratio": 2, "name": "a"},  # an int where a float goes
        {"count": True, "ratio": 1.5, "name": "a"},  # a bool is not an int
        {"count": 1.0, "ratio": 1.5, "name": "a"},  # nor a float
        {"count": 1, "ratio": 1.5},  # a required one missing
        {"count": 1, "ratio": 1.5, "name": "a", "other": 1},  # an unknown one
        {"count": 1, "ratio": 1.5, "name": "a", "flag": 1},  # an int is not a bool
    ],
)
def test_what_the_plain_conversion_refuses_it_refuses_as_the_full_one(given: dict[str, Any]):
    plain, full = _both(scalars._arguments)
    assert _outcome(plain, given) == _outcome(full, given)


class Size(enum.Enum):
    SMALL = "small"


def _scale(default: Any) -> Any:
    @tool(name="scale")
    async def scale(x: float = default) -> Any:  # type: ignore[assignment]
        """A default made by a factory."""
        return x

    return scale


async def test_tools_whose_defaults_share_their_json_keep_their_own_defaults():
    """Built arguments are kept by their tool's name and fields, and a default was
    keyed by its JSON alone: ``inf``, ``nan`` and ``None`` are all ``null``, so a
    tool built with ``inf`` got the arguments (and the default) of one built
    before it with ``None``; an enum member and its value were one key too."""
    import math

    assert await _scale(None).execute({}) is None
    assert await _scale(math.inf).execute({}) == math.inf
    assert math.isnan(await _scale(math.nan).execute({}))
    assert await _scale(-math.inf).execute({}) == -math.inf

    @tool(name="sized")
    async def by_value(size: Size = "small") -> Any:  # type: ignore[assignment]
        """The default as the enum's value."""
        return size

    @tool(name="sized")
    async def by_member(size: Size = Size.SMALL) -> Any:
        """The default as the enum's member."""
        return size

    assert await by_value.execute({}) == "small"
    assert await by_member.execute({}) is Size.SMALL


def _pair(default: Any) -> Any:
    @tool(name="pair")
    async def pair(x: tuple[float, int] = default) -> Any:  # type: ignore[assignment]
        """A default that holds a float."""
        return x

    return pair


async def test_tools_whose_nested_defaults_share_their_json_keep_their_own_defaults():
    """The same, a level down: ``(inf, 0)`` and ``(nan, 0)`` are both ``[null,0]``."""
    import math

    assert await _pair((math.inf, 0)).execute({}) == (math.inf, 0)
    nan, zero = await _pair((math.nan, 0)).execute({})
    assert math.isnan(nan) and zero == 0
    assert await _pair((1.0, 2)).execute({}) == (1.0, 2)
