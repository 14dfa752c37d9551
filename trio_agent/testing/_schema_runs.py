"""Schema-driven runs: tool arguments generated from each tool's JSON Schema.

``SchemaModel`` calls every tool a request offers with arguments valid for
its schema, so the tools' bodies run; ``tool_calls_for`` builds such calls
for a seed, and ``schema_arguments`` is the hypothesis strategy behind them.
The generator (``_schema_values``) knows the schemas ``@tool`` produces
(msgspec's): objects with ``properties``/``required``/``additionalProperties``
and ``propertyNames``, ``$ref``/``$defs``, ``anyOf``/``oneOf``,
``enum``/``const``, integers and numbers with bounds and ``multipleOf``,
strings with lengths and msgspec's formats, base64 bytes, arrays (with
``prefixItems``, ``uniqueItems`` and lengths), booleans, null, and ``{}`` for
any JSON value. Values are kept small, within ``trio_agent.limits``.

A schema alone does not say everything msgspec checks: a ``datetime`` or
``time`` that may be naive is a plain ``{"type": "string"}``, ``dict[int, X]``
and ``dict[str, X]`` have the same schema, ``bytes`` lengths are rounded to
base64 characters. Given the ``@tool`` itself (a ``Tool`` or a
``ToolRegistry``, not a ``ToolSpec`` or a bare schema), the generator reads
those from the tool's Python types too (``_tool_schema``).
"""

from __future__ import annotations

import random
import threading
import typing
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, final

import msgspec.inspect as mi
import msgspec.json

from ..messages._ir import ToolCall, ToolResultMessage
from ..model import ModelRequest, ToolSpec
from ..tools._tool import Tool, ToolRegistry
from ._callable import CallableModel
from ._schema_values import DrawSource, RandomSource, SchemaError, generate, plain
from ._scripted import ScriptedResponse, scripted_response

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

__all__ = ["SchemaError", "SchemaModel", "schema_arguments", "tool_calls_for"]

Schema = Mapping[str, Any]
_STRINGS = (
    mi.StrType,
    mi.BytesType,
    mi.ByteArrayType,
    mi.MemoryViewType,
    mi.DateTimeType,
    mi.DateType,
    mi.TimeType,
    mi.TimeDeltaType,
    mi.UUIDType,
    mi.DecimalType,
)
_DICTS = (mi.DictType, getattr(mi, "FrozenDictType", mi.DictType))
_RECORDS = (mi.StructType, mi.TypedDictType, mi.DataclassType, mi.NamedTupleType)
_FORMATS: dict[type[mi.Type], str] = {
    mi.DateType: "date",
    mi.TimeDeltaType: "duration",
    mi.UUIDType: "uuid",
    mi.DecimalType: "decimal",
}
_ZONES = {None: "x-", True: "", False: "local-"}
"""A datetime's or time's format by its ``tz``: with or without offset, with one, without."""
_KEPT = 256


def _unwrap(t: mi.Type) -> mi.Type:
    while isinstance(t, mi.Metadata):
        t = t.type
    return t


def _kind(t: mi.Type) -> str | None:
    """The JSON type a (unwrapped) msgspec type is written as, None for several or any."""
    if isinstance(t, _STRINGS):
        return "string"
    if isinstance(t, mi.BoolType | mi.NoneType):
        return "boolean" if isinstance(t, mi.BoolType) else "null"
    if isinstance(t, mi.IntType | mi.FloatType):
        return "integer" if isinstance(t, mi.IntType) else "number"
    if isinstance(t, mi.CollectionType | mi.TupleType | mi.NamedTupleType):
        return "array"
    if isinstance(t, mi.StructType):
        return "array" if t.array_like else "object"
    return "object" if isinstance(t, (*_DICTS, mi.TypedDictType, mi.DataclassType)) else None


