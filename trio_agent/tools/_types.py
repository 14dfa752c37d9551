"""How values of a type travel as JSON (a tool's arguments, a typed answer): the
words both libraries share, and msgspec's side.

``TypeMismatch`` is a value that does not fit: its message says why and where,
by JSON path (``Expected `int`, got `str` - at `$.left```). ``MsgspecType``
is a type msgspec takes: Struct, dataclass, attrs class, TypedDict,
NamedTuple, containers, ``Literal``, enums, ``datetime``, ``date``, ``time``,
``timedelta``, ``Decimal``, ``UUID``, and ``pathlib`` paths (strings, through
``dec_hook`` and ``schema_hook``). ``needs_pydantic`` says whether a type is
pydantic's (a model, a pydantic dataclass, ``Field`` or a validator in
``Annotated``, a type defining ``__get_pydantic_core_schema__``, or whatever
holds one) without importing pydantic: before the application imports
pydantic, no type can be pydantic's. Pure; no I/O.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import pathlib
import re
import sys
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import Annotated, Any, Final, Literal, final

import attrs
import msgspec

from ..limits import OUTPUT_TOOL_NAME, cut_text, json_path
from ..messages._view import Transcript, transcript_hook
from ._schema import inline_schema

__all__ = [
    "NotJson",
    "MsgspecType",
    "TypeMismatch",
    "dec_hook",
    "enc_hook",
    "error_depth",
    "json_builtins",
    "json_bytes",
    "json_path",
    "mismatch_of",
    "msgspec_mismatch",
    "needs_pydantic",
    "pydantic_default",
    "pydantic_installed",
    "type_name",
    "unusable",
]

_OURS: Final = ("pydantic", "annotated_types")
"""Modules whose types and ``Annotated`` metadata only pydantic honours (msgspec
would ignore an ``annotated_types.Gt``: a bound silently lost)."""
_MARKS: Final = ("__get_pydantic_core_schema__", "__pydantic_validator__")
_JSON_NAMES: Final = {str: "str", int: "int", float: "float", bool: "bool", type(None): "null"}
_PATH_STEP: Final = re.compile(r"\[[^\]]*\]|\.[^.\[]*")
_ERRORS_SHOWN: Final = 8
_ERROR_CHARS: Final = 300


class TypeMismatch(ValueError):
    """A JSON value that does not fit a type: the message says why, with the JSON
    path. ``depth`` is how deep in the value the first problem is (0: the top
    value; a missing field counts as its object's), ``missing`` whether it is a
    required field that is not there (a partial answer's reader uses both)."""

    def __init__(self, message: str, depth: int = 0, *, missing: bool = False) -> None:
        super().__init__(message)
        self.depth = depth
        self.missing = missing


class NotJson(TypeMismatch):
    """Text that is not JSON at all."""


def error_depth(message: str) -> int:
    """The JSON depth of what msgspec's error ``message`` is about: 0 for the top
    value (no path), 1 for a member of it (``$.name``, ``$[3]``), ...; a key refused
    in an object (``key `k` in `$.x```) counts as a member of that object."""
    at = message.rfind("`$")
    if at < 0:
        return 0
    close = message.find("`", at + 1)
    depth = len(_PATH_STEP.findall(message, at + 2, close if close >= 0 else len(message)))
    return depth + 1 if message.endswith(" in ", 0, at) else depth


def msgspec_mismatch(exc: msgspec.ValidationError) -> TypeMismatch:
    """msgspec's refusal as a ``TypeMismatch`` (its message already has the path)."""
    message = str(exc)
    return TypeMismatch(
        message, error_depth(message), missing=message.startswith("Object missing required field")
    )


def mismatch_of(errors: Iterable[tuple[Sequence[str | int], str, bool]]) -> TypeMismatch:
    """One ``TypeMismatch`` for several problems (location, message, whether a
    required field is missing), as msgspec words one: ``message - at `$.path```,
    the first few joined by ``;``, each cut short (a message may quote a value)."""
    found = list(errors)
    texts = []
    for loc, message, _ in found[:_ERRORS_SHOWN]:
        text = cut_text(message, _ERROR_CHARS)
        texts.append(f"{text} - at `{json_path(loc)}`" if loc else text)
    if len(found) > _ERRORS_SHOWN:
        texts.append(f"and {len(found) - _ERRORS_SHOWN} more")
    depth, missing = min(
        ((len(loc) - 1, True) if gone and loc else (len(loc), False) for loc, _, gone in found),
        default=(0, False),
    )
    return TypeMismatch("; ".join(texts), depth, missing=missing)


# ---------------------------------------------------------------- the hooks


def dec_hook(kind: type, value: Any) -> Any:
    """A JSON value as a type msgspec leaves to a hook: a ``pathlib`` path from a
    string. A ``TypeError`` here is msgspec's refusal, with the path."""
    if isinstance(kind, type) and issubclass(kind, pathlib.PurePath):
        if type(value) is str:
            return kind(value)
        got = _JSON_NAMES.get(type(value), "array" if type(value) is list else "object")
        raise TypeError(f"Expected `str` (a path), got `{got}`")
    raise TypeError(f"Expected `{type_name(kind)}`")


class _Unsupported(TypeError):
    """A value ``enc_hook`` has no JSON form for either."""


def enc_hook(value: Any) -> Any:
    """A value msgspec cannot encode as JSON builtins: a ``pathlib`` path is its
    string, a ``Transcript`` its messages, a pydantic value what pydantic dumps in
    JSON mode, a subclass of ``str``, ``int`` or ``float`` its plain value;
    ``TypeError`` else."""
    if isinstance(value, pathlib.PurePath):
        return str(value)
    if type(value) is Transcript:
        return transcript_hook(value)
    kind = type(value)
    if "pydantic" in sys.modules and _pydantic_class(kind):
        serializer = getattr(kind, "__pydantic_serializer__", None)
        if serializer is not None:  # a model, a pydantic dataclass
            return serializer.to_python(value, mode="json")
        pydantic = sys.modules["pydantic"]
        try:
            adapter = pydantic.TypeAdapter(kind)
        except pydantic.PydanticUserError:  # not a value pydantic dumps (a FieldInfo)
            adapter = None
        if adapter is not None:
            return adapter.dump_python(value, mode="json")
    for base, plain in _SCALARS:  # a subclass msgspec refuses (numpy.str_, Markup): its value
        if isinstance(value, base):  # (by the base's own method: not an override's)
            return plain(value)
    raise _Unsupported(f"Encoding objects of type {kind.__qualname__} is unsupported")


_SCALARS: Final[tuple[tuple[type, Callable[[Any], Any]], ...]] = (
    (str, str.__str__),
    (int, int.__int__),
    (float, float.__float__),
)
_plain_json = msgspec.json.Encoder().encode
_hooked_json = msgspec.json.Encoder(enc_hook=enc_hook).encode


def json_bytes(value: Any) -> bytes:
    """``value`` as compact JSON, paths and pydantic values as ``enc_hook`` gives
    them. What neither msgspec nor the hook takes raises msgspec's own error (it
    says what: a tuple key, a lone surrogate...); an error of pydantic's, or of
    code the encoding ran, propagates as it is. The plain encoding comes first, so
    a value without such types costs what it did."""
    try:
        return _plain_json(value)
    except TypeError as exc:
        try:
            return _hooked_json(value)
        except _Unsupported:
            raise exc from None


def json_builtins(value: Any) -> Any:
    """``value`` as JSON builtins (dict keys as strings), as ``json_bytes`` encodes."""
    try:
        return msgspec.to_builtins(value, str_keys=True)
    except TypeError as exc:
        try:
            return msgspec.to_builtins(value, str_keys=True, enc_hook=enc_hook)
        except _Unsupported:
            raise exc from None


# ------------------------------------------------------------ which library


def needs_pydantic(kind: Any) -> bool:
    """Whether ``kind`` is, or holds, a type or constraint only pydantic takes.
    Never imports anything; when neither pydantic nor annotated_types is
    imported the answer is False at once."""
    if not any(name in sys.modules for name in _OURS):
        return False
    return _holds(kind, set())


def pydantic_default(default: object) -> bool:
    """Whether a parameter's default is pydantic's (``x: int = Field(3, gt=0)``)."""
    return "pydantic" in sys.modules and _pydantic_class(type(default))


def _pydantic_class(cls: Any) -> bool:
    try:
        return bool(getattr(cls, "__module__", "").startswith(_OURS)) or any(
            hasattr(cls, mark) for mark in _MARKS
        )
    except Exception:  # a class whose attributes run code of its own
        return False


def _holds(kind: Any, seen: set[int]) -> bool:
    """``needs_pydantic`` by walking the type (each part once: types may recur)."""
    if id(kind) in seen:
        return False
    seen.add(id(kind))
    origin = typing.get_origin(kind)
    if origin is Annotated:
        metadata = kind.__metadata__
        if any(_pydantic_class(m if isinstance(m, type) else type(m)) for m in metadata):
            return True
        return _holds(kind.__origin__, seen)
    if origin is Literal:
        return False
    if origin is not None:
        return _holds(origin, seen) or any(_holds(arg, seen) for arg in typing.get_args(kind))
    if not isinstance(kind, type):  # a ``type X = ...`` alias, a NewType: what they name
        inner = getattr(kind, "__value__", None) or getattr(kind, "__supertype__", None)
        return inner is not None and _holds(inner, seen)
    if _pydantic_class(kind):
        return True
    return any(_holds(member, seen) for member in _members(kind))


def _members(cls: type) -> list[Any]:
    """The annotated member types of a class msgspec reads by field."""
    if not (
        issubclass(cls, msgspec.Struct)
        or dataclasses.is_dataclass(cls)
        or attrs.has(cls)
        or typing.is_typeddict(cls)
        or (issubclass(cls, tuple) and hasattr(cls, "_fields"))
    ):
        return []
    try:
        return list(typing.get_type_hints(cls, include_extras=True).values())
    except Exception:  # a forward reference that does not resolve: msgspec will say
        return []


def pydantic_installed() -> bool:
    """Whether pydantic can be imported (without importing it)."""
    try:
        return importlib.util.find_spec("pydantic") is not None
    except (ImportError, ValueError):  # hidden (None in sys.modules), or broken
        return False


def type_name(kind: Any) -> str:
    """How a message names a type: ``Foo``, ``list[Foo]``."""
    if isinstance(kind, type) and typing.get_origin(kind) is None:
        return kind.__qualname__
    return repr(kind).replace("typing.", "")


def unusable(kind: Any, why: str) -> str:
    """Why ``kind`` cannot be a parameter or an output, and what to use instead."""
    if needs_pydantic(kind):
        advice = (
            "it holds pydantic's types, so pydantic validates all of it: use pydantic "
            "models, dataclasses, TypedDicts and standard types in it (not msgspec "
            "Structs or attrs classes)"
        )
    else:
        advice = "use a msgspec Struct, a dataclass, a TypedDict or a pydantic model"
        if not pydantic_installed():
            advice += " (pip install pydantic)"
    lines = [line.strip() for line in why.strip().splitlines() if line.strip()]
    detail = f" ({cut_text(lines[-1], _ERROR_CHARS)})" if lines else ""
    return f"type {type_name(kind)} cannot be described as JSON{detail}: {advice}"


# ------------------------------------------------------------ msgspec's side


@final
class MsgspecType:
    """A type msgspec takes: its schema, and the conversion of a JSON value or of
    JSON text to it. ``wrapped``: the value travels as ``{"response": value}``
    (a typed answer whose schema is not an object), and is unwrapped here.
    ``TypeError`` (msgspec's) for a type msgspec cannot describe."""

    __slots__ = ("_decoder", "kind", "schema", "travels", "wrapped")

    def __init__(self, kind: Any, *, wrapped: bool = False) -> None:
        self.kind: Any = kind
        self.wrapped = wrapped
        travels = kind
        if wrapped:
            travels = msgspec.defstruct(
                OUTPUT_TOOL_NAME, [("response", kind)], forbid_unknown_fields=True
            )
        self.schema = inline_schema(travels)
        self.travels: Any = travels
        """What the JSON is converted to: the type, or its ``{"response": ...}`` Struct."""
        self._decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(travels, dec_hook=dec_hook)

    def convert(self, value: Any) -> Any:
        """``value`` (plain JSON) as the type, or ``TypeMismatch``. JSON object
        keys are strings: they are read as a ``dict[int, X]``'s ints."""
        try:
            converted = msgspec.convert(value, self.travels, str_keys=True, dec_hook=dec_hook)
        except msgspec.ValidationError as exc:
            raise msgspec_mismatch(exc) from None
        return converted.response if self.wrapped else converted

    def decode(self, text: str | bytes) -> Any:
        """JSON ``text`` as the type; ``NotJson`` or ``TypeMismatch`` if it is not."""
        try:
            decoded = self._decoder.decode(text)
        except msgspec.ValidationError as exc:
            raise msgspec_mismatch(exc) from None
        except msgspec.DecodeError as exc:
            raise NotJson(str(exc)) from None
        return decoded.response if self.wrapped else decoded
