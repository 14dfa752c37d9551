"""A ``@tool``'s arguments: the JSON Schema the model is shown, and the check that
turns a call's arguments into the function's keyword arguments.

msgspec checks the arguments object (every name known, every required one
there) and every parameter msgspec takes; a parameter that is pydantic's (a
model, ``list[Model]``, ``Annotated[int, Field(gt=0)]``, a ``Field(...)``
default) is then validated by pydantic, at its name's JSON path, and its
schema is pydantic's. So a tool without pydantic's types never imports it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, Final, final

import msgspec

from ._schema import inline_schema, schema_hook
from ._types import (
    dec_hook,
    json_builtins,
    msgspec_mismatch,
    needs_pydantic,
    pydantic_default,
    unusable,
)

if TYPE_CHECKING:
    from ._pydantic import PydanticFields

__all__ = ["Arguments", "arguments_of"]


@final
class Arguments:
    """How a call's arguments become the function's keyword arguments (``convert``)
    and what the model is shown of them (``parameters``, a JSON Schema)."""

    __slots__ = ("_plain", "_pydantic", "_struct", "parameters")

    def __init__(
        self,
        struct: type[msgspec.Struct],
        parameters: dict[str, Any],
        pydantic: PydanticFields | None,
    ) -> None:
        self._struct = struct
        self._pydantic = pydantic
        self.parameters = parameters
        # every parameter an int, float, str or bool: no dict key to convert and no
        # type of ours to decode, so msgspec's plain conversion (a third of the cost:
        # its options are most of what a small call's conversion costs)
        self._plain = pydantic is None and all(
            any(field.type is kind for kind in _SCALARS) for field in msgspec.structs.fields(struct)
        )

    def convert(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments for ``arguments`` (plain JSON), or ``TypeMismatch``
        whose message has the JSON path (``Expected `int`, got `str` - at `$.left```).
        A pydantic validator of the user's may raise anything else."""
        try:
            if self._plain:
                values = msgspec.convert(arguments, self._struct)
            else:
                values = msgspec.convert(arguments, self._struct, str_keys=True, dec_hook=dec_hook)
        except msgspec.ValidationError as exc:
            raise msgspec_mismatch(exc) from None
        kwargs = msgspec.structs.asdict(values)
        if self._pydantic is not None:
            self._pydantic.validate(kwargs)
        return kwargs


_SCALARS: Final = (int, float, str, bool)  # by identity: an annotation may not hash

_DEFINITIONS: dict[Hashable, Arguments] = {}
_DEFINITIONS_KEPT: Final = 256
_DEFINITIONS_LOCK: Final = threading.Lock()
"""Arguments already built, by tool name and fields: a tool defined in a function
(a factory, a test's scenario) is built again at every call, and msgspec's Struct
and schema are most of what that costs. Bounded."""


def _definition_key(tool_name: str, fields: list[tuple[Any, ...]]) -> Hashable | None:
    """What decides the arguments: names, annotations, and defaults by their type,
    JSON and repr (so ``1``, ``1.0`` and ``True`` differ, and so do an enum member
    and its value, and ``nan``, ``inf`` and ``None``, all JSON ``null``); None when
    some part cannot be a key (a ``Field(...)`` default, an unhashable annotation)."""
    try:
        key = (
            tool_name,
            tuple((field[0], field[1], *map(_default_key, field[2:])) for field in fields),
        )
        hash(key)
    except (TypeError, msgspec.EncodeError):
        return None
    return key


def _default_key(default: Any) -> tuple[Any, ...]:
    """A default by its type, its JSON and its repr: the JSON of ``nan``, ``inf`` and
    ``None`` is ``null`` at any depth (``(inf, 0)``); a repr that names an object's
    address only makes a tool be built again."""
    return (type(default), msgspec.json.encode(default), repr(default))


def arguments_of(
    function: Callable[..., Any], tool_name: str, fields: list[tuple[Any, ...]]
) -> Arguments:
    """The arguments of a tool over ``function`` whose parameters are ``fields``
    (``(name, annotation[, default])``); ``TypeError`` naming a parameter whose
    type cannot be described, and saying what to use."""
    key = _definition_key(tool_name, fields)
    known = _DEFINITIONS.get(key) if key is not None else None
    if known is not None:
        return known
    built = _build(function, tool_name, fields)
    if key is not None:
        with _DEFINITIONS_LOCK:  # tools may be built in several threads at once
            if len(_DEFINITIONS) >= _DEFINITIONS_KEPT:
                del _DEFINITIONS[next(iter(_DEFINITIONS))]
            _DEFINITIONS[key] = built
    return built


