"""A type's JSON Schema written the way tool parameters are: its own definition at
the top, the others kept in ``$defs`` (msgspec puts every Struct in ``$defs`` and
refers to it from the top)."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["inline_schema"]


def inline_schema(kind: Any) -> dict[str, Any]:
    """``kind``'s JSON Schema with its own definition inlined at the top, without
    its title; ``TypeError`` for a type msgspec cannot describe."""
    schema = msgspec.json.schema(kind)
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
