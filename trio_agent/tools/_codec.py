"""Which library takes a type that travels as JSON (a typed answer, an agent
tool's input): pydantic for a type that is pydantic's, msgspec for every other;
a type neither takes is refused with a message saying what to use."""

from __future__ import annotations

from typing import Any, Protocol

from ._types import MsgspecType, needs_pydantic, type_name, unusable

__all__ = ["JsonType", "json_type"]


class JsonType(Protocol):
    """A type's JSON Schema and the conversion of JSON to it (``MsgspecType``,
    ``PydanticType``): ``convert`` and ``decode`` raise ``TypeMismatch`` (with
    the JSON path) for a value that does not fit, ``NotJson`` for text that is
    not JSON."""

    @property
    def kind(self) -> Any: ...

    @property
    def schema(self) -> dict[str, Any]: ...

    @property
    def wrapped(self) -> bool: ...

    def convert(self, value: Any) -> Any: ...

    def decode(self, text: str | bytes) -> Any: ...


def json_type(kind: Any, *, wrapped: bool | None = None) -> JsonType:
    """How values of ``kind`` travel: ``wrapped`` as ``{"response": value}``, or
    not, or (None) wrapped when its schema is not an object. ``TypeError`` for a
    type neither library can describe, saying what to use instead."""
    make: Any = MsgspecType
    if needs_pydantic(kind):
        try:
            from ._pydantic import PydanticType
        except ImportError:  # annotated_types constraints without pydantic
            raise TypeError(
                f"type {type_name(kind)} has constraints only pydantic checks: "
                "pip install pydantic, or use msgspec.Meta"
            ) from None
        make = PydanticType
    try:
        found: JsonType = make(kind, wrapped=bool(wrapped))
        if wrapped is None and found.schema.get("type") != "object":
            found = make(kind, wrapped=True)
    except (TypeError, ValueError) as exc:
        raise TypeError(unusable(kind, str(exc))) from None
    return found
