"""Values for a JSON Schema: the generator behind ``schema_arguments`` and ``SchemaModel``.

Every choice is drawn from a ``Source`` (a seeded ``random.Random``, or
hypothesis), so the same draws give the same value. The values aim at what
the tools' own validation (msgspec) accepts, not only at the JSON Schema:
a float ``multipleOf`` is checked the way msgspec checks it, and an object
whose keys the schema leaves open gets digit keys ("0", "17"), which an
``int``, ``float``, ``Decimal`` or ``str`` key accepts alike.

Besides JSON Schema's own keywords and msgspec's formats (``date-time``,
``time``, ``partial-time``, ``date``, ``duration``, ``uuid``, ``decimal``,
``contentEncoding: base64``), the generator reads what ``_schema_runs`` adds
from a tool's Python types: the formats ``x-date-time`` and ``x-time`` (with
or without an offset), ``local-date-time`` (no offset), ``x-minBytes`` and
``x-maxBytes`` (exact byte lengths), and ``propertyNames`` of type
``integer``/``number`` or an ``enum`` of numbers (keys are their text).
"""

from __future__ import annotations

import base64
import math
import random
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, final

import msgspec

from ..limits import ArgumentsError, check_arguments

__all__ = ["DrawSource", "RandomSource", "SchemaError", "Source", "generate", "plain"]

_ALPHABET = tuple("abcxyz019 _-/ÄΩ日😀")
_EXTRA = 3
"""Elements or fields beyond a container's minimum."""
_EXTRA_CHARS = 8
"""Characters beyond a string's minimum length."""
_EXTRA_BYTES = 6
"""Bytes beyond a base64 string's minimum."""
_DEEP = 4
"""From this depth on, containers get their minimum (recursive schemas end)."""
_MANY = 96
"""From this many values on, containers get their minimum (arguments stay small)."""
_SPAN = 1000
"""The width of a number range left open at one or both ends."""
_SCAN = 4096
"""Candidates tried for a float ``multipleOf`` before giving up."""
_HASHABLE = {"anyOf": [{"type": t} for t in ("null", "boolean", "integer", "number", "string")]}
"""Any value a Python set can hold (the elements of ``set[Any]``)."""


class SchemaError(ValueError):
    """A schema the generator cannot satisfy (a ``pattern``, an impossible bound, ...)."""


class Source(Protocol):
    def integer(self, low: int, high: int) -> int: ...


@final
class RandomSource:
    """Choices from a seeded ``random.Random``."""

    __slots__ = ("_rng",)

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def integer(self, low: int, high: int) -> int:
        return self._rng.randint(low, high)


@final
class DrawSource:
    """Choices drawn by hypothesis (so they shrink toward ``low``)."""

    __slots__ = ("_draw", "_st")

    def __init__(self, draw: Callable[[Any], Any], st: Any) -> None:
        self._draw = draw
        self._st = st

    def integer(self, low: int, high: int) -> int:
        value: int = self._draw(self._st.integers(low, high))
        return value


def plain(value: Any) -> Any:
    """A plain-JSON copy (schemas in a ``ToolSpec`` are read-only subclasses)."""
    return msgspec.json.decode(msgspec.json.encode(value))


def _number_keyword(schema: Mapping[str, Any], key: str) -> int | float | None:
    """A numeric keyword's value (None when absent); ``SchemaError`` if not a finite number."""
    value = schema.get(key)
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value):
        raise SchemaError(f"{key} must be a finite number, got {value!r}")
    number: int | float = value
    return number


def _length_keyword(schema: Mapping[str, Any], key: str, default: float) -> float:
    """A length keyword's value; ``SchemaError`` if not a non-negative integer."""
    value = schema.get(key)
    if value is None:
        return default
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is not int or value < 0:
        raise SchemaError(f"{key} must be a non-negative integer, got {value!r}")
    return value


def _lengths(schema: Mapping[str, Any], what: str) -> tuple[int, float]:
    """``min{what}`` and ``max{what}`` (``inf`` when absent); ``SchemaError`` if min > max."""
    low = int(_length_keyword(schema, f"min{what}", 0))
    high = _length_keyword(schema, f"max{what}", math.inf)
    if low > high:
        raise SchemaError(f"min{what} {low} > max{what} {high}: nothing fits")
    return low, high


def _end(schema: Mapping[str, Any], closed: str, opened: str) -> tuple[float | None, bool]:
    """One end of a number range: its value (None: open-ended) and whether it is exclusive."""
    inclusive, exclusive = _number_keyword(schema, closed), schema.get(opened)
    if type(exclusive) is bool:  # draft 4: a flag on minimum/maximum
        return inclusive, exclusive and inclusive is not None
    exclusive = _number_keyword(schema, opened)
    if exclusive is None or inclusive is None:
        return (inclusive, False) if exclusive is None else (exclusive, True)
    tighter = exclusive >= inclusive if closed == "minimum" else exclusive <= inclusive
    return (exclusive, True) if tighter else (inclusive, False)