def _string_hints(t: mi.Type) -> dict[str, Any]:
    """What a string schema leaves out about ``t``: a naive-or-aware datetime's or time's
    format, exact byte lengths."""
    if isinstance(t, mi.DateTimeType):
        return {"format": _ZONES[t.tz] + "date-time"}
    if isinstance(t, mi.TimeType):
        return {"format": "partial-time" if t.tz is False else _ZONES[t.tz] + "time"}
    if isinstance(t, mi.BytesType | mi.ByteArrayType | mi.MemoryViewType):
        lengths = {"x-minBytes": t.min_length, "x-maxBytes": t.max_length}
        return {k: v for k, v in lengths.items() if v is not None}
    return {}


def _key_schema(t: mi.Type) -> dict[str, Any] | None:
    """A schema for the keys of a ``dict`` whose key type is ``t`` (numbers: their text),
    None for a key type no JSON key can give."""
    t = _unwrap(t)
    if isinstance(t, mi.StrType):
        lengths = {"minLength": t.min_length, "maxLength": t.max_length, "pattern": t.pattern}
        return {"type": "string", **{k: v for k, v in lengths.items() if v is not None}}
    if isinstance(t, mi.IntType | mi.FloatType):
        bounds = {
            "minimum": t.ge,
            "exclusiveMinimum": t.gt,
            "maximum": t.le,
            "exclusiveMaximum": t.lt,
            "multipleOf": t.multiple_of,
        }
        kind = "integer" if isinstance(t, mi.IntType) else "number"
        return {"type": kind, **{k: v for k, v in bounds.items() if v is not None}}
    if isinstance(t, mi.LiteralType | mi.EnumType):
        values = t.values if isinstance(t, mi.LiteralType) else [m.value for m in t.cls]
        return {"enum": [v for v in values if isinstance(v, str | int)]}
    if isinstance(t, mi.UnionType):
        options = [_key_schema(s) for s in t.types if not isinstance(_unwrap(s), mi.NoneType)]
        return None if None in options else {"anyOf": options}
    if type(t) in _FORMATS:
        return {"type": "string", "format": _FORMATS[type(t)]}
    hints = _string_hints(t)
    return {"type": "string", **hints} if "format" in hints else None


