"""pydantic's side of how values of a type travel as JSON: a type pydantic
validates (``PydanticType``), and the parameters of a tool that are pydantic's
(``PydanticFields``), each with pydantic's JSON Schema and validation, and
pydantic's errors given to the model with their JSON paths.

Imported only for a type that is pydantic's (``_types.needs_pydantic``), so
importing trio_agent never imports pydantic.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Annotated, Any, Final, final

import msgspec
import pydantic
from pydantic.fields import FieldInfo

from ..limits import OUTPUT_TOOL_NAME
from ._schema import inline
from ._types import NotJson, TypeMismatch, json_bytes, mismatch_of, unusable

__all__ = ["PydanticFields", "PydanticType"]

_REQUIRED: Final = object()


def _reason(exc: Exception) -> str:
    """pydantic's refusal of a type, its first sentence (the rest is advice for a
    pydantic model's author: ``arbitrary_types_allowed``, which we do not use)."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return first.split(". ")[0].rstrip(".")


def _adapter(kind: Any) -> tuple[pydantic.TypeAdapter[Any], dict[str, Any]]:
    """A ``TypeAdapter`` for ``kind`` and its JSON Schema; ``TypeError`` saying why
    pydantic cannot take it."""
    try:
        adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(kind)
        return adapter, adapter.json_schema()
    except (pydantic.PydanticUserError, TypeError, ValueError) as exc:
        raise TypeError(_reason(exc)) from None


def _problems(
    exc: pydantic.ValidationError, prefix: Sequence[str | int] = ()
) -> Iterator[tuple[Sequence[str | int], str, bool]]:
    for error in exc.errors(include_url=False, include_context=False, include_input=False):
        yield (*prefix, *error["loc"]), error["msg"], error["type"] == "missing"


def _as_json(adapter: pydantic.TypeAdapter[Any], value: Any) -> Any:
    """A plain JSON value (a model's arguments) validated as the JSON it is
    (``validate_json``): read as Python objects (``validate_python``), a strict
    model (``ConfigDict(strict=True)``) refused the very strings its schema asks
    for a ``datetime``, a ``UUID``, an ``Enum`` or a tuple, on every call.
    ``TypeMismatch`` for a value that is no JSON at all."""
    try:
        text = json_bytes(value)
    except (TypeError, ValueError) as exc:
        raise TypeMismatch(f"the value is not JSON: {exc}") from None
    return adapter.validate_json(text)


@final
class PydanticType:
    """A type pydantic takes: its schema, and the validation of a JSON value or of
    JSON text as it. ``wrapped``: the value travels as ``{"response": value}``
    and is unwrapped here. ``TypeError`` for a type pydantic cannot take."""

    __slots__ = ("_adapter", "kind", "schema", "wrapped")

    def __init__(self, kind: Any, *, wrapped: bool = False) -> None:
        self.kind: Any = kind
        self.wrapped = wrapped
        travels = kind
        if wrapped:
            try:
                travels = pydantic.create_model(
                    OUTPUT_TOOL_NAME,
                    __config__=pydantic.ConfigDict(extra="forbid"),
                    response=(kind, ...),
                )
            except (pydantic.PydanticUserError, TypeError, ValueError) as exc:
                raise TypeError(_reason(exc)) from None
        self._adapter, schema = _adapter(travels)
        self.schema = inline(schema)

    def convert(self, value: Any) -> Any:
        """``value`` (plain JSON) validated as the type, or ``TypeMismatch``: read as
        the JSON it is (``_as_json``)."""
        try:
            validated = _as_json(self._adapter, value)
        except pydantic.ValidationError as exc:
            raise mismatch_of(_problems(exc)) from None
        return validated.response if self.wrapped else validated

    def decode(self, text: str | bytes) -> Any:
        """JSON ``text`` validated as the type; ``NotJson`` or ``TypeMismatch``."""
        try:
            validated = self._adapter.validate_json(text)
        except pydantic.ValidationError as exc:
            problems = list(_problems(exc))
            if any(error["type"] == "json_invalid" for error in exc.errors()):
                raise NotJson(problems[0][1]) from None
            raise mismatch_of(problems) from None
        return validated.response if self.wrapped else validated


@final
class PydanticFields:
    """The parameters of a tool that pydantic validates, each after msgspec has
    checked the arguments object (names, required, unknown), at its own JSON path
    (``$.order.items[0].qty``). A parameter left out (``msgspec.UNSET``) takes
    its default: the function's, or its ``Field``'s (a factory called each time).
    ``TypeError`` naming the parameter pydantic cannot take."""

    __slots__ = ("_fields", "defs", "properties", "required")

    def __init__(self, fields: Sequence[tuple[Any, ...]]) -> None:
        self._fields: list[tuple[str, pydantic.TypeAdapter[Any], Any]] = []
        self.required: set[str] = set()
        inputs = []
        for name, given, *rest in fields:
            annotation, default = given, rest[0] if rest else _REQUIRED
            if isinstance(default, FieldInfo):
                annotation = Annotated[annotation, default]
                if default.is_required():
                    default = _REQUIRED
            if default is _REQUIRED:
                self.required.add(name)
            try:
                adapter, _ = _adapter(annotation)
            except TypeError as exc:
                raise TypeError(f"parameter {name!r}: {unusable(given, str(exc))}") from None
            self._fields.append((name, adapter, default))
            inputs.append((name, "validation", adapter))
        found, top = pydantic.TypeAdapter.json_schemas(inputs)  # type: ignore[arg-type]
        self.properties: dict[str, Any] = {name: found[name, "validation"] for name, *_ in fields}
        self.defs: dict[str, Any] = top.get("$defs", {})

    def validate(self, values: dict[str, Any]) -> None:
        """Replace each of the tool's pydantic parameters in ``values`` by its
        validated value (or its default); ``TypeMismatch`` with every problem."""
        problems: list[tuple[Sequence[str | int], str, bool]] = []
        for name, adapter, default in self._fields:
            value = values[name]
            if value is msgspec.UNSET:
                if isinstance(default, FieldInfo):
                    values[name] = default.get_default(call_default_factory=True)
                else:
                    values[name] = default
                continue
            try:
                values[name] = _as_json(adapter, value)
            except pydantic.ValidationError as exc:
                problems.extend(_problems(exc, (name,)))
        if problems:
            raise mismatch_of(problems)
