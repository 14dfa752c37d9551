"""The ``--json`` lines and their JSON Schema: each line is an envelope carrying
the schema version, so a consumer can tell a format it knows from a newer one.

Version 1: ``{"schema": 1, "event": <SessionEvent>}`` for ``demo``, ``run`` and
``resume``; ``{"schema": 1, "record": <Record>}`` for ``show``, after one
``{"schema": 1, "warnings": [...]}`` when reading the ledger warned (a last
line a crash cut off, a damaged snapshot passed over). Within a
version, fields may be added (with defaults) but never removed or changed.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Final, Literal

import msgspec
from msgspec import Meta, Struct

from ..events import Event, RunResult, SessionEvent, TurnEnd, TurnResult
from ..ledger._records import Record

__all__ = ["SCHEMA_VERSION", "EventLine", "RecordLine", "WarningsLine", "json_schema"]

SCHEMA_VERSION: Final = 1

_SCHEMA: Final = Meta(
    description="This format's version: 1; refuse a line with one you do not know."
)


class EventLine(Struct, frozen=True, kw_only=True):
    """One line of ``trio-agent demo|run|resume --json``: an event of the session's
    turn, in the order the run emitted it (``event.sequence`` counts up by one)."""

    schema: Annotated[Literal[1], _SCHEMA]
    event: Annotated[SessionEvent, Meta(description="The event, as the run emitted it.")]


class RecordLine(Struct, frozen=True, kw_only=True):
    """One line of ``trio-agent show --json``: a record of the session's ledger, in
    the order it was written (``record.seq`` counts up by one from 0)."""

    schema: Annotated[Literal[1], _SCHEMA]
    record: Annotated[Record, Meta(description="The record, as the ledger holds it.")]


class WarningsLine(Struct, frozen=True, kw_only=True):
    """The first line of ``trio-agent show --json`` when reading the session warned
    (its ``RecordLine`` lines follow); absent otherwise. ``show`` prints the same
    text as ``warning:`` lines."""

    schema: Annotated[Literal[1], _SCHEMA]
    warnings: Annotated[
        list[str],
        Meta(
            description="What reading the session passed over, in the order found: a last "
            "line a crash cut off (ignored, and cut off before the next append), a damaged "
            "snapshot (a cache: replayed past)."
        ),
    ]


_DESCRIPTION: Final = (
    "One JSON object per line. demo, run and resume --json: "
    '{"schema": 1, "event": SessionEvent}; show --json: {"schema": 1, "record": Record}. '
    "`schema` is this schema's version: within a version fields may be added (with "
    "defaults), never removed or changed; a consumer should refuse a version it does "
    "not know."
)

# Named unions, so a consumer can point at them; Structs are named by msgspec.
_EVENT_TYPES: Final[dict[str, Any]] = {
    "EventLine": EventLine,
    "SessionEvent": SessionEvent,
    "TurnEnd": TurnEnd,
    "TurnResult": TurnResult,
    "Event": Event,
    "RunResult": RunResult,
}
_RECORD_TYPES: Final[dict[str, Any]] = {
    "RecordLine": RecordLine,
    "WarningsLine": WarningsLine,
    "Record": Record,
}


def _describe_tags(node: Any, components: dict[str, Any]) -> None:
    """Describe the tag property of every tagged Struct (a ClassVar, which msgspec
    leaves bare), found through the discriminators of the unions under ``node``."""
    if isinstance(node, list):
        for item in node:
            _describe_tags(item, components)
    elif isinstance(node, dict):
        found = node.get("discriminator")
        if isinstance(found, dict):
            field = found["propertyName"]
            for tag, ref in found["mapping"].items():
                target = components[ref.rsplit("/", 1)[1]]["properties"][field]
                target.setdefault(
                    "description",
                    f"Always {json.dumps(tag)}: the tag telling this type from the rest.",
                )
        for value in node.values():
            _describe_tags(value, components)


def json_schema(kind: Literal["events", "records", "all"] = "all") -> dict[str, Any]:
    """The JSON Schema (2020-12) of the ``--json`` lines of ``kind``, made by msgspec
    from the types themselves; every type's docstring is its description."""
    named: dict[str, Any] = {}
    lines: list[str] = []
    if kind in ("events", "all"):
        named |= _EVENT_TYPES
        lines.append("EventLine")
    if kind in ("records", "all"):
        named |= _RECORD_TYPES
        lines += ["RecordLine", "WarningsLine"]
    schemas, components = msgspec.json.schema_components(
        named.values(), ref_template="#/$defs/{name}"
    )
    for name, schema in zip(named, schemas, strict=True):
        if "$ref" not in schema:  # a union: give it its name too
            components[name] = schema
    _describe_tags(components, components)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"trio-agent --json lines, schema {SCHEMA_VERSION}",
        "description": _DESCRIPTION,
        "anyOf": [{"$ref": f"#/$defs/{name}"} for name in lines],
        "$defs": dict(sorted(components.items())),
    }