@final
class _Refiner:
    """Adds to a plain copy of a tool's schema what its Python types say and the schema
    does not (``_string_hints``, and dict keys as ``propertyNames``). Best effort: a part
    it cannot match is left as it is."""

    __slots__ = ("_defs", "_seen")

    def __init__(self, root: dict[str, Any]) -> None:
        defs = root.get("$defs")
        self._defs: dict[str, Any] = defs if isinstance(defs, dict) else {}
        self._seen: set[str] = set()

    def _resolve(self, schema: Any) -> Any:
        """The definition ``schema`` refers to (one ``$ref`` deep), or ``schema``."""
        if isinstance(schema, dict) and "$ref" in schema:
            return self._defs.get(str(schema["$ref"]).rsplit("/", 1)[-1])
        return schema

    def refine(self, t: mi.Type, schema: Any, depth: int = 0) -> None:
        """Refine ``schema``, which msgspec wrote for ``t``, in place."""
        if isinstance(schema, dict) and "$ref" in schema:
            name = str(schema["$ref"]).rsplit("/", 1)[-1]
            if name in self._seen:
                return  # a definition is refined once (and recursive types end)
            self._seen.add(name)
            schema = self._defs.get(name)
        t = _unwrap(t)
        if not isinstance(schema, dict) or depth > 64:
            return
        if _kind(t) != schema.get("type"):
            return  # not the schema msgspec writes for ``t``: left as it is
        schema.update(_string_hints(t))
        if isinstance(t, _DICTS) and "propertyNames" not in schema:
            keys = _key_schema(t.key_type)
            if keys is not None:
                schema["propertyNames"] = keys
        for inner, part in self._parts(t, schema):
            self.refine(inner, part, depth + 1)

    def _parts(self, t: mi.Type, schema: dict[str, Any]) -> Iterator[tuple[mi.Type, Any]]:
        """The types inside ``t`` with the parts of ``schema`` written for them."""
        if isinstance(t, mi.UnionType):
            yield from self._members(t, schema)
        elif isinstance(t, _DICTS):
            yield t.value_type, schema.get("additionalProperties")
        elif isinstance(t, mi.CollectionType):
            yield t.item_type, schema.get("items")
        elif isinstance(t, mi.TupleType):
            yield from zip(t.item_types, schema.get("prefixItems", ()), strict=False)
        elif isinstance(t, _RECORDS) and "prefixItems" in schema:  # array_like, NamedTuple
            skip = 1 if isinstance(t, mi.StructType) and t.tag_field is not None else 0
            items = schema["prefixItems"][skip:]
            yield from zip((f.type for f in t.fields), items, strict=False)
        elif isinstance(t, _RECORDS):
            properties = schema.get("properties", {})
            yield from ((f.type, properties.get(f.encode_name)) for f in t.fields)

    def _members(self, t: mi.UnionType, schema: dict[str, Any]) -> Iterator[tuple[mi.Type, Any]]:
        """Each member of a union with the one ``anyOf`` branch written for it."""
        branches: list[Any] = []
        for branch in schema.get("anyOf", ()):  # tagged Structs: an anyOf of their own
            nested = branch.get("anyOf") if isinstance(branch, dict) else None
            branches.extend(nested if isinstance(nested, list) else [branch])
        for member in t.types:
            matches = [b for b in branches if self._fits(_unwrap(member), b)]
            if len(matches) == 1:
                yield member, matches[0]

    def _fits(self, t: mi.Type, branch: Any) -> bool:
        """Whether ``branch`` is the schema written for ``t`` (in a union msgspec allows)."""
        target, kind = self._resolve(branch), _kind(t)
        if kind is None or not isinstance(target, dict) or target.get("type") != kind:
            return False
        if not isinstance(t, mi.StructType) or t.array_like:
            return True  # a union has at most one member of each other JSON type
        names = {f.encode_name for f in t.fields} | ({t.tag_field} - {None})
        tag = target.get("properties", {}).get(t.tag_field) if t.tag_field else None
        return set(target.get("properties", ())) == names and (
            tag is None or tag == {"enum": [t.tag]}
        )


def _parameter_types(tool: Tool[..., Any]) -> dict[str, mi.Type]:
    """The msgspec types of the parameters of the function ``@tool`` built ``tool`` from,
    for the properties of its schema (empty: built by hand, or unreadable)."""
    properties = tool.parameters.get("properties")
    if tool.function is None or not isinstance(properties, dict):
        return {}
    try:
        hints = typing.get_type_hints(tool.function, include_extras=True)
        names = [name for name in properties if name in hints and hints[name] is not object]
        types = mi.multi_type_info([hints[name] for name in names])
    except (NameError, TypeError, ValueError):
        return {}
    return dict(zip(names, types, strict=True))


_SCHEMAS: dict[int, tuple[Tool[..., Any], Schema]] = {}
"""Refined schemas by tool (the tool is kept, so its id is not reused). Bounded."""
_SCHEMAS_LOCK = threading.Lock()


def _tool_schema(tool: Tool[..., Any]) -> Schema:
    """The schema arguments for ``tool`` are generated from: ``tool.parameters``, refined
    from the types of the function ``@tool`` built it from (see the module)."""
    known = _SCHEMAS.get(id(tool))
    if known is not None and known[0] is tool:
        return known[1]
    schema: dict[str, Any] = plain(tool.parameters)
    refiner = _Refiner(schema)
    for name, t in _parameter_types(tool).items():
        refiner.refine(t, schema["properties"][name])
    with _SCHEMAS_LOCK:  # calls may be made in several threads at once
        if len(_SCHEMAS) >= _KEPT:
            del _SCHEMAS[next(iter(_SCHEMAS))]
        _SCHEMAS[id(tool)] = (tool, schema)
    return schema


