"""A type's JSON Schema written the way tool parameters are: its own definition at
the top, the others kept in ``$defs`` (msgspec and pydantic put a class in
``$defs`` and may refer to it from the top). ``pathlib`` paths, which msgspec
leaves to the application, are strings here (``schema_hook``)."""

from __future__ import annotations

import pathlib
from typing import Any

import msgspec

__all__ = ["inline", "inline_schema", "schema_hook"]


def schema_hook(kind: type) -> dict[str, Any]:
    """The schema of a type msgspec leaves to a hook: a ``pathlib`` path is a
    string; anything else stays unsupported (msgspec's ``TypeError``)."""
    if isinstance(kind, type) and issubclass(kind, pathlib.PurePath):
        return {"type": "string", "format": "path"}
    raise NotImplementedError


def inline_schema(kind: Any) -> dict[str, Any]:
    """``kind``'s JSON Schema by msgspec, with its own definition inlined at the
    top, without its title; ``TypeError`` for a type msgspec cannot describe."""
    return inline(msgspec.json.schema(kind, schema_hook=schema_hook))


def inline(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (a fresh one: it is changed) with the definition its top refers
    to inlined, and without its title."""
    defs: dict[str, Any] = schema.pop("$defs", {})
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/") and len(schema) == 1:
        name = ref.removeprefix("#/$defs/")
        schema = dict(defs[name])
        # a recursive type refers to itself: its definition stays for those refs
        if f'"{ref}"'.encode() not in msgspec.json.encode([schema, defs]):
            del defs[name]
    schema.pop("title", None)
    if defs:
        schema["$defs"] = defs
    return schema