def _number_bounds(schema: Mapping[str, Any]) -> tuple[float, float, bool, bool]:
    """``(low, high, low_open, high_open)``; an end left open is ``_SPAN`` from the other."""
    low, low_open = _end(schema, "minimum", "exclusiveMinimum")
    high, high_open = _end(schema, "maximum", "exclusiveMaximum")
    if low is None:
        low = -_SPAN if high is None else high - _SPAN
        high = _SPAN if high is None else high
    elif high is None:
        high = low + _SPAN
    if low > high or (low == high and (low_open or high_open)):
        raise SchemaError(f"no number between {low} and {high} ({_range_text(schema)})")
    return low, high, low_open, high_open


def _range_text(schema: Mapping[str, Any]) -> str:
    keys = ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "multipleOf")
    return ", ".join(f"{k}={schema[k]!r}" for k in keys if k in schema) or "no bounds"


def _integer_bounds(schema: Mapping[str, Any]) -> tuple[int, int]:
    """The closed integer range (within the ``int64``/``uint64`` range JSON arguments allow)."""
    low, high, low_open, high_open = _number_bounds(schema)
    first = math.floor(low) + 1 if low_open else math.ceil(low)
    last = math.ceil(high) - 1 if high_open else math.floor(high)
    first, last = max(first, -(2**63)), min(last, 2**64 - 1)
    if first > last:
        raise SchemaError(
            f"no integer between {low} and {high} ({_range_text(schema)}) "
            "in the range JSON arguments allow (-2**63 to 2**64 - 1)"
        )
    return first, last


def _step(schema: Mapping[str, Any]) -> int | float | None:
    """``multipleOf`` (None when absent); ``SchemaError`` unless a number > 0."""
    step = _number_keyword(schema, "multipleOf")
    if step is not None and step <= 0:
        raise SchemaError(f"multipleOf must be > 0, got {step!r}")
    return step


def _inside(value: float, low: float, high: float, low_open: bool, high_open: bool) -> bool:
    above = value > low if low_open else value >= low
    below = value < high if high_open else value <= high
    return above and below


def _near(start: int, first: int, last: int) -> Iterator[int]:
    """``start``, then its neighbours, then 0 and the powers of two, then from ``first`` on."""
    for distance in range(64):
        yield from (k for k in {start - distance, start + distance} if first <= k <= last)
    powers = (sign * 2**j for j in range(1100) for sign in (1, -1))
    yield from (k for k in (0, *powers) if first <= k <= last)
    yield from range(first, min(last, first + _SCAN) + 1)