def _schema_of(source: Schema | ToolSpec | Tool[..., Any]) -> Schema:
    if isinstance(source, Tool):
        return _tool_schema(source)
    return source.parameters if isinstance(source, ToolSpec) else source


def schema_arguments(
    schema: Schema | ToolSpec | Tool[..., Any],
) -> SearchStrategy[dict[str, Any]]:
    """A hypothesis strategy of arguments (a plain-JSON object) valid for ``schema``:
    a JSON Schema, a ``ToolSpec``, or a ``Tool`` (whose Python types ``@tool`` kept
    complete what its schema leaves out: pass the tool rather than ``tool.parameters``
    for a ``datetime``, ``time``, ``dict[int, X]`` or ``bytes`` parameter).

    Shrinks toward the smallest arguments: minimum lengths, low numbers,
    optional fields left out. Needs ``hypothesis`` (the ``test`` extra).
    ``SchemaError`` when drawn: a schema the generator cannot satisfy.
    """
    from hypothesis import strategies as st

    parameters = _schema_of(schema)

    @st.composite
    def draw_arguments(draw: st.DrawFn) -> dict[str, Any]:
        return generate(parameters, DrawSource(draw, st))

    return draw_arguments()


Tools = ToolRegistry | Iterable[ToolSpec | Tool[..., Any]]


def _named(tools: Tools) -> list[tuple[str, Schema]]:
    """Each tool's name and the schema its arguments are generated from."""
    return [(t.name, _schema_of(t)) for t in tools]


def tool_calls_for(
    tools: Tools,
    *,
    seed: int | str = 0,
    calls_per_tool: int = 1,
    id_prefix: str = "call",
) -> list[ToolCall]:
    """``calls_per_tool`` calls of each tool, with arguments generated from its schema
    (a ``Tool``'s completed by its types, see ``schema_arguments``).

    Call ``k`` (from 1) of tool ``name`` has id ``{id_prefix}-{name}-{k}``; its
    arguments depend only on ``seed``, ``id_prefix``, the name and ``k``, so
    the same inputs give the same calls in any process. ``SchemaError``: a
    schema the generator cannot satisfy.
    """
    if type(calls_per_tool) is not int or calls_per_tool < 1:
        raise ValueError(f"calls_per_tool must be an int >= 1, got {calls_per_tool!r}")
    calls = []
    for name, schema in _named(tools):
        for k in range(1, calls_per_tool + 1):
            rng = random.Random(f"{seed}/{id_prefix}/{name}/{k}")
            try:
                arguments = generate(schema, RandomSource(rng))
            except SchemaError as exc:
                raise SchemaError(f"tool {name!r}: {exc}") from None
            calls.append(ToolCall(f"{id_prefix}-{name}-{k}", name, arguments))
    return calls


def _known_tools(
    tools: Iterable[str | Tool[..., Any]] | ToolRegistry,
) -> dict[str, Tool[..., Any] | None]:
    """Names to the ``Tool`` given for them (or None for a bare name)."""
    known: dict[str, Tool[..., Any] | None] = {}
    for item in tools:
        if not isinstance(item, str | Tool):
            raise TypeError(f"tools must be tool names or Tools, got {item!r}")
        name = item if isinstance(item, str) else item.name
        if known.get(name) is not None and item is not known[name]:
            raise ValueError(f"two different tools are named {name!r}")
        known[name] = None if isinstance(item, str) else item
    return known


