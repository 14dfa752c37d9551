"""``@tool`` keeps the arguments Struct and schema it built (a tool defined in a
factory or a test scenario is built again at every call): whatever it reuses must
be what it would have built, and a tool built from a kept one is its own value."""

import threading
from typing import Annotated, Any

import msgspec
import pytest

from trio_agent import tool
from trio_agent.tools import ToolArgumentsError
from trio_agent.tools import _arguments as tools_module

UNWRITABLE = object()


def defaulted(default: Any) -> Any:
    @tool
    async def pick(value: int | bool | float = default) -> str:
        """Picks."""
        return repr(value)

    return pick


def factory() -> Any:
    @tool
    async def add(a: int, b: int = 2) -> int:
        """Adds."""
        return a + b

    return add


def test_a_tool_built_again_has_the_same_schema_and_checks_the_same():
    first, second = factory(), factory()
    assert first.parameters == second.parameters
    assert first.spec() == second.spec()
    assert first.parameters["properties"]["b"]["default"] == 2


async def test_a_tool_built_again_validates_with_the_json_path():
    with pytest.raises(ToolArgumentsError, match=r"\$\.a"):
        await factory().execute({"a": "x"})
    assert await factory().execute({"a": 1}) == 3


def test_defaults_equal_in_python_but_not_in_json_give_their_own_schemas():
    schemas = [
        defaulted(value).parameters["properties"]["value"]["default"] for value in (1, True, 1.0)
    ]
    assert [repr(v) for v in schemas] == ["1", "True", "1.0"]


def test_a_local_class_defined_at_each_call_gets_its_own_struct():
    def make() -> tuple[Any, type]:
        class Point(msgspec.Struct):
            x: int

        @tool
        async def place(point: Point) -> str:
            """Places."""
            return type(point).__name__

        return place, Point

    (one, point_one), (two, point_two) = make(), make()
    assert point_one is not point_two
    assert one.function is not two.function


async def test_a_local_class_argument_is_an_instance_of_its_own_class():
    def make() -> tuple[Any, type]:
        class Point(msgspec.Struct):
            x: int

        @tool
        async def place(point: Point) -> bool:
            """Places."""
            return isinstance(point, Point)

        return place, Point

    for place, _ in (make(), make()):
        assert await place.execute({"point": {"x": 1}}) is True


def test_an_unhashable_annotation_still_builds_and_is_not_kept():
    before = dict(tools_module._DEFINITIONS)

    @tool
    async def noted(count: Annotated[int, {"note": "unhashable"}] = 3) -> int:
        """Counts."""
        return count

    assert noted.parameters["properties"]["count"] == {"type": "integer", "default": 3}
    assert tools_module._DEFINITIONS.keys() - before.keys() == set()


def test_a_default_json_cannot_write_is_refused_as_before():
    with pytest.raises(TypeError):

        @tool
        async def odd(value: Any = UNWRITABLE) -> str:
            """Odd."""
            return "x"


def test_changing_one_tools_schema_dict_reaches_no_other():
    first = factory()
    first.parameters["properties"]["a"]["type"] = "string"
    assert factory().parameters["properties"]["a"]["type"] == "integer"


def test_the_kept_definitions_are_bounded_and_safe_across_threads():
    def build(offset: int) -> None:
        for i in range(150):
            tool(name=f"t{offset}_{i}")(factory().function)

    threads = [threading.Thread(target=build, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(tools_module._DEFINITIONS) <= tools_module._DEFINITIONS_KEPT
