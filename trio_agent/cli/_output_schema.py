"""``run --output-schema FILE``: a JSON Schema (an object's) the turn's answer must fit.

The schema goes to the model as it is, as the output tool's parameters
(``output_type`` is ``dict[str, Any]`` carrying it as its JSON Schema), and the
decoded answer is checked against it here (``OutputSchema.validate``, the
turn's ``output_validator``): a refusal goes back to the model with the JSON
path, as a decode error would. The check covers the keywords that say what an
answer holds (``type``, ``properties``, ``required``, ``additionalProperties``,
``items``, ``enum``, ``const``, ``anyOf``, ``oneOf``, ``allOf``, local
``$ref``); the others (formats, lengths, patterns, bounds) are for the model
only. A schema that cannot be used is a usage error (exit 2), before anything
runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Final, final

import msgspec

from ..output._spec import OutputError
from ._errors import UsageError

__all__ = ["OutputSchema", "read_output_schema"]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_integer(value: Any) -> bool:
    """An integer, as JSON Schema counts them: ``3.0`` is one."""
    return _is_number(value) and (not isinstance(value, float) or value.is_integer())


# JSON Schema's type names, each with what is one of it
_TYPES: Final[dict[str, Callable[[Any], bool]]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": _is_integer,
    "number": _is_number,
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
_SCHEMA_LISTS: Final = ("anyOf", "oneOf", "allOf")
_SCHEMA_MAPS: Final = ("properties", "$defs", "definitions")


class _BadSchema(Exception):
    """A schema this check cannot use (internal): the text says where and why."""


def _json_type(value: Any) -> str:
    """The JSON Schema type name of a decoded JSON value."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    for name in ("object", "array", "string", "null"):
        if _TYPES[name](value):
            return name
    return type(value).__name__


def _types_of(schema: Mapping[str, Any], where: str) -> list[str]:
    """The type names ``schema`` allows (none: any), each one JSON Schema knows."""
    given = schema.get("type")
    if given is None:
        return []
    names = [given] if isinstance(given, str) else given
    if not isinstance(names, list) or not names or any(n not in _TYPES for n in names):
        raise _BadSchema(f"{where}: type must be one of {', '.join(_TYPES)} or a list of them")
    return names


def _subschemas(schema: Mapping[str, Any], where: str) -> Iterator[tuple[Any, str, bool]]:
    """Each schema directly under ``schema``: (it, where it is, whether it applies to
    the same value: a combination's, not a property's or an item's). ``$ref`` is not
    followed here."""
    for key in _SCHEMA_MAPS:
        children = schema.get(key, {})
        if not isinstance(children, dict):
            raise _BadSchema(f"{where}: {key} must be an object")
        for name, child in children.items():
            yield child, f"{where}/{key}/{name}", False
    for key in _SCHEMA_LISTS:
        children = schema.get(key, [])
        if not isinstance(children, list) or (key in schema and not children):
            raise _BadSchema(f"{where}: {key} must be a non-empty array")
        for index, child in enumerate(children):
            yield child, f"{where}/{key}/{index}", True
    for key in ("items", "additionalProperties"):
        if key in schema:
            yield schema[key], f"{where}/{key}", False