@final
class SchemaModel:
    """A ``Model`` that calls every tool it is offered with schema-valid arguments.

    Like pydantic-ai's ``TestModel``: when a request's transcript does not
    end in tool results (a turn starts), it answers with ``calls_per_tool``
    calls of each tool in ``request.tools`` (only those in ``tools``, when
    given), arguments generated from each tool's JSON Schema by
    ``tool_calls_for`` for ``seed`` and the request id; once the results are
    in (or when there is no tool to call) it answers ``final_text``, or, for a
    request that asks for a native typed answer (``output_mode="native"``),
    JSON generated from that answer's schema. So every
    tool body runs once per turn with arguments its own validation accepts:
    an error result means the tool failed, not its arguments. ``tools`` takes
    names, or the ``Tool``s themselves (or their ``ToolRegistry``): a tool given
    so has its schema completed by its types (see ``schema_arguments``), which
    a ``datetime``, ``time``, ``dict[int, X]`` or ``bytes`` parameter needs.
    ``calls`` lists the calls made, ``requests`` the requests
    (``record_requests``), ``call_count`` counts them. Streaming and
    cancellation are ``CallableModel``'s. A schema it cannot satisfy (a
    string ``pattern``) raises ``SchemaError`` as the model's error.
    """

    __slots__ = ("_final_text", "_model", "_per_tool", "_seed", "_tools", "calls")

    def __init__(
        self,
        tools: Iterable[str | Tool[..., Any]] | ToolRegistry | None = None,
        *,
        seed: int | str = 0,
        calls_per_tool: int = 1,
        final_text: str = "done",
        record_requests: bool = True,
    ) -> None:
        if isinstance(tools, str):
            raise TypeError("tools must be a collection of tool names or Tools, not one str")
        if type(calls_per_tool) is not int or calls_per_tool < 1:
            raise ValueError(f"calls_per_tool must be an int >= 1, got {calls_per_tool!r}")
        if type(final_text) is not str:
            raise TypeError(f"final_text must be a str, got {final_text!r}")
        self._tools = None if tools is None else _known_tools(tools)
        self._seed = seed
        self._per_tool = calls_per_tool
        self._final_text = final_text
        self._model = CallableModel(self._answer, record_requests=record_requests)
        self.calls: list[ToolCall] = []

    @property
    def requests(self) -> list[ModelRequest]:
        """Every request, in order (empty with ``record_requests=False``)."""
        return self._model.requests

    @property
    def call_count(self) -> int:
        """How many streams were asked for."""
        return self._model.call_count

    def stream(self, request: ModelRequest) -> Any:
        """Open a stream for ``request`` (as ``CallableModel.stream``)."""
        return self._model.stream(request)

    def _source(self, spec: ToolSpec) -> ToolSpec | Tool[..., Any]:
        """The ``Tool`` given for ``spec`` if it is the one offered, else the spec."""
        tool = None if self._tools is None else self._tools.get(spec.name)
        return tool if tool is not None and tool.spec() == spec else spec

    def _final(self, request: ModelRequest, response_id: str) -> ScriptedResponse:
        """``final_text``; or, when the request asks for a native answer
        (``request.output``), JSON generated from its schema for the seed."""
        if request.output is None:
            return scripted_response(response_id, self._final_text)
        rng = random.Random(f"{self._seed}/{request.id}/{request.output.name}")
        try:
            answer = generate(request.output.schema, RandomSource(rng))
        except SchemaError as exc:
            raise SchemaError(f"the answer's schema: {exc}") from None
        return scripted_response(response_id, msgspec.json.encode(answer).decode())

    def _answer(self, request: ModelRequest) -> ScriptedResponse:
        response_id = f"schema-{request.id}"
        if request.messages and type(request.messages[-1]) is ToolResultMessage:
            return self._final(request, response_id)
        specs = [s for s in request.tools if self._tools is None or s.name in self._tools]
        if self._tools is not None:
            missing = set(self._tools) - {s.name for s in specs}
            if missing:
                raise ValueError(f"SchemaModel: request {request.id!r} offers no {sorted(missing)}")
        if not specs:
            return self._final(request, response_id)
        calls = tool_calls_for(
            [self._source(s) for s in specs],
            seed=self._seed,
            calls_per_tool=self._per_tool,
            id_prefix=request.id,
        )
        self.calls.extend(calls)
        return scripted_response(response_id, calls)