def _base64_sizes(schema: Mapping[str, Any]) -> tuple[int, float]:
    """The byte counts a base64 string may encode: exact when the tool's types gave them
    (``x-minBytes``/``x-maxBytes``), else derived from its length in characters, where
    msgspec writes ``4 * ceil(n / 3)`` for ``n`` bytes (which loses the exact count)."""
    low_chars, high_chars = _lengths(schema, "Length")
    quads = math.inf if high_chars == math.inf else int(high_chars) // 4
    low = int(_length_keyword(schema, "x-minBytes", 3 * -(-low_chars // 4)))
    high = _length_keyword(schema, "x-maxBytes", 3 * quads - 2)
    if low > high:  # no count fits every reading of the schema: one that fits some
        low, high = max(3 * -(-low_chars // 4) - 2, 0), 3 * quads
    if low > high:
        raise SchemaError(f"no bytes fit {dict(schema)!r}")
    return low, high


_DATETIMES = frozenset(
    {"date", "date-time", "time", "x-date-time", "x-time", "local-date-time", "partial-time"}
)


def _datetime(n: Callable[[int, int], int], fmt: str) -> str:
    """A date, time or date-time in one of ``_DATETIMES``, as msgspec reads them."""
    date = f"{n(1970, 2099):04d}-{n(1, 12):02d}-{n(1, 28):02d}"
    time = f"{n(0, 23):02d}:{n(0, 59):02d}:{n(0, 59):02d}"
    digits = n(0, 6)
    if digits:
        time += "." + "".join(str(n(0, 9)) for _ in range(digits))
    if fmt == "date":
        return date
    if fmt in ("x-date-time", "x-time"):
        fmt = (
            fmt[2:] if n(0, 1) else ("local-date-time" if fmt == "x-date-time" else "partial-time")
        )
    if fmt in ("date-time", "time"):
        minutes = n(-14 * 4, 14 * 4) * 15
        zone = "Z" if n(0, 1) == 0 else f"{'-' if minutes < 0 else '+'}{_hhmm(abs(minutes))}"
        return f"{date}T{time}{zone}" if fmt == "date-time" else f"{time}{zone}"
    return f"{date}T{time}" if fmt == "local-date-time" else time


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _format(n: Callable[[int, int], int], fmt: Any) -> str | None:
    """A string in one of msgspec's formats (or ours, see the module), None for another."""
    if not isinstance(fmt, str):
        return None
    if fmt == "uuid":
        return str(uuid.UUID(int=n(0, 2**128 - 1)))
    if fmt == "decimal":
        return f"{'-' if n(0, 1) else ''}{n(0, _SPAN)}.{n(0, 99):02d}"
    if fmt == "duration":
        sign = "-" if n(0, 3) == 0 else ""
        return f"{sign}P{n(0, 30)}DT{n(0, 23)}H{n(0, 59)}M{n(0, 59)}S"
    return _datetime(n, fmt) if fmt in _DATETIMES else None


def _key_text(key: Any) -> str | None:
    """The object key for a generated key value: a string, or a number's text."""
    if isinstance(key, str):
        return key
    if type(key) in (int, float):
        return repr(key)
    return None


def _key_schema(names: Any) -> Any:
    """``propertyNames`` as a schema to generate from: without a ``type`` it is a string's."""
    if not isinstance(names, Mapping):
        return names
    if set(names) & {"type", "enum", "const", "anyOf", "oneOf", "$ref"}:
        return names
    return {**names, "type": "string"}


@final
class _Generator:
    """One argument set: draws every choice from a source, keeps count of values."""

    __slots__ = ("_defs", "_source", "_values")

    def __init__(self, source: Source, root: Mapping[str, Any]) -> None:
        self._source = source
        self._defs: dict[str, Any] = {**root.get("definitions", {}), **root.get("$defs", {})}
        self._values = 0

    def _pick(self, options: Sequence[Any], what: str = "enum or anyOf") -> Any:
        if not isinstance(options, Sequence) or isinstance(options, str):
            raise SchemaError(f"an {what} must be a list, got {options!r}")
        if not options:
            raise SchemaError(f"an empty {what} has no value")
        return options[self._source.integer(0, len(options) - 1)]

    def _deep(self, depth: int) -> bool:
        return depth >= _DEEP or self._values >= _MANY

    def _count(self, minimum: int, maximum: float, depth: int) -> int:
        """How many elements: the minimum when deep or many, else up to ``_EXTRA`` more."""
        if maximum < minimum:
            raise SchemaError(f"no length between {minimum} and {maximum}")
        if self._deep(depth):
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
            return plain(schema["const"])
        if "enum" in schema:
            return plain(self._pick(schema["enum"], "enum"))
        branches = schema.get("anyOf", schema.get("oneOf"))
        if branches is not None:
            return self.value(self._branch(branches, depth), depth)
        kind = schema.get("type")
        if isinstance(kind, list | tuple):
            kind = self._pick(kind, "type list")
        if kind is None and "properties" in schema:
            kind = "object"
        return self._typed(kind, schema, depth)

    def _branch(self, branches: Sequence[Any], depth: int) -> Any:
        if self._deep(depth) and isinstance(branches, Sequence):
            for branch in branches:
                if self._resolve(branch) == {"type": "null"}:
                    return branch
        return self._pick(branches, "anyOf")

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
        kinds = ("null", "boolean", "integer", "number", "string", "array", "object")
        kind = kinds[self._source.integer(0, 4 if self._deep(depth) else 6)]
        return self.value({"type": kind}, depth)

    def _integer(self, schema: Mapping[str, Any]) -> int:
        low, high = _integer_bounds(schema)
        step = _step(schema) or 1
        if type(step) is float and step.is_integer():
            step = int(step)
        if type(step) is not int:
            raise SchemaError(f"unsupported integer multipleOf {step!r} (not a whole number)")
        first, last = -(-low // step), high // step
        if first > last:
            raise SchemaError(f"no multiple of {step} between {low} and {high}")
        return self._source.integer(first, last) * step

    def _number(self, schema: Mapping[str, Any]) -> float:
        low, high, low_open, high_open = _number_bounds(schema)
        step = _step(schema)
        if step is not None:
            return self._multiple(schema, step)
        steps = 1024
        share = self._source.integer(int(low_open), steps - int(high_open)) / steps
        for value in (low * (1 - share) + high * share, low / 2 + high / 2):
            if _inside(value, low, high, low_open, high_open):
                return float(value)
        raise SchemaError(f"no float between {low} and {high} ({_range_text(schema)})")

    def _multiple(self, schema: Mapping[str, Any], step: float) -> float:
        """A float msgspec takes for a multiple of ``step``: it checks ``fmod(x, step) == 0``,
        which ``k * step`` often fails (``7 * 0.1``), so candidates are checked the same way."""
        low, high, low_open, high_open = _number_bounds(schema)
        first, last = math.ceil(low / step), math.floor(high / step)
        if first > last:
            raise SchemaError(f"no multiple of {step} between {low} and {high}")
        for k in _near(self._source.integer(first, last), first, last):
            value = float(k) * step
            if math.fmod(value, step) == 0 and _inside(value, low, high, low_open, high_open):
                return value + 0.0  # no -0.0
        raise SchemaError(
            f"no float msgspec accepts ({_range_text(schema)}): it needs fmod(x, {step}) == 0"
        )

    def _string(self, schema: Mapping[str, Any]) -> str:
        if "pattern" in schema:
            raise SchemaError(f"cannot generate strings matching a pattern ({schema['pattern']!r})")
        if schema.get("contentEncoding") == "base64":
            return self._base64(schema)
        special = _format(self._source.integer, schema.get("format"))
        if special is not None:
            return special
        low, high = _lengths(schema, "Length")
        length = self._source.integer(low, int(min(high, low + _EXTRA_CHARS)))
        return "".join(self._pick(_ALPHABET) for _ in range(length))

    def _base64(self, schema: Mapping[str, Any]) -> str:
        low, high = _base64_sizes(schema)
        size = self._source.integer(low, int(min(high, low + _EXTRA_BYTES)))
        return base64.b64encode(bytes(self._source.integer(0, 255) for _ in range(size))).decode()

    def _array(self, schema: Mapping[str, Any], depth: int) -> list[Any]:
        prefix = list(schema.get("prefixItems", ()))
        items = schema.get("items", {})
        low, high = _lengths(schema, "Items")
        if items is False:
            high = min(high, len(prefix))
        length = self._count(low, high, depth)
        unique = bool(schema.get("uniqueItems", False))
        if unique and (items is True or items == {}):
            items = _HASHABLE  # a set's elements: lists and objects cannot be in one
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
        properties: Any = schema.get("properties", {})
        if not isinstance(properties, Mapping):
            raise SchemaError(f"properties must be an object, got {properties!r}")
        low, high = _lengths(schema, "Properties")
        extra = schema.get("additionalProperties", not properties)
        out = self._required(schema, properties, extra, depth)
        if len(out) > high:
            raise SchemaError(f"{len(out)} required properties > maxProperties {high}")
        optional = [name for name in properties if name not in out]
        for name in optional:
            if len(out) < high and self._count(0, 1, depth) == 1:
                self._optional(out, name, properties[name], depth)
        if extra is not False:
            self._extras(out, schema, extra, properties, depth, low, high)
        for name in optional:  # minProperties not reached yet: the other optional ones
            if len(out) < low and name not in out:
                self._optional(out, name, properties[name], depth)
        if len(out) < low:
            raise SchemaError(f"could not make {low} distinct properties for {dict(schema)!r}")
        return out

    def _required(
        self, schema: Mapping[str, Any], properties: Mapping[str, Any], extra: Any, depth: int
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in schema.get("required", ()):
            if name in properties:
                out[name] = self.value(properties[name], depth + 1)
            elif extra is False:
                raise SchemaError(f"required {name!r} is not in properties, nor allowed as extra")
            else:
                out[name] = self.value({} if extra is True else extra, depth + 1)
        return out

    def _optional(self, out: dict[str, Any], name: str, schema: Any, depth: int) -> None:
        try:
            out[name] = self.value(schema, depth + 1)
        except SchemaError:
            pass  # an optional field it cannot make (a pattern) is left out

    def _extras(
        self,
        out: dict[str, Any],
        schema: Mapping[str, Any],
        extra: Any,
        properties: Mapping[str, Any],
        depth: int,
        low: int,
        high: float,
    ) -> None:
        """Add keys beyond ``properties``: from ``propertyNames`` if given, else digit keys."""
        count = self._count(max(low - len(out), 0), high - len(out), depth)
        names = schema.get("propertyNames")
        target = len(out) + count
        for _ in range(count * 10):
            if len(out) >= target:
                break
            if names is None:
                key: str | None = str(self._source.integer(0, 999))
            else:
                key = _key_text(self.value(_key_schema(names), depth + 1))
            if key is not None and key not in out and key not in properties:
                out[key] = self.value({} if extra is True else extra, depth + 1)


def generate(schema: Mapping[str, Any], source: Source) -> dict[str, Any]:
    """Arguments for a tool whose parameters are ``schema``, checked against the limits."""
    if not isinstance(schema, Mapping):
        raise SchemaError(f"a tool's parameters must be an object schema, got {schema!r}")
    arguments = _Generator(source, schema).value(schema, 1)
    if type(arguments) is not dict:
        raise SchemaError(f"the schema makes {type(arguments).__name__}, not an object")
    try:
        return check_arguments(arguments)
    except ArgumentsError as exc:
        raise SchemaError(f"generated arguments break a limit: {exc}") from None
