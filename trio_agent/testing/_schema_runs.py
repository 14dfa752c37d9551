"""Schema-driven runs: tool arguments generated from each tool's JSON Schema.

``SchemaModel`` calls every tool a request offers with arguments valid for
its schema, so the tools' bodies run; ``tool_calls_for`` builds such calls
for a seed, and ``schema_arguments`` is the hypothesis strategy behind them.
The generator knows the schemas ``@tool`` produces (msgspec's): objects with
``properties``/``required``/``additionalProperties``, ``$ref``/``$defs``,
``anyOf``/``oneOf``, ``enum``/``const``, integers and numbers with bounds and
``multipleOf``, strings with lengths and msgspec's formats, arrays (with
``prefixItems``, ``uniqueItems`` and lengths), booleans, null, and ``{}`` for
any JSON value. Values are kept small, within ``trio_agent.limits``.
"""

from __future__ import annotations

import base64
import math
import random
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, final

import msgspec

from ..limits import ArgumentsError, check_arguments
from ..messages import ToolCall, ToolResultMessage
from ..model import ModelRequest, ToolSpec
from ..tools import Tool, ToolRegistry
from ._callable import CallableModel
from ._scripted import ScriptedResponse, scripted_response

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

__all__ = ["SchemaError", "SchemaModel", "schema_arguments", "tool_calls_for"]

_ALPHABET = "abcxyz019 _-/ÄΩ日😀"
_EXTRA = 3
"""Elements or fields beyond a container's minimum."""
_EXTRA_CHARS = 8
"""Characters beyond a string's minimum length."""
_DEEP = 4
"""From this depth on, containers get their minimum (recursive schemas end)."""
_MANY = 96
"""From this many values on, containers get their minimum (arguments stay small)."""
_SPAN = 1000


class SchemaError(ValueError):
    """A schema the generator cannot satisfy (a ``pattern``, an impossible bound, ...)."""


class _Source(Protocol):
    def integer(self, low: int, high: int) -> int: ...


@final
class _RandomSource:
    __slots__ = ("_rng",)

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def integer(self, low: int, high: int) -> int:
        return self._rng.randint(low, high)


@final
class _DrawSource:
    __slots__ = ("_draw", "_st")

    def __init__(self, draw: Callable[[Any], Any], st: Any) -> None:
        self._draw = draw
        self._st = st

    def integer(self, low: int, high: int) -> int:
        value: int = self._draw(self._st.integers(low, high))
        return value


def _plain(value: Any) -> Any:
    """A plain-JSON copy (schemas in a ``ToolSpec`` are read-only subclasses)."""
    return msgspec.json.decode(msgspec.json.encode(value))