def _build(
    function: Callable[..., Any], tool_name: str, fields: list[tuple[Any, ...]]
) -> Arguments:
    where = f"@tool: {function.__qualname__}"
    theirs = [f for f in fields if needs_pydantic(f[1]) or any(map(pydantic_default, f[2:]))]
    ours = [f for f in fields if not any(f is t for t in theirs)]
    pydantic = _pydantic_fields(where, theirs) if theirs else None
    struct_fields: list[tuple[Any, ...]] = []
    for field in fields:
        if pydantic is None or any(field is f for f in ours):
            struct_fields.append(field)
        elif field[0] in pydantic.required:
            struct_fields.append((field[0], Any))
        else:  # left out: its default is pydantic's business
            struct_fields.append((field[0], Any, msgspec.UNSET))
    struct = msgspec.defstruct(
        f"{tool_name}_arguments", struct_fields, kw_only=True, forbid_unknown_fields=True
    )
    try:
        parameters = inline_schema(struct)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{where}: {_culprit(ours, exc)}") from None
    if pydantic is not None:
        plain = {f[0]: f[2] for f in theirs if len(f) > 2 and not pydantic_default(f[2])}
        _merge(parameters, pydantic, plain)
    return Arguments(struct, parameters, pydantic)


def _pydantic_fields(where: str, fields: list[tuple[Any, ...]]) -> PydanticFields:
    try:
        from ._pydantic import PydanticFields
    except ImportError:  # annotated_types constraints without pydantic
        names = ", ".join(repr(f[0]) for f in fields)
        raise TypeError(
            f"{where}: parameters {names} have constraints only pydantic checks: "
            "pip install pydantic, or use msgspec.Meta"
        ) from None
    try:
        return PydanticFields(fields)
    except TypeError as exc:
        raise TypeError(f"{where}: {exc}") from None


def _culprit(fields: list[tuple[Any, ...]], exc: Exception) -> str:
    """Which parameter msgspec cannot describe, and what to use instead."""
    for field in fields:
        try:
            msgspec.json.schema(field[1], schema_hook=schema_hook)
        except (TypeError, ValueError) as inner:
            return f"parameter {field[0]!r}: {unusable(field[1], str(inner))}"
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    return f"cannot describe its parameters: {lines[-1]}"  # a default with no JSON form


def _merge(parameters: dict[str, Any], pydantic: PydanticFields, defaults: dict[str, Any]) -> None:
    """Put pydantic's schemas of its parameters into ``parameters`` (msgspec's
    schema, where they are ``{}``), with their definitions; a definition name
    msgspec's schema uses already is renamed in pydantic's part."""
    defs: dict[str, Any] = parameters.setdefault("$defs", {})
    renames: dict[str, str] = {}
    for name in pydantic.defs:
        taken = name
        while taken in defs or (taken != name and taken in pydantic.defs):
            taken += "_"
        renames[f"#/$defs/{name}"] = f"#/$defs/{taken}"
    theirs = _renamed({"d": pydantic.defs, "p": pydantic.properties}, renames)
    for name, definition in theirs["d"].items():
        defs[renames[f"#/$defs/{name}"].removeprefix("#/$defs/")] = definition
    for name, schema in theirs["p"].items():
        if name in defaults and "default" not in schema:
            try:
                default = json_builtins(defaults[name])
                schema = {**schema, "default": default}
            except (TypeError, ValueError):  # a default with no JSON form: not shown
                pass
        parameters["properties"][name] = schema
    if not defs:
        del parameters["$defs"]


def _renamed(value: Any, renames: dict[str, str]) -> Any:
    """``value`` with every ``$ref`` in ``renames`` renamed."""
    if isinstance(value, dict):
        return {
            key: renames.get(item, item) if key == "$ref" else _renamed(item, renames)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_renamed(item, renames) for item in value]
    return value