def _check_keywords(schema: Any, where: str) -> None:
    """Refuse one schema (not those under it) where the check could not read it."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise _BadSchema(f"{where}: a schema is an object or a boolean, got {_json_type(schema)}")
    _types_of(schema, where)
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise _BadSchema(f"{where}: required must be an array of strings")
    if not isinstance(schema.get("enum", []), list):
        raise _BadSchema(f"{where}: enum must be an array")


@final
class _SchemaCheck:
    """Every schema reachable from the root, checked once; then no chain of ``$ref``
    and combinations may come back to where it began without reaching into the
    value (``{"$ref": "#"}`` at the top would never end)."""

    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        self.nodes: dict[int, tuple[Any, str]] = {}  # id: schema, where first seen
        self.same: dict[int, list[int]] = {}  # id: schemas that apply to the same value

    def run(self) -> None:
        self._collect(self.root, "#")
        state: dict[int, bool] = {}  # id: False while on the chain, True once done
        for node in self.nodes:
            self._no_loop(node, state)

    def _collect(self, schema: Any, where: str) -> int:
        key = id(schema)
        if key in self.nodes:
            return key
        _check_keywords(schema, where)
        self.nodes[key] = (schema, where)
        same = self.same[key] = []
        if isinstance(schema, dict):
            for child, child_where, same_value in _subschemas(schema, where):
                child_key = self._collect(child, child_where)
                if same_value:
                    same.append(child_key)
            if "$ref" in schema:
                same.append(self._collect(_resolve(self.root, schema["$ref"], where), where))
        return key

    def _no_loop(self, key: int, state: dict[int, bool]) -> None:
        if state.get(key) is True:
            return
        if key in state:
            where = self.nodes[key][1]
            raise _BadSchema(f"{where}: $ref and combinations loop back here without end")
        state[key] = False
        for child in self.same[key]:
            self._no_loop(child, state)
        state[key] = True


def _resolve(root: Mapping[str, Any], ref: Any, where: str) -> Any:
    """The schema a local ``$ref`` (``#``, ``#/$defs/Name``, ...) points at."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise _BadSchema(f"{where}: only local $ref (#/...) can be checked, got {ref!r}")
    node: Any = root
    for part in filter(None, ref[1:].split("/")):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            raise _BadSchema(f"{where}: $ref {ref!r} points at nothing")
        node = node[part]
    return node


def _path(path: str, key: str | int) -> str:
    """A JSON path one step further, as msgspec writes them (``$.a[0]``)."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{json.dumps(key)}]"


def _at(reason: str, path: str) -> str:
    return f"{reason} - at `{path}`"


@final
class OutputSchema:
    """A checked object schema: the ``output_type`` that carries it to the model and
    the ``output_validator`` that holds the answer to it."""

    __slots__ = ("schema",)

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema

    @property
    def output_type(self) -> Any:
        """``dict[str, Any]``, described to the model by the schema itself."""
        return Annotated[dict[str, Any], msgspec.Meta(extra_json_schema=self.schema)]

    async def validate(self, value: Any) -> None:
        """Refuse an answer that does not fit (``OutputError`` with its JSON path)."""
        try:
            problem = self.problem(value)
        except RecursionError:
            problem = "The answer is nested too deeply to be checked - at `$`"
        if problem is not None:
            raise OutputError(problem)

    def problem(self, value: Any) -> str | None:
        """Why ``value`` does not fit the schema (the first reason found), or None."""
        return self._problem(self.schema, value, "$")

    def _problem(self, schema: Any, value: Any, path: str) -> str | None:
        if schema is True:
            return None
        if schema is False:
            return _at("No value is allowed here", path)
        if "$ref" in schema:
            problem = self._problem(_resolve(self.schema, schema["$ref"], path), value, path)
            if problem is not None:
                return problem
        for check in (self._kind, self._choices, self._combined, self._object, self._array):
            problem = check(schema, value, path)
            if problem is not None:
                return problem
        return None

    def _kind(self, schema: Mapping[str, Any], value: Any, path: str) -> str | None:
        names = _types_of(schema, path)
        if not names or any(_TYPES[name](value) for name in names):
            return None
        return _at(f"Expected `{' | '.join(names)}`, got `{_json_type(value)}`", path)

    def _choices(self, schema: Mapping[str, Any], value: Any, path: str) -> str | None:
        if "const" in schema and not _same(value, schema["const"]):
            return _at(f"Expected {json.dumps(schema['const'])}", path)
        if "enum" in schema and not any(_same(value, v) for v in schema["enum"]):
            options = ", ".join(json.dumps(v) for v in schema["enum"])
            return _at(f"Expected one of {options}", path)
        return None

    def _combined(self, schema: Mapping[str, Any], value: Any, path: str) -> str | None:
        for sub in schema.get("allOf", []):
            problem = self._problem(sub, value, path)
            if problem is not None:
                return problem
        for key in ("anyOf", "oneOf"):
            if key not in schema:
                continue
            fits = sum(self._problem(sub, value, path) is None for sub in schema[key])
            if fits == 0:
                return _at(f"The value fits none of the {key} alternatives", path)
            if key == "oneOf" and fits > 1:
                return _at(f"The value fits {fits} of the oneOf alternatives, not one", path)
        return None

    def _object(self, schema: Mapping[str, Any], value: Any, path: str) -> str | None:
        if not isinstance(value, dict):
            return None
        for name in schema.get("required", []):
            if name not in value:
                return _at(f"Object missing required field `{name}`", path)
        properties: Mapping[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            sub = properties.get(name, extra)
            if sub is False:
                return _at(f"Object contains unknown field `{name}`", path)
            problem = self._problem(sub, item, _path(path, name))
            if problem is not None:
                return problem
        return None

    def _array(self, schema: Mapping[str, Any], value: Any, path: str) -> str | None:
        if not isinstance(value, list) or "items" not in schema:
            return None
        for index, item in enumerate(value):
            problem = self._problem(schema["items"], item, _path(path, index))
            if problem is not None:
                return problem
        return None


def _same(value: Any, wanted: Any) -> bool:
    """JSON equality: ``1`` is not ``true``, ``1`` is ``1.0``."""
    if isinstance(value, bool) or isinstance(wanted, bool):
        return type(value) is type(wanted) and value == wanted
    return bool(value == wanted)


def read_output_schema(file: str) -> OutputSchema:
    """The object schema in ``file``; a ``UsageError`` naming the file and what is
    wrong when it cannot be read, is not JSON, is no object schema or holds what
    the check cannot read."""
    where = f"--output-schema {file}"
    try:
        data = Path(file).read_bytes()
    except OSError as exc:
        raise UsageError(f"{where}: cannot read it: {exc.strerror or exc}") from None
    try:
        schema = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{where}: not JSON: {exc}") from None
    except RecursionError:  # the reader's own bound on nesting
        raise UsageError(f"{where}: not JSON: nested too deeply to read") from None
    if not isinstance(schema, dict):
        raise UsageError(f"{where}: a JSON Schema object is needed, got {_json_type(schema)}")
    if schema.get("type") != "object":
        raise UsageError(
            f'{where}: the answer must be a JSON object: the schema needs "type": "object", '
            f"got {json.dumps(schema.get('type'))}"
        )
    try:
        _SchemaCheck(schema).run()
    except _BadSchema as exc:
        raise UsageError(f"{where}: {exc}") from None
    return OutputSchema(schema)