@final
class _Generator:
    """One argument set: draws every choice from a source, keeps count of values."""

    __slots__ = ("_defs", "_source", "_values")

    def __init__(self, source: _Source, root: Mapping[str, Any]) -> None:
        self._source = source
        self._defs: dict[str, Any] = {**root.get("definitions", {}), **root.get("$defs", {})}
        self._values = 0

    def _pick(self, options: Sequence[Any]) -> Any:
        if not options:
            raise SchemaError("an empty enum or anyOf has no value")
        return options[self._source.integer(0, len(options) - 1)]

    def _count(self, minimum: int, maximum: float, depth: int) -> int:
        """How many elements: the minimum when deep or many, else up to ``_EXTRA`` more."""
        if maximum < minimum:
            raise SchemaError(f"no length between {minimum} and {maximum}")
        if depth >= _DEEP or self._values >= _MANY:
            return minimum
        return self._source.integer(minimum, int(min(maximum, minimum + _EXTRA)))

    def _resolve(self, schema: Any) -> Any:
        seen = 0
        while isinstance(schema, Mapping) and "$ref" in schema:
            name = str(schema["$ref"]).rsplit("/", 1)[-1]
            if name not in self._defs or seen > 64:
                raise SchemaError(f"cannot resolve $ref {schema['$ref']!r}")
            schema, seen = self._defs[name], seen + 1
        return schema

    def value(self, schema: Any, depth: int) -> Any:
        """A value valid for ``schema``."""
        self._values += 1
        schema = self._resolve(schema)
        if schema is True or schema == {}:
            return self._any(depth)
        if not isinstance(schema, Mapping):
            raise SchemaError(f"unsupported schema {schema!r}")
        if "const" in schema:
            return _plain(schema["const"])
        if "enum" in schema:
            return _plain(self._pick(list(schema["enum"])))
        branches = schema.get("anyOf", schema.get("oneOf"))
        if branches is not None:
            return self.value(self._branch(list(branches), depth), depth)
        kind = schema.get("type")
        if isinstance(kind, list | tuple):
            kind = self._pick(list(kind))
        if kind is None and "properties" in schema:
            kind = "object"
        return self._typed(kind, schema, depth)

    def _branch(self, branches: list[Any], depth: int) -> Any:
        if depth >= _DEEP or self._values >= _MANY:
            for branch in branches:
                if self._resolve(branch) == {"type": "null"}:
                    return branch
        return self._pick(branches)

    def _typed(self, kind: Any, schema: Mapping[str, Any], depth: int) -> Any:
        if kind == "null":
            return None
        if kind == "boolean":
            return self._source.integer(0, 1) == 1
        if kind == "integer":
            return self._integer(schema)
        if kind == "number":
            return self._number(schema)
        if kind == "string":
            return self._string(schema)
        if kind == "array":
            return self._array(schema, depth)
        if kind == "object":
            return self._object(schema, depth)
        if kind is None and not (set(schema) & {"pattern", "allOf", "not", "if"}):
            return self._any(depth)
        raise SchemaError(f"unsupported schema {dict(schema)!r}")

    def _any(self, depth: int) -> Any:
        """Any small JSON value."""
        deep = depth >= _DEEP or self._values >= _MANY
        kind = self._source.integer(0, 4 if deep else 6)
        leaves: list[dict[str, Any]] = [
            {"type": "null"},
            {"type": "boolean"},
            {"type": "integer"},
            {"type": "number"},
            {"type": "string"},
            {"type": "array"},
            {"type": "object"},
        ]
        return self.value(leaves[kind], depth)

    def _integer(self, schema: Mapping[str, Any]) -> int:
        low, high = _bounds(schema, integer=True)
        step = schema.get("multipleOf", 1)
        if not isinstance(step, int) or step < 1:
            raise SchemaError(f"unsupported integer multipleOf {step!r}")
        first, last = -(-low // step), high // step
        if first > last:
            raise SchemaError(f"no multiple of {step} between {low} and {high}")
        return self._source.integer(first, last) * step

    def _number(self, schema: Mapping[str, Any]) -> float:
        if "multipleOf" in schema:
            low, high = _bounds(schema, integer=False)
            step = float(schema["multipleOf"])
            first, last = math.ceil(low / step), math.floor(high / step)
            if first > last:
                raise SchemaError(f"no multiple of {step} between {low} and {high}")
            return self._source.integer(first, last) * step
        low, high = _bounds(schema, integer=False)
        open_low, open_high = "exclusiveMinimum" in schema, "exclusiveMaximum" in schema
        steps = 1024
        k = self._source.integer(int(open_low), steps - int(open_high))
        value = low + (high - low) * k / steps
        if (open_low and value <= low) or (open_high and value >= high):
            value = low + (high - low) / 2
        return float(value)

    def _string(self, schema: Mapping[str, Any]) -> str:
        if "pattern" in schema:
            raise SchemaError(f"cannot generate strings matching a pattern ({schema['pattern']!r})")
        special = _format(self._source, schema)
        if special is not None:
            return special
        low = int(schema.get("minLength", 0))
        high = min(schema.get("maxLength", math.inf), low + _EXTRA_CHARS)
        if high < low:
            raise SchemaError(f"no string length between {low} and {schema['maxLength']}")
        length = self._source.integer(low, int(high))
        return "".join(self._pick(_ALPHABET) for _ in range(length))

    def _array(self, schema: Mapping[str, Any], depth: int) -> list[Any]:
        prefix = list(schema.get("prefixItems", ()))
        items = schema.get("items", {})
        low = max(int(schema.get("minItems", 0)), 0)
        high: float = schema.get("maxItems", math.inf)
        if items is False:
            high = min(high, len(prefix))
        length = self._count(low, high, depth)
        unique = bool(schema.get("uniqueItems", False))
        out: list[Any] = []
        seen: set[bytes] = set()
        for _ in range(length * 10 if unique else length):
            if len(out) == length:
                break
            index = len(out)
            element = self.value(prefix[index] if index < len(prefix) else items, depth + 1)
            key = msgspec.json.encode(element)
            if unique and key in seen:
                continue
            seen.add(key)
            out.append(element)
        if len(out) < low:
            raise SchemaError(f"could not make {low} unique items for {dict(schema)!r}")
        return out

    def _object(self, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
        properties: Mapping[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", ()))
        out: dict[str, Any] = {}
        for name, sub in properties.items():
            if name in required:
                out[name] = self.value(sub, depth + 1)
            elif self._count(0, 1, depth) == 1:
                try:
                    out[name] = self.value(sub, depth + 1)
                except SchemaError:
                    pass  # an optional field it cannot make (a pattern) is left out
        extra = schema.get("additionalProperties", not properties)
        if extra is False:
            return out
        low = max(int(schema.get("minProperties", 0)) - len(out), 0)
        count = self._count(low, schema.get("maxProperties", math.inf) - len(out), depth)
        names = schema.get("propertyNames", {"type": "string"})
        target = len(out) + count
        for _ in range(count * 10):
            if len(out) >= target:
                break
            key = self.value(names, depth + 1)
            if isinstance(key, str) and key not in out and key not in properties:
                out[key] = self.value({} if extra is True else extra, depth + 1)
        if len(out) < schema.get("minProperties", 0):
            raise SchemaError(f"could not make {schema['minProperties']} distinct keys")
        return out


def _bounds(schema: Mapping[str, Any], *, integer: bool) -> tuple[Any, Any]:
    """The closed range a number may take (open ends: ``_SPAN`` wide)."""
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    if integer:
        if low is not None:
            low = math.floor(low) + 1 if "exclusiveMinimum" in schema else math.ceil(low)
        if high is not None:
            high = math.ceil(high) - 1 if "exclusiveMaximum" in schema else math.floor(high)
    if low is None and high is None:
        low, high = -_SPAN, _SPAN
    elif low is None:
        low = high - _SPAN
    elif high is None:
        high = low + _SPAN
    if low > high:
        raise SchemaError(f"no number between {low} and {high}")
    if integer:
        low, high = max(low, -(2**63)), min(high, 2**64 - 1)
    return low, high


def _format(source: _Source, schema: Mapping[str, Any]) -> str | None:
    """A string in one of msgspec's formats (dates, times, uuids, decimals, base64)."""
    fmt, n = schema.get("format"), source.integer
    if schema.get("contentEncoding") == "base64":
        return base64.b64encode(bytes(n(0, 255) for _ in range(n(0, 6)))).decode()
    date = f"{n(1970, 2099):04d}-{n(1, 12):02d}-{n(1, 28):02d}"
    time = f"{n(0, 23):02d}:{n(0, 59):02d}:{n(0, 59):02d}"
    if fmt == "date-time":
        return f"{date}T{time}Z"
    if fmt == "date":
        return date
    if fmt == "time":
        return time
    if fmt == "uuid":
        return str(uuid.UUID(int=n(0, 2**128 - 1)))
    if fmt == "decimal":
        return f"{n(-_SPAN, _SPAN)}.{n(0, 99):02d}"
    if fmt == "duration":
        return f"P{n(0, 30)}DT{n(0, 23)}H{n(0, 59)}M"
    return None


def _generate(schema: Mapping[str, Any], source: _Source) -> dict[str, Any]:
    """Arguments for a tool whose parameters are ``schema``, checked against the limits."""
    arguments = _Generator(source, schema).value(schema, 1)
    try:
        return check_arguments(arguments)
    except ArgumentsError as exc:
        raise SchemaError(f"generated arguments break a limit: {exc}") from None


def schema_arguments(schema: Mapping[str, Any]) -> SearchStrategy[dict[str, Any]]:
    """A hypothesis strategy of arguments (a plain-JSON object) valid for ``schema``.

    Shrinks toward the smallest arguments: minimum lengths, low numbers,
    optional fields left out. Needs ``hypothesis`` (the ``test`` extra).
    """
    from hypothesis import strategies as st

    @st.composite
    def draw_arguments(draw: st.DrawFn) -> dict[str, Any]:
        return _generate(schema, _DrawSource(draw, st))

    return draw_arguments()


def _specs(tools: ToolRegistry | Iterable[ToolSpec | Tool[..., Any]]) -> list[ToolSpec]:
    if isinstance(tools, ToolRegistry):
        return list(tools.specs())
    return [t.spec() if isinstance(t, Tool) else t for t in tools]


def tool_calls_for(
    tools: ToolRegistry | Iterable[ToolSpec | Tool[..., Any]],
    *,
    seed: int | str = 0,
    calls_per_tool: int = 1,
    id_prefix: str = "call",
) -> list[ToolCall]:
    """``calls_per_tool`` calls of each tool, with arguments generated from its schema.

    Call ``k`` (from 1) of tool ``name`` has id ``{id_prefix}-{name}-{k}``; its
    arguments depend only on ``seed``, ``id_prefix``, the name and ``k``, so
    the same inputs give the same calls in any process. ``SchemaError``: a
    schema the generator cannot satisfy.
    """
    if type(calls_per_tool) is not int or calls_per_tool < 1:
        raise ValueError(f"calls_per_tool must be an int >= 1, got {calls_per_tool!r}")
    calls = []
    for spec in _specs(tools):
        for k in range(1, calls_per_tool + 1):
            rng = random.Random(f"{seed}/{id_prefix}/{spec.name}/{k}")
            try:
                arguments = _generate(spec.parameters, _RandomSource(rng))
            except SchemaError as exc:
                raise SchemaError(f"tool {spec.name!r}: {exc}") from None
            calls.append(ToolCall(f"{id_prefix}-{spec.name}-{k}", spec.name, arguments))
    return calls


@final
class SchemaModel:
    """A ``Model`` that calls every tool it is offered with schema-valid arguments.

    Like pydantic-ai's ``TestModel``: when a request's transcript does not
    end in tool results (a turn starts), it answers with ``calls_per_tool``
    calls of each tool in ``request.tools`` (only those named in ``tools``,
    when given), arguments generated from each tool's JSON Schema by
    ``tool_calls_for`` for ``seed`` and the request id; once the results are
    in (or when there is no tool to call) it answers ``final_text``. So every
    tool body runs once per turn with arguments its own validation accepts:
    an error result means the tool failed, not its arguments. ``calls``
    lists the calls made, ``requests`` the requests (``record_requests``),
    ``call_count`` counts them. Streaming and cancellation are
    ``CallableModel``'s. A schema it cannot satisfy (a string ``pattern``)
    raises ``SchemaError`` as the model's error.
    """

    __slots__ = ("_final_text", "_model", "_names", "_per_tool", "_seed", "calls")

    def __init__(
        self,
        tools: Iterable[str] | None = None,
        *,
        seed: int | str = 0,
        calls_per_tool: int = 1,
        final_text: str = "done",
        record_requests: bool = True,
    ) -> None:
        if isinstance(tools, str):
            raise TypeError("tools must be a collection of tool names, not one str")
        if type(calls_per_tool) is not int or calls_per_tool < 1:
            raise ValueError(f"calls_per_tool must be an int >= 1, got {calls_per_tool!r}")
        if type(final_text) is not str:
            raise TypeError(f"final_text must be a str, got {final_text!r}")
        self._names = None if tools is None else frozenset(tools)
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

    def _answer(self, request: ModelRequest) -> ScriptedResponse:
        response_id = f"schema-{request.id}"
        if request.messages and type(request.messages[-1]) is ToolResultMessage:
            return scripted_response(response_id, self._final_text)
        specs = [s for s in request.tools if self._names is None or s.name in self._names]
        if self._names is not None:
            missing = self._names - {s.name for s in specs}
            if missing:
                raise ValueError(f"SchemaModel: request {request.id!r} offers no {sorted(missing)}")
        if not specs:
            return scripted_response(response_id, self._final_text)
        calls = tool_calls_for(
            specs, seed=self._seed, calls_per_tool=self._per_tool, id_prefix=request.id
        )
        self.calls.extend(calls)
        return scripted_response(response_id, calls)
